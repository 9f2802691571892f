"""``@app.cron``: each tick is enqueued once however many schedulers run, a late one does
not enqueue a finished tick again, only the last missed tick runs after downtime, and a
worker runs a scheduler for the cron tasks of the queues it serves. On both backends."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import redis

from conftest import running, wait_until, worker_for
from lockgate import App, ConnectionFailed, current_job
from lockgate.ops.inspect import queue_stats
from lockgate.worker.scheduler import Scheduler, served

BACKENDS = ["streams", "sorted"]
HANG_GUARD = 10.0  # seconds: loose bounds against hangs, never timing goals


def with_cron_task(app: App, runs: list[str], expression: str = "*/5 * * * *") -> App:
    """Declare the same cron task on ``app``, each run recording its job id in ``runs``."""

    @app.cron(expression, priority="low", name="rollup")
    async def rollup() -> None:
        runs.append(current_job().job_id)

    return app


def scheduler(app: App, **options: object) -> Scheduler:
    return Scheduler(app, list(app.schedules.values()), **options)  # type: ignore[arg-type]


async def waiting(app: App) -> int:
    stats = await queue_stats(app)
    return sum(row.length + row.delayed for row in stats.levels)


async def drain(app: App) -> None:
    """Run what is queued with a burst worker (which runs no scheduler)."""
    await asyncio.wait_for(worker_for(app).run(burst=True), HANG_GUARD)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_eight_schedulers_enqueue_a_tick_once_and_a_late_one_not_again(
    make_app: Callable[..., App], rclient: redis.Redis, backend: str
) -> None:
    runs: list[str] = []
    apps = [with_cron_task(make_app(backend=backend), runs) for _ in range(8)]
    now = datetime.now(UTC)
    results = await asyncio.gather(*(scheduler(app).enqueue_due(now) for app in apps))
    assert [len(one) for one in results] == [1] * 8
    assert sum(one[0].created for one in results) == 1
    (job_id,) = {one[0].job_id for one in results}
    tick = apps[0].schedules["rollup"].previous(now)
    assert tick is not None and job_id == f"cron:rollup:{tick:%Y-%m-%dT%H:%M:%SZ}"
    assert await waiting(apps[0]) == 1

    await drain(apps[0])
    assert runs == [job_id]
    # The ended job no longer holds its id (its marker is a final record or gone) ...
    marker = rclient.get(apps[0].keys.job(job_id))
    assert marker is None or marker.startswith(b"{")
    # ... but the tick's once-only key does, for at least the period (5 minutes).
    once_key = apps[0].keys.tick("rollup", job_id.removeprefix("cron:rollup:"))
    assert rclient.pttl(once_key) > 300_000
    late = with_cron_task(make_app(backend=backend), runs)
    assert [r.created for r in await scheduler(late).enqueue_due(now)] == [False]
    assert await waiting(apps[0]) == 0


@pytest.mark.parametrize("backend", BACKENDS)
async def test_after_downtime_only_the_last_missed_tick_runs_and_once(
    make_app: Callable[..., App], backend: str
) -> None:
    runs: list[str] = []
    app = with_cron_task(make_app(backend=backend), runs, "0 3 * * *")
    # Workers were down since May 7th: the ticks of the 8th, 9th and 10th were missed.
    now = datetime(2024, 5, 10, 15, 0, tzinfo=UTC)
    first = scheduler(app, clock=lambda: now)
    loop = asyncio.create_task(first.run())
    try:
        await wait_until(lambda: waiting(app), HANG_GUARD, "the start enqueues a tick")
    finally:
        first.stop.set()  # it sleeps towards the next tick: it must stop at once
        await asyncio.wait_for(loop, HANG_GUARD)
    assert await waiting(app) == 1
    # Another worker starting now (or this one restarting) enqueues nothing more.
    other = with_cron_task(make_app(backend=backend), runs, "0 3 * * *")
    assert [r.created for r in await scheduler(other, clock=lambda: now).enqueue_due()] == [False]
    await drain(app)
    assert runs == ["cron:rollup:2024-05-10T03:00:00Z"]
    # Down three days more: again only the latest tick.
    later = await first.enqueue_due(now + timedelta(days=3))
    assert [(r.job_id, r.created) for r in later] == [("cron:rollup:2024-05-13T03:00:00Z", True)]
    assert await first.enqueue_due(now + timedelta(days=3, hours=1)) == []  # not due again


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_worker_runs_a_per_second_cron_task_each_tick(
    make_app: Callable[..., App], backend: str
) -> None:
    runs: list[str] = []
    app = with_cron_task(make_app(backend=backend), runs, "* * * * * *")
    async with running(worker_for(app)):
        # The start's tick, then at least one the scheduler woke up for.
        await wait_until(lambda: len(runs) >= 2, HANG_GUARD, "two ticks ran")
    assert len(set(runs)) == len(runs)
    assert all(job_id.startswith("cron:rollup:") for job_id in runs)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_cron_task_gets_its_declared_arguments_each_tick(
    make_app: Callable[..., App], backend: str
) -> None:
    app = make_app(backend=backend)
    got: list[tuple[str, int, str]] = []

    # A parameter named like an enqueue option is the task's too (priority=).
    @app.cron("*/5 * * * *", args=("eu",), kwargs={"limit": 7, "priority": "urgent"})
    async def purge(region: str, limit: int, priority: str) -> None:
        got.append((region, limit, priority))

    (result,) = await scheduler(app).enqueue_due(datetime.now(UTC))
    assert result.created and result.job_id.startswith("cron:purge:")
    await drain(app)
    assert got == [("eu", 7, "urgent")]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_three_workers_run_each_tick_once(make_app: Callable[..., App], backend: str) -> None:
    runs: list[str] = []
    apps = [with_cron_task(make_app(backend=backend), runs, "* * * * * *") for _ in range(3)]
    workers = [worker_for(app) for app in apps]
    async with running(workers[0]), running(workers[1]), running(workers[2]):
        await wait_until(lambda: len(set(runs)) >= 3, HANG_GUARD, "three ticks ran")
    assert len(set(runs)) == len(runs), sorted(runs)


async def test_a_worker_schedules_only_the_cron_tasks_of_its_queues(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    @app.cron("0 3 * * *", queue="reports")
    def report() -> None: ...

    @app.cron("0 4 * * *")
    def cleanup() -> None: ...

    assert [s.task for s in served(app, ["default"])] == ["cleanup"]
    assert [s.task for s in served(app, ["default", "reports"])] == ["report", "cleanup"]
    assert served(app, ["mail"]) == []


async def test_a_failed_enqueue_is_raised_to_the_owner_not_swallowed(
    make_app: Callable[..., App],
) -> None:
    # The worker's supervisor logs it and runs the scheduler again after a capped backoff.
    app = with_cron_task(make_app(redis_url="redis://127.0.0.1:1/0"), [])
    with pytest.raises(ConnectionFailed):
        await asyncio.wait_for(scheduler(app).run(), HANG_GUARD)
