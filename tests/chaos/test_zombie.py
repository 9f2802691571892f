"""A zombie worker (SIGSTOP past the visibility timeout, then SIGCONT) settles nothing.

Issue 8, defect 7: the paused worker's ack used to free the job another worker had
reclaimed and was still running; the job id was freed and a new enqueue with that id was
accepted and ran at the same time. The settle now checks, in the same script call, that
the entry is still pending for this consumer.

The workers are real processes (``zombie_app.py``); their runs record themselves in Redis
and wait until the test releases them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from conftest import job_ended, wait_until_sync
from lockgate import App, chain
from lockgate.backend.keys import GROUP

pytestmark = pytest.mark.chaos

HERE = Path(__file__).parent
VISIBILITY = 1.0
STOPPED = re.compile(r"worker \S+ stopped: (\d+) done, (\d+) retried, (\d+) dead-lettered")


class Proc:
    """A worker subprocess and its log file."""

    def __init__(self, popen: subprocess.Popen[bytes], log: Path) -> None:
        self.popen = popen
        self.log = log

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self) -> tuple[int, int, int]:
        """SIGTERM, wait for the exit; (done, retried, dead-lettered) from its last line."""
        self.popen.send_signal(signal.SIGTERM)
        assert self.popen.wait(timeout=30) == 0, self.tail()
        (counts,) = STOPPED.findall(self.text())
        done, retried, dead = (int(n) for n in counts)
        return done, retried, dead


class Records:
    """What the workers' runs recorded (see zombie_app.record_key): pids, in order."""

    def __init__(self, app: App, rclient: redis.Redis) -> None:
        self._app, self._rclient = app, rclient

    def key(self, name: str) -> str:
        return f"{self._app.keys.prefix}:test:{name}"

    def _pids(self, name: str) -> list[int]:
        return [int(pid) for pid in self._rclient.lrange(self.key(name), 0, -1)]

    def started(self) -> list[int]:
        return self._pids("started")

    def finished(self) -> list[int]:
        return self._pids("finished")


@pytest.fixture
def spawn(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[Callable[[], Proc]]:
    """Start ``zombie_app.py`` workers; any still running at teardown are resumed and killed."""
    procs: list[Proc] = []

    def start() -> Proc:
        # The environment as the test left it (LOCKGATE_TEST_BACKEND: the backend).
        env = dict(os.environ, LOCKGATE_REDIS_URL=redis_url, LOCKGATE_TEST_NAMESPACE=namespace)
        log = tmp_path / f"worker-{len(procs)}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [sys.executable, "zombie_app.py", str(VISIBILITY)],
                cwd=HERE, env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        procs.append(Proc(popen, log))
        return procs[-1]

    yield start
    for proc in procs:
        if proc.alive():
            proc.popen.send_signal(signal.SIGCONT)
            proc.popen.kill()
        proc.popen.wait(timeout=30)


def take_over(
    a: Proc, spawn: Callable[[], Proc], started: Callable[[], list[int]]
) -> tuple[Proc, int]:
    """Stop A (SIGSTOP) while it runs its one job, start B, and resume A once B took the
    job over (reclaimed past the visibility timeout, run in a child process of its own):
    B and the pid of its run."""
    a.popen.send_signal(signal.SIGSTOP)
    try:
        b = spawn()
        wait_until_sync(lambda: len(started()) == 2 or not b.alive(), message="B took over")
        assert b.alive(), b.tail()
        return b, started()[1]
    finally:
        a.popen.send_signal(signal.SIGCONT)


def test_a_zombie_workers_settle_leaves_the_job_to_the_worker_that_reclaimed_it(
    make_app: Callable[..., App], rclient: redis.Redis, spawn: Callable[[], Proc]
) -> None:
    app = make_app()

    @app.task(retries=0)
    def slow(tag: str) -> None: ...

    records = Records(app, rclient)
    key, started, finished = records.key, records.started, records.finished

    def owners() -> list[str]:
        rows = rclient.xpending_range(stream, GROUP, "-", "+", 10)
        return [row["consumer"].decode() for row in rows]

    stream = app.keys.stream("default", "normal")
    assert slow.enqueue("x", job_id="zombie-1").created

    a = spawn()
    wait_until_sync(lambda: started() or not a.alive(), message="A started the job")
    assert a.alive(), a.tail()
    assert started() == [a.popen.pid]  # a first delivery runs in A's own process
    b, b_run = take_over(a, spawn, started)
    (b_consumer,) = owners()
    assert f"-{b.popen.pid}-" in b_consumer, b_consumer

    # A's run ends now: its settle must find the entry owned by B and touch nothing.
    rclient.rpush(key(f"release:{a.popen.pid}"), "go")
    wait_until_sync(
        lambda: (
            "no longer pending for this worker" in a.text()
            or rclient.xpending(stream, GROUP)["pending"] == 0
            or not a.alive()
        ),
        timeout=15,
        message="A settled its run",
    )
    assert finished() == [a.popen.pid]
    assert owners() == [b_consumer], "the zombie's settle freed the entry B is running"
    assert not job_ended(rclient, app.keys, "zombie-1"), (
        "the zombie's settle freed the job id B is running"
    )
    assert not slow.enqueue("x", job_id="zombie-1").created  # B still runs it
    assert rclient.xlen(stream) == 1

    # B's run ends: acknowledged once, the job id freed.
    rclient.rpush(key(f"release:{b_run}"), "go")
    wait_until_sync(
        lambda: rclient.xpending(stream, GROUP)["pending"] == 0 or not b.alive(),
        message="B settled the job",
    )
    wait_until_sync(lambda: job_ended(rclient, app.keys, "zombie-1"), message="job id freed")
    assert finished() == [a.popen.pid, b_run]
    assert rclient.xlen(stream) == 0
    assert rclient.xlen(app.keys.dead()) == 0
    assert a.stop() == (0, 0, 0), a.tail()  # the zombie acknowledged nothing
    assert b.stop() == (1, 0, 0), b.tail()
    assert a.text().count("no longer pending for this worker") == 1, a.tail()
    assert started() == [a.popen.pid, b_run]


def test_a_zombies_settle_moves_no_flow_barrier(
    make_app: Callable[..., App], rclient: redis.Redis, spawn: Callable[[], Proc]
) -> None:
    """chain(slow, after): A runs the first step and is paused past the lease, B takes it
    over. A's settle, refused, queues nothing; B's settle queues the second step, which
    runs once."""
    app = make_app()

    @app.task(retries=0)
    def slow(tag: str) -> None: ...

    @app.task(retries=0)
    def after(tag: str) -> None: ...

    records = Records(app, rclient)
    key, started = records.key, records.started
    flow = app.enqueue_flow(chain(slow.message("x"), after.message("y")), flow_id="zf")
    a = spawn()
    wait_until_sync(lambda: started() or not a.alive(), message="A started the job")
    b, b_run = take_over(a, spawn, started)
    rclient.rpush(key(f"release:{a.popen.pid}"), "go")
    wait_until_sync(
        lambda: "no longer pending for this worker" in a.text() or not a.alive(),
        timeout=15,
        message="A settled its run",
    )
    assert records.finished() == [a.popen.pid]
    info = app.flow("zf")
    assert [job.state for job in info.jobs] == ["running", "waiting"], info
    assert rclient.lrange(key("after"), 0, -1) == []
    rclient.rpush(key(f"release:{b_run}"), "go")
    wait_until_sync(lambda: app.flow("zf").state == "done", message="the flow ended")
    assert len(rclient.lrange(key("after"), 0, -1)) == 1
    assert flow.job_ids == ["zf.0", "zf.1"]
    a.stop()
    b.stop()
    assert a.text().count("no longer pending for this worker") == 1, a.tail()


def test_a_task_holding_the_gil_past_the_lease_is_fenced_and_logged(
    make_app: Callable[..., App], rclient: redis.Redis, spawn: Callable[[], Proc]
) -> None:
    """The documented limit: a task holding the GIL in C (a backtracking regular
    expression) stops every thread of its worker, its liveness beats too, as a stopped
    process would. The other worker takes the job and runs it; the first one's settle,
    once its run ends, is refused (fenced), and it logs the stall with the job id."""
    app = make_app()

    @app.task(retries=0)
    def greedy(tag: str) -> None: ...

    records = Records(app, rclient)
    started, finished = records.started, records.finished

    a = spawn()
    wait_until_sync(lambda: "serving queues" in a.text() or not a.alive(), message="A up")
    b = spawn()
    wait_until_sync(lambda: "serving queues" in b.text() or not b.alive(), message="B up")
    assert greedy.enqueue("x", job_id="greedy-1").created
    wait_until_sync(lambda: len(finished()) == 2, timeout=60, message="both runs ended")
    first, second = started()
    assert first in (a.popen.pid, b.popen.pid)
    holder, other = (a, b) if first == a.popen.pid else (b, a)
    assert second != first  # taken over: run again in the other worker's child process
    wait_until_sync(lambda: job_ended(rclient, app.keys, "greedy-1"), message="job id freed")
    assert holder.stop() == (0, 0, 0), holder.tail()  # fenced: it settled nothing
    assert other.stop() == (1, 0, 0), other.tail()
    log = holder.text()
    assert "its liveness beats were held up" in log and "'greedy-1'" in log, holder.tail()
    assert "no longer pending for this worker" in log, holder.tail()
    assert rclient.xlen(app.keys.dead()) == 0


def second_starts_after_b(
    app: App, rclient: redis.Redis, records: Records, b_run: int, slots: str
) -> None:
    """Release B's run of the first job: the second job starts only after it finished, and
    once it ended too, no slot is held."""
    key, started = records.key, records.started
    rclient.rpush(key(f"release:{b_run}"), "go")
    wait_until_sync(lambda: len(started()) == 3, message="the second job started")
    events = [e.decode() for e in rclient.lrange(key("events"), 0, -1)]
    assert events.index(f"finish first {b_run}") < events.index(f"start second {started()[2]}")
    rclient.rpush(key(f"release:{started()[2]}"), "go")
    wait_until_sync(lambda: job_ended(rclient, app.keys, "second"), message="all done")
    wait_until_sync(lambda: rclient.zcard(slots) == 0, message="no slot held")


def test_a_zombie_gives_back_no_slot_that_the_worker_running_its_job_holds(
    make_app: Callable[..., App], rclient: redis.Redis, spawn: Callable[[], Proc]
) -> None:
    """``key_concurrency=1``: A runs the key's first job and is stopped past its lease; B
    takes the job over with its slot. A, resumed, ends its run: its settle is refused and
    the slot stays B's, so the key's second job waits until B's run ends."""
    app = make_app()

    @app.task(retries=0, key_by="tenant", key_concurrency=1)
    def limited(tenant: str, tag: str) -> None: ...

    records = Records(app, rclient)
    key, started = records.key, records.started
    slots = app.keys.fair_slots(limited.name, "acme")
    holds = app.keys.fair_holds("default", "normal")
    delivery = app.keys.fair_stream("default", "normal")
    assert limited.enqueue("acme", "first", job_id="first").created
    assert limited.enqueue("acme", "second", job_id="second").created

    a = spawn()
    wait_until_sync(lambda: started() or not a.alive(), message="A started the first job")
    assert a.alive(), a.tail()
    (slot,) = rclient.zrange(slots, 0, -1)
    b, b_run = take_over(a, spawn, started)
    assert rclient.zrange(slots, 0, -1) == [slot]  # the same slot, now B's run's
    rclient.rpush(key(f"release:{a.popen.pid}"), "go")
    wait_until_sync(lambda: "no longer pending for this worker" in a.text() or not a.alive(),
                    timeout=15, message="A's settle refused")  # fmt: skip
    assert rclient.zrange(slots, 0, -1) == [slot], "the zombie gave back B's slot"
    entry = slot.decode().split(" ")[1]
    assert rclient.hget(holds, entry) == slots.encode()
    assert [row["message_id"].decode() for row in
            rclient.xpending_range(delivery, GROUP, "-", "+", 10)] == [entry]  # fmt: skip
    assert len(started()) == 2  # the second job waits for the slot
    second_starts_after_b(app, rclient, records, b_run, slots)
    assert rclient.hlen(holds) == 0
    a.stop()
    b.stop()


def test_a_zombie_gives_back_no_sorted_slot_that_the_worker_running_its_job_holds(
    make_app: Callable[..., App],
    rclient: redis.Redis,
    spawn: Callable[[], Proc],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sorted backend, ``key_concurrency=1``: A runs the key's first job and is stopped
    past its lease; B takes the job over and its slot (the job's id). A, resumed, ends its
    run: its settle is refused and gives back nothing, so the key's second job waits until
    B's run ends."""
    monkeypatch.setenv("LOCKGATE_TEST_BACKEND", "sorted")
    app = make_app(backend="sorted")

    @app.task(retries=0, key_by="tenant", key_concurrency=1)
    def limited(tenant: str, tag: str) -> None: ...

    records = Records(app, rclient)
    key, started = records.key, records.started
    slots = app.keys.fair_slots(limited.name, "acme")
    assert limited.enqueue("acme", "first", job_id="first").created
    assert limited.enqueue("acme", "second", job_id="second").created

    a = spawn()
    wait_until_sync(lambda: started() or not a.alive(), message="A started the first job")
    assert a.alive(), a.tail()
    assert rclient.zrange(slots, 0, -1) == [b"first"]
    b, b_run = take_over(a, spawn, started)
    assert rclient.zrange(slots, 0, -1) == [b"first"]  # the same slot, now B's run's
    rclient.rpush(key(f"release:{a.popen.pid}"), "go")
    wait_until_sync(lambda: "no longer" in a.text() or not a.alive(),
                    timeout=15, message="A's settle refused")  # fmt: skip
    assert rclient.zrange(slots, 0, -1) == [b"first"], "the zombie gave back B's slot"
    assert len(started()) == 2  # the second job waits for the slot
    second_starts_after_b(app, rclient, records, b_run, slots)
    assert rclient.zcard(app.keys.sorted_parked_sets("default")) == 0
    a.stop()
    b.stop()
