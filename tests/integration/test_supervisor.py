"""``lockgate worker MODULE:APP --processes N``: a supervisor and its worker processes.

Everything is real: the supervisor is ``python -m lockgate worker`` in a subprocess, its
children are the worker processes it starts, the app is ``supervisor_app`` (its tasks
record in Redis which process ran them). Processes are found through ``/proc``; each
test kills whatever it started, even when it fails.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import redis

from conftest import wait_until_sync

HERE = Path(__file__).parent
SPEC = "supervisor_app:app"
STOP_TIMEOUT = 60.0  # loose: a stop takes about a second


def proc_stat(pid: int) -> tuple[str, int] | None:
    """``(state, ppid)`` of a process, None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]  # the name may hold spaces
    return state, int(ppid)


def alive(pid: int) -> bool:
    """The process runs (a zombie waiting for its reaper does not)."""
    stat = proc_stat(pid)
    return stat is not None and stat[0] != "Z"


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")[:-1]
    except (FileNotFoundError, ProcessLookupError):
        return []


def children(parent: int) -> set[int]:
    """Running child processes of ``parent``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat is not None and stat[1] == parent and stat[0] != "Z":
                found.add(int(entry.name))
    return found


class Supervised:
    """A supervisor subprocess and the file its (and its children's) output goes to."""

    def __init__(self, popen: subprocess.Popen[bytes], log: Path) -> None:
        self.popen = popen
        self.log = log

    @property
    def pid(self) -> int:
        return self.popen.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def workers(self) -> set[int]:
        """The running worker processes it started (a child forked but not yet exec'd
        still shows the supervisor's own command line: not one yet)."""
        own = cmdline(self.pid)
        return {
            pid for pid in children(self.pid) if "worker" in (argv := cmdline(pid)) and argv != own
        }

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM it and wait for its exit code."""
        self.popen.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float = STOP_TIMEOUT) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the supervisor did not exit; its log:\n{self.text()}") from None

    def kill(self) -> None:
        """Kill it and everything it started (cleanup)."""
        if self.popen.poll() is None:
            for pid in children(self.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.popen.kill()
        self.popen.wait(10)


@pytest.fixture
def env(redis_url: str, namespace: str) -> dict[str, str]:
    return dict(os.environ, LOCKGATE_REDIS_URL=redis_url, LOCKGATE_TEST_NAMESPACE=namespace)


@pytest.fixture
def start(env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., Supervised]]:
    """Start ``lockgate worker supervisor_app:app ARGS...``; killed at teardown."""
    started: list[Supervised] = []

    def launch(*args: str) -> Supervised:
        log = tmp_path / f"supervisor-{len(started)}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [sys.executable, "-m", "lockgate", "worker", SPEC, *args],
                cwd=HERE, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            )  # fmt: skip
        started.append(Supervised(popen, log))
        return started[-1]

    yield launch
    for supervised in started:
        supervised.kill()


@pytest.fixture
def jobs(redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """``supervisor_app`` imported for this test's Redis and namespace (to enqueue)."""
    monkeypatch.setenv("LOCKGATE_REDIS_URL", redis_url)
    monkeypatch.setenv("LOCKGATE_TEST_NAMESPACE", namespace)
    sys.modules.pop("supervisor_app", None)
    module = importlib.import_module("supervisor_app")
    yield module
    module.app.close()
    sys.modules.pop("supervisor_app", None)


def started_pids(client: redis.Redis, jobs: ModuleType, count: int) -> set[int]:
    """Wait until ``count`` held jobs have started; the pids that run them."""
    key = jobs.record_key("started")
    entries = wait_until_sync(
        lambda: (found := client.lrange(key, 0, -1)) and len(found) >= count and found,
        message=f"{count} held jobs started",
    )
    return {int(entry.rsplit(b":", 1)[1]) for entry in entries}


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_two_processes_share_the_work_and_a_signal_stops_them_all(
    start: Callable[..., Supervised], jobs: ModuleType, rclient: redis.Redis, stop: signal.Signals
) -> None:
    supervised = start("--processes", "2", "--concurrency", "1")
    jobs.hold.enqueue(job_id="held-1")
    jobs.hold.enqueue(job_id="held-2")
    # Each worker runs one job at a time and both jobs wait for the gate: two processes.
    pids = started_pids(rclient, jobs, 2)
    assert len(pids) == 2
    assert pids == supervised.workers()
    rclient.set(jobs.record_key("gate"), 1)
    wait_until_sync(lambda: rclient.llen(jobs.record_key("done")) == 2, message="jobs done")

    supervised.popen.send_signal(stop)
    assert supervised.wait() == 0, supervised.text()
    assert not [pid for pid in pids if alive(pid)]
    log = supervised.text()
    assert f"{stop.name}: stopping 2 worker processes" in log
    assert "Traceback" not in log
    for pid in pids:
        assert f"worker process {pid} exited with code 0" in log


def test_a_second_sigterm_asks_the_children_to_stop_now(
    start: Callable[..., Supervised], jobs: ModuleType, rclient: redis.Redis
) -> None:
    supervised = start("--processes", "2", "--concurrency", "1", "--grace-period", "600")
    jobs.hold.enqueue(job_id="held-1")
    jobs.hold.enqueue(job_id="held-2")
    pids = started_pids(rclient, jobs, 2)  # the gate never opens: they would run long

    supervised.popen.send_signal(signal.SIGTERM)
    # Both children got the first stop and wait for their job (two signals sent too
    # soon could merge into one).
    wait_until_sync(
        lambda: supervised.text().count("stopping: waiting up to 600.0s") == 2,
        message="both workers draining",
    )
    assert pids == supervised.workers()
    supervised.popen.send_signal(signal.SIGTERM)
    assert supervised.wait() == 0, supervised.text()
    assert not [pid for pid in pids if alive(pid)]
    assert supervised.text().count("second stop request: stopping now") == 2


def test_a_killed_child_is_replaced_and_its_job_reclaimed_nothing_lost(
    start: Callable[..., Supervised], jobs: ModuleType, rclient: redis.Redis
) -> None:
    supervised = start("--processes", "2", "--concurrency", "1", "--visibility-timeout", "1")
    jobs.block_once.enqueue(job_id="victim")
    victim = int(wait_until_sync(lambda: rclient.get(jobs.record_key("victim"))))
    assert victim in supervised.workers()
    work_ids = [f"work-{n}" for n in range(10)]
    for job_id in work_ids:
        jobs.work.enqueue(job_id=job_id)

    os.kill(victim, signal.SIGKILL)
    replaced = wait_until_sync(
        lambda: (now := supervised.workers()) and len(now) == 2 and victim not in now and now,
        message="a new worker process in place of the killed one",
    )
    assert len(replaced) == 2
    wait_until_sync(
        lambda: rclient.lrange(jobs.record_key("done"), 0, -1) == [b"victim"],
        message="the killed worker's job reclaimed and done",
    )
    runs_key = jobs.record_key("runs")
    wait_until_sync(lambda: rclient.hlen(runs_key) == len(work_ids), message="work done")

    assert int(rclient.get(jobs.record_key("runs:victim"))) == 2
    runs = {key.decode(): int(value) for key, value in rclient.hgetall(runs_key).items()}
    assert runs == dict.fromkeys(work_ids, 1)
    assert supervised.stop() == 0, supervised.text()
    assert not [pid for pid in replaced if alive(pid)]
    log = supervised.text()
    assert f"worker process {victim} killed by signal 9 (SIGKILL)" in log
    assert "restarting it in 0.0s" in log


def test_a_configuration_error_in_every_child_exits_2_with_one_line(env: dict[str, str]) -> None:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "lockgate", "worker", SPEC, "--processes", "2",
         "--url", "redis://127.0.0.1:1/0", "--wait", "0"],  # no wait for a Redis to come up
        cwd=HERE, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert time.monotonic() - began < 30, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1] == (
        "error: every worker process exited with code 2 (a configuration error, reported "
        "above) before staying up; not restarting them"
    )
    assert sum(line.startswith("error: ") for line in lines) <= 5, done.stderr
    assert "error: cannot connect to Redis at redis://127.0.0.1:1/0" in done.stderr
    # Not a restart loop: the two children, and at most a couple of early restarts.
    assert 2 <= done.stderr.count("started worker process") <= 4, done.stderr


def test_embedded_runs_one_server_and_hands_its_url_to_the_children(
    start: Callable[..., Supervised], jobs: ModuleType
) -> None:
    supervised = start("--embedded", "--processes", "2", "--concurrency", "1")
    url = wait_until_sync(
        lambda: (found := re.search(r"embedded server at (\S+)", supervised.text())) and found[1],
        message="the embedded server's URL",
    )
    workers = wait_until_sync(lambda: len(found := supervised.workers()) == 2 and found)
    for pid in workers:
        argv = cmdline(pid)
        assert "--embedded" not in argv
        assert argv[argv.index("--url") + 1] == url
    assert supervised.text().count("embedded server at") == 1  # the server daemonises

    jobs.app.close()
    jobs.app.redis_url = url
    client = jobs.app.client()
    jobs.hold.enqueue(job_id="held-1")
    jobs.hold.enqueue(job_id="held-2")
    assert started_pids(client, jobs, 2) == workers
    client.set(jobs.record_key("gate"), 1)
    wait_until_sync(lambda: client.llen(jobs.record_key("done")) == 2, message="jobs done")
    assert supervised.stop() == 0, supervised.text()
    assert not [pid for pid in workers if alive(pid)]
    probe = redis.Redis.from_url(url, socket_connect_timeout=5)
    with pytest.raises(redis.ConnectionError), contextlib.closing(probe):
        probe.ping()  # the supervisor stopped its server


def test_children_do_not_outlive_a_supervisor_killed_with_sigkill(
    start: Callable[..., Supervised],
) -> None:
    supervised = start("--processes", "2")
    workers = wait_until_sync(lambda: len(found := supervised.workers()) == 2 and found)
    supervised.popen.kill()
    supervised.popen.wait(10)
    wait_until_sync(lambda: not [pid for pid in workers if alive(pid)], message="the orphans died")
