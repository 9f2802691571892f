"""Worker processes killed or stopped mid-work: nothing is lost, nothing runs twice.

The workers are real processes (``worker_proc.py``) signalled with SIGKILL or SIGTERM;
they record progress in Redis, which the test watches.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from worker_proc import record_key

from conftest import job_ended, most_at_once, wait_until_sync
from lockgate import App
from lockgate.backend.keys import GROUP
from lockgate.core.codec import decode

pytestmark = pytest.mark.chaos

WORKER = Path(__file__).with_name("worker_proc.py")


class Proc:
    """A worker subprocess and its log file."""

    def __init__(self, popen: subprocess.Popen[bytes], log: Path) -> None:
        self.popen = popen
        self.log = log

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def exited(self, timeout: float) -> bool:
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True


@pytest.fixture
def spawn_worker(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """Start ``worker_proc.py`` processes; any still running at teardown are killed."""
    procs: list[Proc] = []

    def spawn(
        backend: str, *, concurrency: int = 1, visibility: float = 30.0, grace: float = 30.0
    ) -> Proc:
        log = tmp_path / f"worker-{len(procs)}.log"
        args = [redis_url, namespace, backend, str(concurrency), str(visibility), str(grace)]
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [sys.executable, str(WORKER), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        proc = Proc(popen, log)
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        if proc.popen.poll() is None:
            proc.popen.kill()
        proc.popen.wait(timeout=30)


def test_a_killed_workers_job_runs_to_completion_elsewhere(
    make_app: Callable[..., App],
    namespace: str,
    rclient: redis.Redis,
    spawn_worker: Callable[..., Proc],
) -> None:
    """Sorted backend: SIGKILL a worker mid-job; its lease ends and another worker finishes it."""
    app = make_app(backend="sorted")

    @app.task
    def block_once(tag: str) -> None: ...

    assert block_once.enqueue("x", job_id="victim").created
    first = spawn_worker("sorted", visibility=1.0)
    wait_until_sync(
        lambda: rclient.exists(record_key(namespace, "started:victim")) or first.popen.poll(),
        message="the first worker started the job",
    )
    assert first.popen.poll() is None, first.tail()
    assert int(rclient.get(record_key(namespace, "started:victim"))) == first.popen.pid
    inflight = app.keys.sorted_inflight("default")
    assert rclient.zscore(inflight, "victim") is not None

    first.popen.send_signal(signal.SIGKILL)
    assert first.exited(30) and first.popen.returncode == -signal.SIGKILL
    assert rclient.lrange(record_key(namespace, "completed"), 0, -1) == []

    second = spawn_worker("sorted", visibility=1.0)
    wait_until_sync(
        lambda: rclient.llen(record_key(namespace, "completed")) or second.popen.poll() is not None,
        message="the second worker completed the job",
    )
    # Acked: out of flight, payload gone, id free.
    wait_until_sync(lambda: job_ended(rclient, app.keys, "victim"), message="job acked")
    assert rclient.zscore(inflight, "victim") is None
    assert not rclient.hexists(app.keys.sorted_payloads("default"), "victim")
    assert not rclient.hexists(app.keys.sorted_deliveries("default"), "victim")
    assert rclient.xlen(app.keys.dead()) == 0  # delivered twice, under max_deliveries
    second.popen.send_signal(signal.SIGTERM)
    assert second.exited(30), second.tail()
    assert second.popen.returncode == 0, second.tail()
    assert rclient.lrange(record_key(namespace, "completed"), 0, -1) == [b"victim"]
    assert int(rclient.get(record_key(namespace, "runs:victim"))) == 2


def stream_job_ids(rclient: redis.Redis, stream: str) -> set[str]:
    return {decode(fields[b"job"]).id for _, fields in rclient.xrange(stream)}


def test_graceful_shutdown_loses_nothing(
    make_app: Callable[..., App],
    namespace: str,
    rclient: redis.Redis,
    spawn_worker: Callable[..., Proc],
) -> None:
    """Streams backend: SIGTERM mid-way; every job is done and acked, or still queued."""
    app = make_app()

    @app.task
    def work(ms: int) -> None: ...

    ids = [f"w{n:03}" for n in range(300)]
    results = app.enqueue_many([work.message(20, job_id=job_id) for job_id in ids])
    assert all(r.created for r in results)
    stream = app.keys.stream("default", "normal")
    done_key = record_key(namespace, "done")

    worker = spawn_worker("streams", concurrency=4, grace=30.0)
    wait_until_sync(
        lambda: rclient.scard(done_key) >= 40 or worker.popen.poll() is not None,
        message="40 jobs done",
    )
    assert worker.popen.poll() is None, worker.tail()
    worker.popen.send_signal(signal.SIGTERM)
    stopped = worker.exited(10)  # in-flight jobs need 20 ms; 10 s is a hang bound
    if not stopped:
        worker.popen.kill()
        worker.popen.wait(30)

    done = {m.decode() for m in rclient.smembers(done_key)}
    queued = stream_job_ids(rclient, stream)
    acked = set(ids) - queued
    assert 0 < len(done) < len(ids), "the stop did not land mid-way"
    assert set(ids) - done - queued == set(), "jobs lost"
    assert acked <= done, "jobs acked without being done"
    assert done <= acked, "jobs done but not acked within the grace period"
    assert rclient.xpending(stream, GROUP)["pending"] == 0
    assert all(job_ended(rclient, app.keys, job_id) for job_id in acked)
    assert all(not job_ended(rclient, app.keys, job_id) for job_id in queued)
    first_log = worker.tail()

    # A new worker finishes the rest; every job ran exactly once.
    again = spawn_worker("streams", concurrency=4, grace=30.0)
    wait_until_sync(
        lambda: rclient.xlen(stream) == 0 or again.popen.poll() is not None,
        message="all jobs acked",
    )
    again.popen.send_signal(signal.SIGTERM)
    assert again.exited(30), again.tail()
    runs = {k.decode(): int(v) for k, v in rclient.hgetall(record_key(namespace, "runs")).items()}
    assert runs == dict.fromkeys(ids, 1)
    assert stopped, f"the first worker did not exit within 10 s of SIGTERM\n{first_log}"
    assert worker.popen.returncode == 0, first_log


@pytest.mark.parametrize("backend", ["streams", "sorted"])
def test_slots_of_a_killed_worker_come_back_and_the_limit_holds(
    make_app: Callable[..., App],
    namespace: str,
    rclient: redis.Redis,
    spawn_worker: Callable[..., Proc],
    backend: str,
) -> None:
    """``key_concurrency=2``: SIGKILL a worker while it holds slots of three keys;
    another worker reclaims its jobs with their slots and runs everything once to the
    end; a ledger of runs (the killed ones ending at the kill) never has more than 2 of
    a key at once, and no slot is left held."""
    app = make_app(backend=backend)

    @app.task(key_by="tenant", key_concurrency=2)
    def limited(tenant: str, ms: int) -> None: ...

    sent = app.enqueue_many([limited.message(t, 150) for t in "abc" for _ in range(12)])
    ledger = record_key(namespace, "ledger")
    first = spawn_worker(backend, concurrency=8, visibility=1.0)
    wait_until_sync(lambda: rclient.llen(ledger) >= 10, message="the first worker is busy")
    first.popen.send_signal(signal.SIGKILL)
    killed_at = time.time()
    assert first.exited(30) and first.popen.returncode == -signal.SIGKILL
    second = spawn_worker(backend, concurrency=8, visibility=1.0)
    runs = record_key(namespace, "runs")
    wait_until_sync(lambda: rclient.hlen(runs) == 36 or second.popen.poll() is not None,
                    timeout=60, message="every job ran to its end")  # fmt: skip
    assert second.popen.poll() is None, second.tail()
    check_ledger(rclient, namespace, {r.job_id for r in sent}, {first.popen.pid: killed_at})
    for tenant in "abc":
        wait_until_sync(lambda t=tenant: rclient.zcard(app.keys.fair_slots(limited.name, t)) == 0,
                        message="no slot left held")  # fmt: skip
    assert rclient.hlen(app.keys.fair_holds("default", "normal")) == 0
    assert rclient.zcard(app.keys.sorted_parked_sets("default")) == 0
    second.popen.send_signal(signal.SIGTERM)
    assert second.exited(30), second.tail()


def check_ledger(
    rclient: redis.Redis, namespace: str, job_ids: set[str], killed: dict[int, float]
) -> int:
    """The ledger of the ``limited`` task's runs (start and end stamps, with the pid of
    the worker that ran each, whose job children die with it): every job ran to an end;
    a job ran more than once only if a run of it was in a worker killed at
    ``killed[pid]`` (its end or its ack lost); and no tenant ever had more than 2 runs at
    once, a killed worker's unfinished run ending at its kill. Returns how many runs a
    kill cut short."""
    counts = {k.decode(): int(v) for k, v in rclient.hgetall(record_key(namespace, "runs")).items()}
    assert set(counts) == job_ids
    starts: dict[str, list[tuple[str, float, int]]] = {}
    ends: dict[str, list[float]] = {}
    for line in rclient.lrange(record_key(namespace, "ledger"), 0, -1):
        kind, tenant, job_id, stamp, pid = line.decode().split(" ")
        if kind == "start":
            starts.setdefault(tenant, []).append((job_id, float(stamp), int(pid)))
        else:
            ends.setdefault(job_id, []).append(float(stamp))
    in_killed = {j for begun in starts.values() for j, _, pid in begun if pid in killed}
    for job_id, count in counts.items():
        assert count == 1 or job_id in in_killed, (job_id, count)
    cut = 0
    for tenant, begun in starts.items():
        runs_of = []
        for job_id, start, pid in begun:  # a run ends before the job's next start, or at a kill
            later = [s for j, s, _ in begun if j == job_id and s > start]
            until = min(later, default=float("inf"))
            after = [end for end in ends.get(job_id, []) if start <= end < until]
            cut += not after
            runs_of.append((start, min(after) if after else killed.get(pid, float("inf"))))
        assert most_at_once(runs_of) <= 2, (tenant, sorted(runs_of))
    return cut


@pytest.mark.parametrize("backend", ["streams", "sorted"])
def test_key_concurrency_holds_while_workers_are_killed_every_few_seconds(
    make_app: Callable[..., App],
    namespace: str,
    rclient: redis.Redis,
    spawn_worker: Callable[..., Proc],
    backend: str,
) -> None:
    """``key_concurrency=2``: two workers run 135 jobs of three keys while one of
    them is SIGKILLed every 1.5 s and replaced (five kills); every job ends, the ledger
    never has more than 2 of a key at once, and no slot or hold is left."""
    app = make_app(backend=backend)

    @app.task(key_by="tenant", key_concurrency=2)
    def limited(tenant: str, ms: int) -> None: ...

    sent = app.enqueue_many([limited.message(t, 400) for t in "abc" for _ in range(45)])
    runs = record_key(namespace, "runs")
    workers = [spawn_worker(backend, concurrency=4, visibility=1.0) for _ in range(2)]
    killed: dict[int, float] = {}
    for turn in range(5):
        time.sleep(1.5)  # the scenario's clock: a kill every 1.5 s, whatever the jobs do
        victim = workers[turn % 2]
        assert victim.popen.poll() is None, victim.tail()
        victim.popen.send_signal(signal.SIGKILL)
        killed[victim.popen.pid] = time.time()
        assert victim.exited(30)
        workers[turn % 2] = spawn_worker(backend, concurrency=4, visibility=1.0)
    wait_until_sync(lambda: rclient.hlen(runs) == 135, timeout=90, message="every job ended")
    assert check_ledger(rclient, namespace, {r.job_id for r in sent}, killed) >= 3  # kills hit runs
    for tenant in "abc":
        wait_until_sync(lambda t=tenant: rclient.zcard(app.keys.fair_slots(limited.name, t)) == 0,
                        message="no slot left held")  # fmt: skip
    assert rclient.hlen(app.keys.fair_holds("default", "normal")) == 0
    assert rclient.zcard(app.keys.sorted_parked_sets("default")) == 0
    for proc in workers:
        proc.popen.send_signal(signal.SIGTERM)
        assert proc.exited(30), proc.tail()


@pytest.mark.parametrize("backend", ["streams", "sorted"])
def test_a_debounced_jobs_next_run_survives_the_kill_of_its_worker(
    make_app: Callable[..., App],
    namespace: str,
    rclient: redis.Redis,
    spawn_worker: Callable[..., Proc],
    backend: str,
) -> None:
    """``debounce``: enqueues while a run goes queue one more run; SIGKILL the
    worker running it: another worker reruns the job, and its ending queues the next run,
    once, with the last arguments."""
    app = make_app(backend=backend)

    @app.task(debounce=0.05)
    def debounced(n: int) -> None: ...

    assert debounced.enqueue(0, job_id="d").created
    first = spawn_worker(backend, visibility=1.0)
    wait_until_sync(
        lambda: rclient.exists(record_key(namespace, "started:d")) or first.popen.poll(),
        message="the first worker started the job",
    )
    assert first.popen.poll() is None, first.tail()
    assert [debounced.enqueue(n, job_id="d").created for n in (1, 2)] == [True, False]
    first.popen.send_signal(signal.SIGKILL)
    assert first.exited(30) and first.popen.returncode == -signal.SIGKILL
    second = spawn_worker(backend, visibility=1.0)
    completed = record_key(namespace, "completed")
    wait_until_sync(lambda: rclient.llen(completed) >= 2 or second.popen.poll() is not None,
                    timeout=60, message="the job and its next run ended")  # fmt: skip
    assert second.popen.poll() is None, second.tail()
    wait_until_sync(lambda: job_ended(rclient, app.keys, "d"), message="nothing more queued")
    assert rclient.lrange(completed, 0, -1) == [b"0", b"2"]
    assert not rclient.exists(app.keys.debounce_next("d"))
    second.popen.send_signal(signal.SIGTERM)
    assert second.exited(30), second.tail()
    assert rclient.lrange(completed, 0, -1) == [b"0", b"2"]
