"""Jobs left pending by a consumer that is gone are reclaimed; gone consumers are forgotten.

The gone consumer is simulated with raw commands: it reads an entry with XREADGROUP and
never acknowledges it, as a worker killed mid-job would.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import pytest
import redis

from conftest import job_ended, running, unacked_reads, wait_until, wait_until_sync, worker_for
from lockgate import App, current_job
from lockgate.backend.connections import async_client
from lockgate.backend.keys import GROUP
from lockgate.backend.stream_consumer import StreamConsumer
from lockgate.ops.deadletter import list_dead


def consumers(rclient: redis.Redis, stream: str) -> dict[str, dict[str, int]]:
    return {
        c["name"].decode(): {"pending": c["pending"], "idle": c["idle"]}
        for c in rclient.xinfo_consumers(stream, GROUP)
    }


async def test_a_job_left_pending_by_a_gone_consumer_is_reclaimed_and_runs(
    make_app: Callable[..., App], rclient: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    runs_key = f"{app.keys.prefix}:test:runs"

    @app.task
    def charge(order_id: str) -> None:
        # A reclaimed job runs in a child process: record outside the worker's memory.
        job = current_job()
        app.client().rpush(runs_key, f"{job.job_id}:{job.attempt}:{os.getpid()}")

    charge.enqueue("A1", job_id="orphan")
    stream = app.keys.stream("default", "normal")
    unacked_reads(rclient, stream)
    assert rclient.xpending(stream, GROUP)["pending"] == 1
    worker = worker_for(app, concurrency=2, visibility_timeout=0.3)
    async with running(worker):
        await wait_until(lambda: worker.processed == 1, message="the orphan was reclaimed")
    ((job_id, attempt, pid),) = [r.decode().split(":") for r in rclient.lrange(runs_key, 0, -1)]
    assert (job_id, attempt) == ("orphan", "1")
    assert int(pid) != os.getpid()  # isolated: a poison job would kill only its child
    assert "orphan reclaimed" in caplog.text
    assert rclient.xpending(stream, GROUP)["pending"] == 0
    assert rclient.xlen(stream) == 0
    assert job_ended(rclient, app.keys, "orphan")
    assert consumers(rclient, stream)["ghost"]["pending"] == 0


async def test_a_job_delivered_too_often_is_dead_lettered_when_reclaimed(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    """The safety net: workers keep dying while it runs, whatever the cause."""
    app = make_app()
    runs_key = f"{app.keys.prefix}:test:runs"

    @app.task
    def unlucky(n: int) -> None:
        app.client().incr(runs_key)

    unlucky.enqueue(1, job_id="unlucky-1")
    stream = app.keys.stream("default", "normal")
    (entry_id,) = unacked_reads(rclient, stream)
    # As if eight workers had died while running it (4 x max_deliveries).
    rclient.xclaim(stream, GROUP, "ghost", 0, [entry_id], retrycount=8)
    worker = worker_for(app, concurrency=1, visibility_timeout=0.3, max_deliveries=2)
    async with running(worker):
        await wait_until(lambda: worker.dead == 1)
    assert rclient.get(runs_key) is None
    (letter,) = list_dead(app)
    assert letter.job_id == "unlucky-1"
    assert letter.reason == "delivered 9 times (max 8)"
    assert letter.deliveries == 9
    assert rclient.xpending(stream, GROUP)["pending"] == 0


async def test_a_poison_job_kills_only_its_child_and_is_dead_lettered_after_max_crashes(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    """Run isolated once delivered before, a job that kills its process kills its child:
    the worker lives on, the death is counted against that job, and after max_deliveries
    such deaths it is dead-lettered. A job beside it is not charged anything."""
    app = make_app()
    deaths_key = f"{app.keys.prefix}:test:deaths"
    ran_key = f"{app.keys.prefix}:test:ran"

    @app.task
    def poison(n: int) -> None:
        app.client().incr(deaths_key)
        os.kill(os.getpid(), signal.SIGKILL)

    @app.task
    def fine(n: int) -> None:
        app.client().rpush(ran_key, n)

    poison.enqueue(1, job_id="poison-1")
    stream = app.keys.stream("default", "normal")
    unacked_reads(rclient, stream)  # its first worker died running it
    fine.enqueue(2, job_id="fine-2")
    worker = worker_for(app, concurrency=2, visibility_timeout=0.3, max_deliveries=3)
    async with running(worker) as task:
        await wait_until(lambda: worker.dead == 1 and worker.processed == 1)
        assert not task.done()  # the worker itself never died
    assert int(rclient.get(deaths_key) or 0) == 3
    (letter,) = list_dead(app)
    assert letter.job_id == "poison-1"
    assert "its process died (killed by signal 9 (SIGKILL))" in letter.reason
    assert "3 times" in letter.reason
    assert rclient.lrange(ran_key, 0, -1) == [b"2"]
    assert rclient.xpending(stream, GROUP)["pending"] == 0


async def test_forget_consumers_removes_idle_consumers_that_own_nothing(
    make_app: Callable[..., App], redis_url: str, rclient: redis.Redis
) -> None:
    app = make_app()

    @app.task
    def job(n: int) -> None: ...

    app.enqueue_many([job.message(n) for n in range(2)])
    stream = app.keys.stream("default", "normal")
    unacked_reads(rclient, stream, "gone-owning")  # died holding a job
    rclient.xreadgroup(GROUP, "gone-idle", {stream: "0"}, count=1)  # owns nothing
    wait_until_sync(
        lambda: all(c["idle"] >= 200 for c in consumers(rclient, stream).values()),
        message="both consumers idle",
    )
    client = async_client(redis_url)
    consumer = StreamConsumer(
        client, url=redis_url, keys=app.keys, levels=app.levels, queues=["default"],
        consumer="me",
    )  # fmt: skip
    try:
        assert await consumer.forget_consumers(60.0) == 0  # nobody idle that long
        assert set(consumers(rclient, stream)) == {"gone-owning", "gone-idle"}
        assert await consumer.forget_consumers(0.1) == 1
    finally:
        await consumer.close()
    # The one that owns a pending job stays, so its job can still be reclaimed.
    assert set(consumers(rclient, stream)) == {"gone-owning"}
    assert consumers(rclient, stream)["gone-owning"]["pending"] == 1
