"""``lockgate worker --metrics-port``: Prometheus metrics, health and readiness, job logs.

Everything is real: Redis, the HTTP endpoint (scraped with urllib and parsed with
prometheus_client's own parser), the worker processes of the CLI tests. A scrape from an
async test runs in a thread: the queue gauges are read on the worker's event loop, which
a blocking call in the test would hold up.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.parser import text_string_to_metric_families
from test_extras import run_without

from conftest import running, wait_until, wait_until_sync, worker_for
from free_ports import free_port
from lockgate import App, CancelOutcome, ConfigError, RetryableError, current_job
from lockgate.ops.inspect import queue_stats
from lockgate.ops.metrics import READY_METRIC, SupervisorMetrics, WorkerMetrics
from lockgate.ops.process_metrics import BUILD_INFO
from lockgate.worker.loop import Worker
from lockgate.worker.registry import lockgate_version

HERE = Path(__file__).parent
LOCAL = "127.0.0.1"
RUN_TIMEOUT = 60  # loose: a bound against hangs
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def get(url: str) -> tuple[int, str]:
    """Status and body of a GET (an error status is an answer too)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def scrape(base: str) -> Samples:
    """Every sample of ``/metrics``: (name, labels) -> value."""
    status, text = get(f"{base}/metrics")
    assert status == 200, text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def of(samples: Samples, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    """The samples of one metric whose labels include ``labels``: labels -> value."""
    wanted = set(labels.items())
    return {key: value for (n, key), value in samples.items() if n == name and wanted <= key}


def by(samples: Samples, name: str, *label_names: str) -> dict[tuple[str, ...], float]:
    """The samples of one metric keyed by the values of ``label_names``."""
    return {
        tuple(dict(key)[label] for label in label_names): value
        for key, value in of(samples, name).items()
    }


def answer(url: str) -> int | None:
    """The status of a GET; None while nothing listens."""
    try:
        return get(url)[0]
    except OSError:
        return None


async def ascrape(base: str) -> Samples:
    return await asyncio.to_thread(scrape, base)


async def status_of(url: str) -> int:
    return (await asyncio.to_thread(get, url))[0]


# --- one worker in this process --------------------------------------------------------


@contextlib.asynccontextmanager
async def served(worker: Worker) -> AsyncIterator[str]:
    """The worker's metrics served on a free port meanwhile: their base URL."""
    metrics = WorkerMetrics(worker, port=0, host=LOCAL)
    assert metrics.server is not None
    metrics.start(asyncio.get_running_loop())
    try:
        yield f"http://{LOCAL}:{metrics.server.port}"
    finally:
        metrics.close()


async def counted(
    base: str,
    name: str,
    labels: tuple[str, ...],
    done: Callable[[dict[tuple[str, ...], float]], bool],
) -> Samples:
    """Scrape until the samples of ``name`` (keyed by ``labels``) satisfy ``done``."""

    async def scraped() -> Samples | None:
        samples = await ascrape(base)
        return samples if done(by(samples, name, *labels)) else None

    return await wait_until(scraped, message=f"{name} as expected")


async def gauges_match(app: App, base: str) -> bool:
    """Whether the queue gauges say what queue_stats says."""
    stats = await queue_stats(app)
    expected = {
        (row.queue, row.level, state): float(getattr(row, state))
        for row in stats.levels
        for state in ("waiting", "pending", "delayed")
    }
    samples = await ascrape(base)
    jobs = by(samples, "lockgate_queue_jobs", "queue", "level", "state")
    return jobs == expected and by(samples, "lockgate_dead_letters") == {(): stats.dead_letters}


def declare(app: App, release: asyncio.Event) -> dict[str, Any]:
    """The tasks: each ends one way."""

    @app.task
    async def ok(n: int) -> None:
        pass

    @app.task(retries=1, backoff=0.01)
    async def flaky() -> None:
        if current_job().attempt == 1:
            raise RetryableError("once")

    @app.task(retries=0)
    async def doomed() -> None:
        raise ValueError("never works")

    @app.task(idempotent=True)
    async def once() -> None:
        pass

    @app.task
    async def blocker() -> None:
        await release.wait()

    return {"ok": ok, "flaky": flaky, "doomed": doomed, "once": once, "blocker": blocker}


ENDED = {
    ("ok", "critical", "succeeded"): 3.0,
    ("ok", "low", "succeeded"): 4.0,
    ("flaky", "normal", "retried"): 2.0,
    ("flaky", "normal", "succeeded"): 2.0,
    ("doomed", "normal", "dead_lettered"): 1.0,
    ("once", "normal", "succeeded"): 1.0,
}


async def test_the_counters_histograms_and_gauges_equal_what_ran(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    tasks = declare(app, asyncio.Event())  # never set: the blocker runs until cancelled
    for n in range(3):
        await tasks["ok"].enqueue_async(n, priority="critical")
    for n in range(4):
        await tasks["ok"].enqueue_async(n, priority="low")
    for _ in range(2):
        await tasks["flaky"].enqueue_async()
    await tasks["doomed"].enqueue_async()
    await tasks["once"].enqueue_async(job_id="dup")
    await tasks["blocker"].enqueue_async(job_id="block")

    worker = worker_for(app)
    metrics = WorkerMetrics(worker, port=0, host=LOCAL)
    assert metrics.server is not None
    base = f"http://{LOCAL}:{metrics.server.port}"
    metrics.start(asyncio.get_running_loop())
    outcomes = ("task", "level", "outcome")
    try:
        async with running(worker):
            # During the run: once "dup" has run, the same job again is a duplicate.
            await counted(base, "lockgate_jobs_total", outcomes,
                          lambda got: got.get(("once", "normal", "succeeded")) == 1)  # fmt: skip
            await tasks["once"].enqueue_async(job_id="dup")
            await counted(base, "lockgate_claims_skipped_total", ("task",),
                          lambda got: got == {("once",): 1})  # fmt: skip
            during = await counted(base, "lockgate_jobs_total", outcomes, ENDED.__eq__)
            assert by(during, "lockgate_jobs_started_total", "task", "level") == {
                ("ok", "critical"): 3, ("ok", "low"): 4, ("flaky", "normal"): 4,
                ("doomed", "normal"): 1, ("once", "normal"): 2, ("blocker", "normal"): 1,
            }  # fmt: skip
            assert by(during, "lockgate_workers_ready") == {(): 1}
            # The queue gauges are read at most once a second: they catch up.
            await wait_until(lambda: gauges_match(app, base), message="gauges as queue_stats")
            stats = await queue_stats(app)
            assert [(r.level, r.pending) for r in stats.levels if r.pending] == [("normal", 1)]
            assert stats.dead_letters == 1

            assert await app.cancel_async("block") is CancelOutcome.CANCELLING  # told to stop
            await counted(base, "lockgate_jobs_total", outcomes,
                          lambda got: got.get(("blocker", "normal", "cancelled")) == 1)  # fmt: skip
        after = await ascrape(base)
        assert await status_of(f"{base}/readyz") == 503  # stopped
    finally:
        metrics.close()

    assert by(after, "lockgate_jobs_total", "task", "level", "outcome") == {
        **ENDED, ("blocker", "normal", "cancelled"): 1.0,
    }  # fmt: skip
    assert by(after, "lockgate_claims_skipped_total", "task") == {("once",): 1}
    assert of(after, "lockgate_jobs_put_back_total") == {}
    # Every job's first attempt is one wait, whether its run began or it ended unrun (13
    # jobs: the duplicate never ran, its start and wait counted when it was settled);
    # every run that began is one run.
    assert by(after, "lockgate_job_wait_seconds_count", "level") == {
        ("critical",): 3, ("low",): 4, ("normal",): 6,
    }  # fmt: skip
    assert by(after, "lockgate_job_run_seconds_count", "task") == {
        ("ok",): 7, ("flaky",): 4, ("doomed",): 1, ("once",): 1, ("blocker",): 1,
    }  # fmt: skip
    assert by(after, "lockgate_workers_ready") == {(): 0}
    assert by(after, BUILD_INFO, "version", "python_version") == {
        (lockgate_version(), platform.python_version()): 1
    }
    assert by(after, "process_resident_memory_bytes")[()] > 0
    assert by(after, "process_cpu_seconds_total")[()] > 0
    assert by(after, "python_gc_collections_total", "generation")
    assert by(after, "python_info", "implementation")


async def test_a_rate_limited_put_back_is_no_start_and_its_wait_runs_to_its_start(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    @app.task(rate_limit="4/s")  # one start every 250 ms: three at once, two put back
    async def paced(n: int) -> None:
        pass

    app.enqueue_many([paced.message(n, priority="critical") for n in range(3)])
    worker = worker_for(app)
    async with served(worker) as base, running(worker):
        after = await counted(base, "lockgate_jobs_total", ("task", "outcome"),
                              lambda got: got == {("paced", "succeeded"): 3})  # fmt: skip
    put_back = by(after, "lockgate_jobs_put_back_total", "task", "level", "reason")
    assert list(put_back) == [("paced", "critical", "rate_limited")]
    assert put_back[("paced", "critical", "rate_limited")] >= 2
    assert by(after, "lockgate_jobs_started_total", "task", "level") == {("paced", "critical"): 3}
    assert by(after, "lockgate_job_run_seconds_count", "task") == {("paced",): 3}
    # One wait per job, ending when its run began: the last of three spaced 250 ms apart
    # waited at least 500 ms (on the limiter's clock), so not all three are under 250 ms.
    assert by(after, "lockgate_job_wait_seconds_count", "level") == {("critical",): 3}
    under = by(after, "lockgate_job_wait_seconds_bucket", "level", "le")
    assert under[("critical", "0.25")] < 3


async def test_healthz_always_readyz_only_while_consuming(make_app: Callable[..., App]) -> None:
    app = make_app()
    worker = worker_for(app)
    metrics = WorkerMetrics(worker, port=0, host=LOCAL)
    assert metrics.server is not None
    base = f"http://{LOCAL}:{metrics.server.port}"
    metrics.start(asyncio.get_running_loop())
    try:
        assert await status_of(f"{base}/healthz") == 200
        assert await status_of(f"{base}/readyz") == 503  # not connected yet
        assert await status_of(f"{base}/nowhere") == 404
        async with running(worker):

            async def ready() -> bool:
                return await status_of(f"{base}/readyz") == 200

            await wait_until(ready, message="ready once connected and consuming")
            assert worker.ready
            assert await status_of(f"{base}/healthz") == 200
        assert await status_of(f"{base}/readyz") == 503  # stopped
        assert await status_of(f"{base}/healthz") == 200
    finally:
        metrics.close()


def test_a_port_in_use_is_a_config_error_before_connecting(make_app: Callable[..., App]) -> None:
    app = make_app(redis_url="redis://127.0.0.1:1/0")  # never reached
    with socket.socket() as taken:
        taken.bind((LOCAL, 0))
        taken.listen()
        with pytest.raises(ConfigError, match=r"cannot serve metrics on 127\.0\.0\.1:"):
            WorkerMetrics(worker_for(app), port=taken.getsockname()[1], host=LOCAL)


# --- the command: several processes, JSON logs, the missing extra -----------------------


def worker_env(redis_url: str, namespace: str) -> dict[str, str]:
    """The environment of a worker command of the test apps, on this test's namespace."""
    return dict(os.environ, LOCKGATE_REDIS_URL=redis_url, LOCKGATE_TEST_NAMESPACE=namespace)


@pytest.fixture
def env(redis_url: str, namespace: str) -> dict[str, str]:
    return worker_env(redis_url, namespace)


def imported_app(
    name: str, redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ModuleType]:
    """The app module ``name`` imported afresh for this test's Redis and namespace (to
    enqueue what its worker processes run), closed after."""
    monkeypatch.setenv("LOCKGATE_REDIS_URL", redis_url)
    monkeypatch.setenv("LOCKGATE_TEST_NAMESPACE", namespace)
    sys.modules.pop(name, None)
    module = importlib.import_module(name)
    yield module
    module.app.close()
    sys.modules.pop(name, None)


@pytest.fixture
def jobs(redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """``supervisor_app`` imported for this test's Redis and namespace (to enqueue)."""
    yield from imported_app("supervisor_app", redis_url, namespace, monkeypatch)


def metrics_dirs(root: Path) -> set[str]:
    """The supervisors' metrics directories in ``root`` (a test's own TMPDIR: another
    test's supervisor running at the same time has its own)."""
    return {p for p in os.listdir(root) if p.startswith("lockgate-metrics-")}


def test_one_endpoint_sums_the_counts_of_every_worker_process(
    jobs: ModuleType, env: dict[str, str], rclient: redis.Redis, tmp_path: Path
) -> None:
    port = free_port()
    base = f"http://{LOCAL}:{port}"
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**env, "TMPDIR": str(temp)}
    log = tmp_path / "supervisor.log"
    with log.open("wb") as out:
        supervisor = subprocess.Popen(
            [sys.executable, "-m", "lockgate", "worker", "supervisor_app:app",
             "--processes", "2", "--concurrency", "1", "--metrics-port", str(port)],
            cwd=HERE, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
        )  # fmt: skip
    try:
        wait_until_sync(
            lambda: answer(f"{base}/readyz") == 200, message="the supervisor's endpoint ready"
        )
        wait_until_sync(
            lambda: by(scrape(base), "lockgate_workers_ready") == {(): 2},
            message="both worker processes ready",
        )
        assert len(metrics_dirs(temp)) == 1  # the supervisor's, in its TMPDIR
        # One job at a time each, both held at the gate: each process runs one.
        jobs.hold.enqueue(job_id="held-1")
        jobs.hold.enqueue(job_id="held-2")
        key = jobs.record_key("started")
        entries = wait_until_sync(
            lambda: (found := rclient.lrange(key, 0, -1)) and len(found) == 2 and found,
            message="both held jobs started",
        )
        pids = {entry.rsplit(b":", 1)[1] for entry in entries}
        assert len(pids) == 2, (entries, log.read_text())  # one in each process
        for _ in range(10):
            jobs.work.enqueue()
        rclient.set(jobs.record_key("gate"), 1)
        wait_until_sync(
            lambda: (
                by(scrape(base), "lockgate_jobs_total", "task", "outcome")
                == {("hold", "succeeded"): 2, ("work", "succeeded"): 10}
            ),
            message="12 jobs counted",
        )
        samples = scrape(base)
        assert by(samples, "lockgate_jobs_started_total", "task") == {("hold",): 2, ("work",): 10}
        assert rclient.llen(jobs.record_key("done")) == 2
        assert sum(int(v) for v in rclient.hvals(jobs.record_key("runs"))) == 10
        assert by(samples, "lockgate_job_run_seconds_count", "task") == {
            ("hold",): 2, ("work",): 10,
        }  # fmt: skip
        # One of them reads the queue counts for all.
        wait_until_sync(
            lambda: of(scrape(base), "lockgate_queue_jobs", state="waiting"),
            message="queue gauges published",
        )
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(RUN_TIMEOUT) == 0, log.read_text()
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait(10)
    text = log.read_text()
    assert "Traceback" not in text, text
    assert metrics_dirs(temp) == set()  # the supervisor removed its directory


def worker_labels(samples: Samples, name: str = "process_resident_memory_bytes") -> set[str]:
    """The ``worker`` labels of a metric's samples."""
    return {dict(key)["worker"] for key in of(samples, name)}


def pid_of(worker: str) -> int:
    """The pid in a worker's name (``host-pid-suffix``)."""
    return int(worker.rsplit("-", 2)[1])


def two_workers(base: str, without: str = "") -> set[str] | None:
    """The ``worker`` labels of the process series once there are two (none ``without``)."""
    try:
        found = worker_labels(scrape(base))
    except OSError:  # not serving yet
        return None
    return found if len(found) == 2 and without not in found else None


def parent_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("PPid:")).split()[1])


def test_each_worker_process_serves_its_own_process_series(
    jobs: ModuleType, env: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    base = f"http://{LOCAL}:{port}"
    log = tmp_path / "supervisor.log"
    with log.open("wb") as out:
        supervisor = subprocess.Popen(
            [sys.executable, "-m", "lockgate", "worker", "supervisor_app:app",
             "--processes", "2", "--metrics-port", str(port)],
            cwd=HERE, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
        )  # fmt: skip
    try:
        workers = wait_until_sync(lambda: two_workers(base), message="two workers' series")
        # Each is one of the supervisor's children, named as the registry names it.
        assert {parent_of(pid_of(worker)) for worker in workers} == {supervisor.pid}
        expected_gc = {(worker, generation) for worker in workers for generation in "012"}

        def published() -> Samples | None:
            """A scrape once both workers' GC series are there too (each worker publishes
            its process series, then its GC ones: a scrape may fall between)."""
            samples = scrape(base)
            gc = by(samples, "python_gc_collections_total", "worker", "generation")
            return samples if set(gc) == expected_gc else None

        samples = wait_until_sync(published, message="both workers' GC series")
        for name in ("process_cpu_seconds_total", "process_start_time_seconds",
                     "process_virtual_memory_bytes", "process_open_fds"):  # fmt: skip
            assert worker_labels(samples, name) == workers, name
        assert all(value > 0 for value in of(samples, "process_resident_memory_bytes").values())
        # Once for all: the build and the Python the supervisor and its workers run.
        assert by(samples, BUILD_INFO, "version", "python_version") == {
            (lockgate_version(), platform.python_version()): 1
        }
        assert by(samples, "python_info", "version") == {(platform.python_version(),): 1}

        # A worker process killed: its series go with it, its replacement's come.
        victim = sorted(workers)[0]
        os.kill(pid_of(victim), signal.SIGKILL)
        now = wait_until_sync(
            lambda: two_workers(base, without=victim), message="the killed worker's replaced"
        )
        assert now & workers == workers - {victim}  # the other one's stay
        assert len(now - workers) == 1
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(RUN_TIMEOUT) == 0, log.read_text()
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait(10)
    assert "Traceback" not in log.read_text(), log.read_text()


def write_samples(path: Path, samples: dict[tuple[str, str], float]) -> None:
    """A complete multiprocess file as a worker process leaves it: (metric, sample) -> value."""
    written = MmapedDict(str(path))
    try:
        for (metric, sample), value in samples.items():
            written.write_value(mmap_key(metric, sample, [], [], "help"), value, 0.0)
    finally:
        written.close()


@pytest.mark.parametrize("size", [0, 1, 3])
def test_a_worker_file_being_created_is_skipped_by_readiness_and_scrape(size: int) -> None:
    # A starting worker process's file exists before its header is written (prometheus_client
    # opens it, then grows it, then writes the header): both reads skip it, and still sum the
    # complete files.
    with SupervisorMetrics(0, LOCAL) as metrics:
        directory = Path(metrics.directory)
        write_samples(directory / "gauge_livesum_101.db", {(READY_METRIC, READY_METRIC): 1.0})
        write_samples(directory / "counter_101.db", {("lockgate_jobs", "lockgate_jobs_total"): 3})
        write_samples(directory / "counter_102.db", {("lockgate_jobs", "lockgate_jobs_total"): 4})
        for name in ("gauge_livesum_103.db", "counter_103.db"):
            (directory / name).write_bytes(b"\0" * size)
        assert metrics.ready()
        base = f"http://{LOCAL}:{metrics.server.port}"
        assert get(f"{base}/readyz")[0] == 200
        samples = scrape(base)
        assert by(samples, "lockgate_jobs_total") == {(): 7}
        assert by(samples, READY_METRIC) == {(): 1}


@pytest.fixture
def cli(redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    yield from imported_app("cli_app", redis_url, namespace, monkeypatch)


def test_json_logs_and_a_line_per_finished_job(cli: ModuleType, env: dict[str, str]) -> None:
    ids = [cli.later.enqueue(n).job_id for n in range(3)]
    dead_id = cli.charge.enqueue("A1").job_id  # fails (retries=0): dead-lettered
    started = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "lockgate", "worker", "cli_app:app", "--burst",
         "--log-format", "json", "--log-jobs", "--log-level", "WARNING"],
        cwd=HERE, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]  # every line is JSON
    assert lines
    for line in lines:
        assert {"time", "severity", "logger", "message"} <= set(line)
    # --log-level WARNING holds back INFO lines, except the job lines --log-jobs asked for.
    assert all(
        line["severity"] in ("WARNING", "ERROR")
        for line in lines
        if line["logger"] != "lockgate.jobs"
    )
    job_lines = {line["job_id"]: line for line in lines if line["logger"] == "lockgate.jobs"}
    assert sorted(job_lines) == sorted([*ids, dead_id])
    assert len([line for line in lines if line["logger"] == "lockgate.jobs"]) == 4
    for job_id, line in job_lines.items():
        assert line["severity"] == "INFO"
        assert (line["queue"], line["level"], line["attempt"]) == ("default", "normal", 1)
        assert 0 <= line["duration"] < time.time() - started
        assert job_id in line["message"]
    assert {job_lines[job_id]["task"] for job_id in ids} == {"later"}
    assert {job_lines[job_id]["outcome"] for job_id in ids} == {"succeeded"}
    dead = job_lines[dead_id]
    assert (dead["task"], dead["outcome"]) == ("charge", "dead_lettered")
    assert dead["error"] == "ValueError: card declined for A1"
    # The dead letter's own ERROR line, traceback and all, is one JSON line too.
    # (The traceback is the record's exception, after the line: lockgate.core.logs.)
    assert any(
        "Traceback" in line.get("exception", "") for line in lines if line["severity"] == "ERROR"
    )


@pytest.mark.parametrize("processes", ["1", "2"])
def test_metrics_without_prometheus_client_is_one_line_naming_the_extra(processes: str) -> None:
    code = (
        f"sys.path.insert(0, {str(HERE)!r}); from lockgate.cli import main; "
        f"main(['worker', 'cli_app:app', '--metrics-port', '9', '--processes', {processes!r}])"
    )
    done = run_without("prometheus_client", code)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: lockgate.ops.metrics needs prometheus_client, which is not installed: "
        "pip install 'lockgate[metrics]'"
    ]
