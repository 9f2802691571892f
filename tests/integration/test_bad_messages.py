"""Messages a worker cannot run are logged with their id and left pending, never acked."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
import redis

from conftest import running, wait_until, worker_for
from lockgate import App
from lockgate.codec import Job, encode
from lockgate.keys import GROUP


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_streams_unrunnable_messages_stay_pending(
    make_app: Callable[..., App], rclient: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    worker_app = make_app()
    ran: list[int] = []

    @worker_app.task
    async def known(x: int) -> None:
        ran.append(x)

    # A producer that shares the namespace but not the worker's view of the tasks.
    producer = make_app()

    @producer.task
    def ghost() -> None: ...

    @producer.task(name="known")
    def known_elsewhere(x: int, y: int) -> None: ...

    stream = worker_app.keys.stream("default", "normal")
    ghost.enqueue(job_id="ghost-1")
    known_elsewhere.enqueue(1, 2, job_id="wrong-args-1")
    garbage_id = rclient.xadd(stream, {"job": b"\xff{not json"}).decode()
    no_field_id = rclient.xadd(stream, {"payload": "x"}).decode()
    known.enqueue(5, job_id="good-1")
    ids = [entry_id.decode() for entry_id, _ in rclient.xrange(stream)]
    assert len(ids) == 5

    worker = worker_for(worker_app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.processed == 1)
        await wait_until(lambda: len(errors(caplog)) >= 4)
    assert ran == [5]

    logged = errors(caplog)
    assert any("ghost-1" in m and "unknown task 'ghost'" in m for m in logged), logged
    assert any("wrong-args-1" in m and "task 'known'" in m for m in logged), logged
    assert any(garbage_id in m and "undecodable" in m for m in logged), logged
    assert any(no_field_id in m and "no 'job' field" in m for m in logged), logged
    assert all("left pending" in m for m in logged), logged

    # Delivered, never acked: pending in the group, still in the stream, ids still taken.
    pending = rclient.xpending_range(stream, GROUP, "-", "+", 10)
    assert sorted(p["message_id"].decode() for p in pending) == sorted(ids[:4])
    assert [entry_id.decode() for entry_id, _ in rclient.xrange(stream)] == ids[:4]
    assert rclient.exists(worker_app.keys.job("ghost-1"), worker_app.keys.job("wrong-args-1")) == 2
    assert not rclient.exists(worker_app.keys.job("good-1"))
    assert worker.processed == 1


async def test_sorted_unrunnable_messages_are_not_acked(
    make_app: Callable[..., App], rclient: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(backend="sorted")
    ran: list[int] = []

    @app.task
    async def known(x: int) -> None:
        ran.append(x)

    q = app.keys.sorted_keys("default")
    unknown = Job(id="ghost-1", task="ghost", queue="default", level="normal")
    wrong = Job(id="wrong-args-1", task="known", queue="default", level="normal", args=[1, 2])
    for rank, job_id, payload in [
        (1, "ghost-1", encode(unknown)),
        (2, "wrong-args-1", encode(wrong)),
        (3, "garbage-1", b"\xff{not json"),
    ]:
        rclient.zadd(q.waiting, {job_id: rank})
        rclient.hset(q.payloads, job_id, payload)
        rclient.hset(q.ranks, job_id, rank)
        rclient.set(app.keys.job(job_id), "sorted")
    known.enqueue(5, job_id="good-1")

    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.processed == 1)
        await wait_until(lambda: len(errors(caplog)) >= 3)
    assert ran == [5]
    logged = errors(caplog)
    for job_id in ("ghost-1", "wrong-args-1", "garbage-1"):
        assert any(job_id in m and "left pending" in m for m in logged), (job_id, logged)
        # Still in flight under a lease, payload kept: it comes back when the lease ends.
        assert rclient.zscore(q.inflight, job_id) is not None
        assert rclient.hexists(q.payloads, job_id)
        assert rclient.exists(app.keys.job(job_id))
    assert not rclient.hexists(q.payloads, "good-1")
