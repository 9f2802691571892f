"""Enqueue: dedup by job id under concurrency, bulk enqueue, ids freed after completion."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
import redis

from conftest import job_ended, running, wait_until, worker_for
from lockgate import App, EnqueueResult

BACKENDS = ["streams", "sorted"]


def entries(rclient: redis.Redis, app: App, queue: str = "default") -> int:
    """How many jobs of a queue are stored, whatever their level."""
    if app.backend == "streams":
        return sum(rclient.xlen(app.keys.stream(queue, level)) for level in app.levels.names)
    assert rclient.zcard(app.keys.sorted_waiting(queue)) == rclient.hlen(
        app.keys.sorted_payloads(queue)
    )
    return int(rclient.zcard(app.keys.sorted_waiting(queue)))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_dedup_under_concurrent_producers(
    make_app: Callable[..., App], rclient: redis.Redis, backend: str
) -> None:
    """16 threads and 8 asyncio tasks race on one job id: one wins, one entry is stored."""
    app = make_app(backend=backend)
    ran: list[int] = []

    @app.task
    async def job(n: int) -> None:
        ran.append(n)

    barrier = threading.Barrier(16)
    results: list[tuple[int, EnqueueResult]] = []
    lock = threading.Lock()

    def produce(n: int) -> None:
        barrier.wait()
        result = job.enqueue(n, job_id="same")
        with lock:
            results.append((n, result))

    async def produce_async(n: int) -> None:
        results.append((n, await job.enqueue_async(n, job_id="same", priority="critical")))

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    await asyncio.gather(*(produce_async(100 + n) for n in range(8)))
    for thread in threads:
        await asyncio.to_thread(thread.join, 30)
    assert len(results) == 24
    assert {result.job_id for _, result in results} == {"same"}
    winners = [n for n, result in results if result.created]
    assert len(winners) == 1
    assert entries(rclient, app) == 1

    worker = worker_for(app, concurrency=4)
    async with running(worker):
        await wait_until(lambda: worker.processed == 1)
        assert ran == winners
        # Done: the id is free again.
        again = await job.enqueue_async(7, job_id="same")
        assert again == EnqueueResult("same", True)
        await wait_until(lambda: worker.processed == 2)
    assert ran == [*winners, 7]
    assert entries(rclient, app) == 0
    assert job_ended(rclient, app.keys, "same")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_queued_or_running_id_is_not_enqueued_again(
    make_app: Callable[..., App], backend: str
) -> None:
    app = make_app(backend=backend)
    running_now = asyncio.Event()
    release = asyncio.Event()

    @app.task
    async def job() -> None:
        running_now.set()
        await release.wait()

    assert job.enqueue(job_id="x").created
    assert not job.enqueue(job_id="x").created  # queued
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await asyncio.wait_for(running_now.wait(), 30)
        assert not (await job.enqueue_async(job_id="x")).created  # running
        release.set()
        await wait_until(lambda: worker.processed == 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bulk_results_follow_the_callers_order(
    make_app: Callable[..., App], rclient: redis.Redis, backend: str
) -> None:
    app = make_app(backend=backend)

    @app.task
    def job(n: int) -> None: ...

    job.enqueue(0, job_id="old")
    messages = [
        job.message(1, job_id="a", priority="low"),
        job.message(2, job_id="old", priority="critical"),
        job.message(3, job_id="b", priority="critical"),
        job.message(4, job_id="a", priority="normal"),  # duplicate inside the batch
        job.message(5, job_id="c"),
        job.message(6, job_id="b"),
        job.message(7),
    ]
    results = app.enqueue_many(messages)
    assert [r.job_id for r in results] == [m.job.id for m in messages]
    assert [r.created for r in results] == [True, False, True, False, True, False, True]
    assert entries(rclient, app) == 5  # old, a, b, c and the generated one


@pytest.mark.parametrize("backend", BACKENDS)
async def test_bulk_enqueue_larger_than_one_script_batch(
    make_app: Callable[..., App], rclient: redis.Redis, backend: str
) -> None:
    app = make_app(backend=backend)

    @app.task
    def job(n: int) -> None: ...

    # 1,201 messages span three script calls; duplicates straddle the batch boundaries.
    messages = [job.message(n, job_id=f"j{n}") for n in range(1200)]
    messages.append(job.message(-1, job_id="j0"))
    messages[700] = job.message(700, job_id="j3")
    results = await app.enqueue_many_async(messages)
    assert [r.job_id for r in results] == [m.job.id for m in messages]
    created = [r.created for r in results]
    assert created.count(False) == 2
    assert created[700] is False and created[1200] is False
    assert entries(rclient, app) == 1199


def test_bulk_enqueue_across_queues_on_the_sorted_backend(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app(backend="sorted")

    @app.task(queue="a")
    def on_a(n: int) -> None: ...

    @app.task(queue="b")
    def on_b(n: int) -> None: ...

    messages = [
        on_a.message(1, job_id="a1"),
        on_b.message(1, job_id="b1"),
        on_a.message(2, job_id="a2", priority="critical"),
        on_b.message(2, job_id="a1"),  # same id as a job of queue a: ids are per namespace
        on_a.message(3, job_id="a1"),
        on_b.message(3, job_id="b3", priority="low"),
    ]
    results = app.enqueue_many(messages)
    assert [r.job_id for r in results] == ["a1", "b1", "a2", "a1", "a1", "b3"]
    assert [r.created for r in results] == [True, True, True, False, False, True]
    waiting_a = [m.decode() for m in rclient.zrange(app.keys.sorted_waiting("a"), 0, -1)]
    waiting_b = [m.decode() for m in rclient.zrange(app.keys.sorted_waiting("b"), 0, -1)]
    assert waiting_a == ["a2", "a1"]
    assert waiting_b == ["b1", "b3"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_bulk_jobs_all_run(make_app: Callable[..., App], backend: str) -> None:
    app = make_app(backend=backend)
    ran: list[tuple[str, int]] = []

    @app.task(queue="a")
    async def on_a(n: int) -> None:
        ran.append(("a", n))

    @app.task(queue="b")
    def on_b(n: int) -> None:
        ran.append(("b", n))

    app.enqueue_many([(on_a if n % 2 else on_b).message(n) for n in range(40)])
    worker = worker_for(app, concurrency=4)
    async with running(worker):
        await wait_until(lambda: worker.processed == 40)
    assert sorted(ran) == sorted(("a" if n % 2 else "b", n) for n in range(40))
