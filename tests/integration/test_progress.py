"""Issue 28: ``current_job().set_progress`` against a real worker and Redis: the latest
value reaches ``App.job`` while the job runs and after it ended, a tight loop of reports
costs few writes, and ``read_progress`` reads many jobs at once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from conftest import running, wait_until, worker_for
from lockgate import App, current_job
from lockgate.core.progress import MAX_NOTE
from lockgate.ops.progress import read_progress

BACKENDS = ["streams", "sorted"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_async_task_reports_progress_seen_while_it_runs_and_after(
    make_app: Callable[..., App], backend: str
) -> None:
    app = make_app(backend=backend)
    step, go_on = asyncio.Event(), asyncio.Event()

    @app.task
    async def crunch() -> str:
        job = current_job()
        job.set_progress(0.1)
        job.set_progress(0.25, "row 250 of 1,000")
        step.set()
        await go_on.wait()
        job.set_progress(1.0, "all rows")
        return "ok"

    assert app.job("never").progress is None
    r = await crunch.enqueue_async(job_id="crunch-1")
    assert (await app.job_async("crunch-1")).progress is None  # waiting, never reported
    async with running(worker_for(app)):
        await asyncio.wait_for(step.wait(), 30)
        info = await wait_until(
            lambda: _with_progress(app, "crunch-1", 0.25), message="progress while running"
        )
        assert (info.status, info.progress_note) == ("running", "row 250 of 1,000")
        go_on.set()
        await wait_until(lambda: r.status() == "done", message="done")
        await wait_until(lambda: _with_progress(app, "crunch-1", 1.0), message="final value")
    info = app.job("crunch-1")
    assert (info.status, info.progress, info.progress_note) == ("done", 1.0, "all rows")


async def test_a_sync_task_reports_progress_from_its_thread(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    halfway, go_on = threading.Event(), threading.Event()

    @app.task
    def copy_files(n: int) -> None:
        job = current_job()
        for i in range(1, n // 2 + 1):
            job.set_progress(i / n, f"file {i} of {n}")
        halfway.set()
        go_on.wait(30)
        job.set_progress(1.0)

    await copy_files.enqueue_async(10, job_id="copy-1")
    async with running(worker_for(app)):
        await asyncio.to_thread(halfway.wait, 30)
        info = await wait_until(
            lambda: _with_progress(app, "copy-1", 0.5), message="progress of a sync task"
        )
        assert (info.status, info.progress_note) == ("running", "file 5 of 10")
        go_on.set()
        await wait_until(lambda: _with_progress(app, "copy-1", 1.0), message="final value")
    info = app.job("copy-1")
    assert (info.status, info.progress, info.progress_note) == ("done", 1.0, None)


async def _with_progress(app: App, job_id: str, value: float):  # type: ignore[no-untyped-def]
    info = await app.job_async(job_id)
    return info if info.progress == value else None


async def test_a_thousand_reports_in_a_tight_loop_cost_few_writes(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    @app.task
    async def tight() -> None:
        job = current_job()
        for i in range(1, 1001):
            job.set_progress(i / 1000, f"item {i}")

    await tight.enqueue_async(job_id="tight-1")
    worker = worker_for(app)
    async with running(worker):
        await wait_until(lambda: _with_progress(app, "tight-1", 1.0), message="last value")
        assert worker._runner is not None
        writes = worker._runner.progress.written
    # The loop never awaits: the writer sees only its last value (a slower run would
    # still write at most once per flush, far below one write per report).
    assert 1 <= writes <= 10, writes
    assert app.job("tight-1").progress_note == "item 1000"


async def test_read_progress_reads_many_jobs_and_leaves_out_those_without(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    @app.task
    async def part(n: int) -> None:
        if n:
            current_job().set_progress(n / 10, "x" * (MAX_NOTE + 50) if n == 3 else None)

    for n in range(4):
        await part.enqueue_async(n, job_id=f"part-{n}")
    async with running(worker_for(app)):
        found = await wait_until(
            lambda: _read_all(app, ["part-0", "part-1", "part-2", "part-3", "nope"]),
            message="three progress values",
        )
    assert set(found) == {"part-1", "part-2", "part-3"}
    assert found["part-1"] == (0.1, None) and found["part-2"] == (0.2, None)
    assert found["part-3"] == (0.3, "x" * MAX_NOTE)
    assert await read_progress(app, []) == {}


async def _read_all(app: App, ids: list[str]):  # type: ignore[no-untyped-def]
    found = await read_progress(app, ids)
    return found if len(found) == 3 else None


async def test_read_progress_finds_keyed_jobs_across_partitions(
    make_app: Callable[..., App],
) -> None:
    app = make_app(partitions=4)

    @app.task(key_by="tenant")
    async def per_tenant(tenant: str) -> None:
        current_job().set_progress(0.5, tenant)

    ids = [f"t-{i}" for i in range(8)]
    for i, job_id in enumerate(ids):
        await per_tenant.enqueue_async(f"tenant-{i}", job_id=job_id)
    async with running(worker_for(app)):
        found = await wait_until(lambda: _read_n(app, ids, 8), message="every keyed job's progress")
    assert found == {f"t-{i}": (0.5, f"tenant-{i}") for i in range(8)}
    assert (await app.job_async("t-3")).progress_note == "tenant-3"


async def _read_n(app: App, ids: list[str], n: int):  # type: ignore[no-untyped-def]
    found = await read_progress(app, ids)
    return found if len(found) == n else None


@pytest.mark.parametrize(
    ("value", "note"),
    [(1.5, None), (-0.1, None), (float("nan"), None), (True, None), ("0.5", None),
     (None, None), (0.5, 7)],
)  # fmt: skip
async def test_a_bad_report_raises_value_error_in_the_task(
    make_app: Callable[..., App], value: object, note: object
) -> None:
    app = make_app()
    raised: list[BaseException] = []

    @app.task
    async def bad() -> None:
        try:
            current_job().set_progress(value, note)  # type: ignore[arg-type]
        except ValueError as e:
            raised.append(e)

    await bad.enqueue_async(job_id="bad-1")
    async with running(worker_for(app)):
        await wait_until(lambda: raised, message="ValueError")
    assert "progress" in str(raised[0])
