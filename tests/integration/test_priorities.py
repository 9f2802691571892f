"""Order of execution: FIFO within a level, strict precedence, weighted shares, aging.

Each test fills the queues before the worker starts (or keeps a level busy with a
producer) and records the order in which jobs start, from inside the tasks.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import pytest
import redis

from conftest import running, wait_until, worker_for
from lockgate import App, current_job
from lockgate.backend.partitions import partition_of

LEVELS = ("critical", "normal", "low")
BACKENDS = ["streams", "sorted"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_fifo_within_a_level(make_app: Callable[..., App], backend: str) -> None:
    app = make_app(backend=backend)
    started: list[int] = []

    @app.task(priority="low")
    async def job(n: int) -> None:
        started.append(n)

    for n in range(30):  # one call each: distinct stamps and entry ids
        job.enqueue(n)
    app.enqueue_many([job.message(n) for n in range(30, 60)])  # and one batch
    await job.enqueue_async(60)
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.processed == 61)
    assert started == list(range(61))


async def test_fifo_within_a_level_of_each_partition(make_app: Callable[..., App]) -> None:
    """With partitions, FIFO holds within a level of each partition."""
    app = make_app(partitions=4)
    started: list[str] = []

    @app.task(priority="low")
    async def job(n: int) -> None:
        started.append(current_job().job_id)

    sent = [job.enqueue(n).job_id for n in range(40)]
    sent += [r.job_id for r in app.enqueue_many([job.message(n) for n in range(40, 80)])]
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.processed == 80)
    assert sorted(started) == sorted(sent)
    by_partition: dict[int, list[str]] = {}
    for job_id in started:
        by_partition.setdefault(partition_of(job_id, 4), []).append(job_id)
    assert len(by_partition) == 4
    for order in by_partition.values():
        assert order == [job_id for job_id in sent if job_id in order]


@pytest.mark.parametrize(
    ("backend", "policy", "partitions"),
    [("streams", "strict", 1), ("streams", "strict", 4), ("sorted", "weighted", 1),
     ("sorted", "strict", 1)],
)  # fmt: skip
async def test_strict_precedence_with_a_backlog_everywhere(
    make_app: Callable[..., App], backend: str, policy: str, partitions: int
) -> None:
    """Every critical before any normal, every normal before any low.

    The sorted backend ranks by level (with the default 60 s aging) whatever the policy.
    Jobs are enqueued lowest level first, the worst case for anything FIFO-like; with
    partitions, the levels' jobs are spread over all of them.
    """
    app = make_app(backend=backend, partitions=partitions)
    started: list[str] = []

    @app.task
    async def job() -> None:
        started.append(current_job().level)

    for level in reversed(LEVELS):
        app.enqueue_many([job.message(priority=level) for _ in range(20)])
    worker = worker_for(app, concurrency=1, policy=policy)
    async with running(worker):
        await wait_until(lambda: worker.processed == 60)
    assert started == ["critical"] * 20 + ["normal"] * 20 + ["low"] * 20


@pytest.mark.parametrize(("concurrency", "partitions"), [(1, 1), (8, 1), (1, 4), (8, 4)])
async def test_weighted_shares_under_a_flood(
    make_app: Callable[..., App], concurrency: int, partitions: int
) -> None:
    """Shares of started jobs follow the 10:5:1 weights while every level has work."""
    app = make_app(partitions=partitions)
    started: list[str] = []

    @app.task
    async def job() -> None:
        started.append(current_job().level)

    window = 16 * 24  # 384 starts: 240 critical, 120 normal, 24 low expected
    backlog = {"critical": 300, "normal": 160, "low": 40}  # more than each level's share
    app.enqueue_many(
        [job.message(priority=level) for level, n in backlog.items() for _ in range(n)]
    )
    worker = worker_for(app, concurrency=concurrency)
    async with running(worker):
        # Drained before the stop: stopping a busy worker is tested on its own.
        await wait_until(lambda: worker.processed == sum(backlog.values()))
    counts = Counter(started[:window])
    # Every level still had work through the whole window.
    assert all(counts[level] < n for level, n in backlog.items()), counts
    for level, weight in zip(LEVELS, (10, 5, 1), strict=True):
        expected = window * weight / 16
        assert abs(counts[level] - expected) <= 0.15 * expected, (level, counts)


@pytest.mark.parametrize(("backend", "aging"), [("streams", 60.0), ("sorted", 0.05)])
async def test_low_progresses_under_a_continuous_critical_stream(
    make_app: Callable[..., App], backend: str, aging: float
) -> None:
    """A producer keeps the critical level busy; low jobs still complete.

    Streams: the weighted policy gives low its share. Sorted: aging lets a low job that
    has waited overtake newer critical ones.
    """
    app = make_app(backend=backend, aging=aging)
    produced = 0
    critical_started = 0
    critical_ran = asyncio.Event()
    backlog_at_low_start: list[int] = []

    @app.task(priority="critical")
    async def urgent() -> None:
        nonlocal critical_started
        critical_started += 1
        critical_ran.set()

    @app.task(priority="low")
    async def background() -> None:
        backlog_at_low_start.append(produced - critical_started)

    producing = True

    async def producer() -> None:
        nonlocal produced
        while producing:
            missing = 40 - (produced - critical_started)
            if missing > 0:
                await app.enqueue_many_async([urgent.message() for _ in range(missing)])
                produced += missing
            critical_ran.clear()
            await critical_ran.wait()

    async def stop_producing() -> None:
        # Cooperative, not cancel(): a cancelled enqueue may or may not have landed.
        nonlocal producing
        producing = False
        critical_ran.set()
        await asyncio.wait_for(feeding, 30)

    feeding = asyncio.create_task(producer())
    try:
        await wait_until(lambda: produced > 0)
        for _ in range(5):
            await background.enqueue_async()
        worker = worker_for(app, concurrency=2)
        async with running(worker):
            await wait_until(lambda: len(backlog_at_low_start) == 5, message="low jobs ran")
            flooded = critical_started
            await stop_producing()
            # Drained before the stop: stopping a busy worker is tested on its own.
            await wait_until(lambda: worker.processed == produced + 5)
    finally:
        if not feeding.done():
            await stop_producing()
    # Critical work was waiting whenever a low job started, and plenty of it ran.
    assert min(backlog_at_low_start) > 0
    assert flooded >= 10


async def test_aging_on_the_sorted_backend(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    """A job that waited ``aging`` seconds per level of difference overtakes newer ones.

    With aging 0.2 s a normal job is worth 0.2 s and a critical one 0.4 s of waiting.
    """
    app = make_app(backend="sorted", aging=0.2)
    started: list[str] = []

    @app.task
    async def job(name: str) -> None:
        started.append(name)

    def server_seconds() -> float:
        seconds, micros = rclient.time()
        return seconds + micros / 1_000_000

    job.enqueue("low-old", priority="low")
    job.enqueue("normal-old", priority="normal")
    since = server_seconds()
    await wait_until(lambda: server_seconds() > since + 0.45, message="jobs aged")
    app.enqueue_many(
        [job.message(f"critical-{n}", priority="critical") for n in range(3)]
        + [job.message("normal-new", priority="normal"), job.message("low-new", priority="low")]
    )
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.processed == 7)
    assert started == [
        "normal-old",  # ranked 0.2 s ahead of low-old
        "low-old",  # waited over 0.4 s: ahead of newer critical jobs
        "critical-0",
        "critical-1",
        "critical-2",
        "normal-new",
        "low-new",
    ]
