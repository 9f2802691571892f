"""Tracebacks a real worker stores (dead letters, job statuses) start at the task's frame,
not at the runner's, the thread pool's or asyncio's frames that ran it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conftest import drain
from lockgate import App, JobFailed
from lockgate.ops.deadletter import list_dead


def first_frame(traceback: str) -> str:
    return next(line for line in traceback.splitlines() if line.startswith("  File "))


def order_total(order_id: str) -> int:
    raise LookupError(f"no order {order_id}")


async def test_stored_tracebacks_start_at_the_task(make_app: Callable[..., App]) -> None:
    app = make_app()

    @app.task(retries=0, keep_result=60)
    def charge_sync(order_id: str) -> None:
        try:
            order_total(order_id)
        except LookupError as e:
            raise ValueError("cannot charge") from e

    @app.task(retries=0, keep_result=60)
    async def charge_async(order_id: str) -> None:
        order_total(order_id)

    @app.task(retries=0, timeout=30)
    def charge_timed(order_id: str) -> None:
        order_total(order_id)

    jobs = [charge_sync.enqueue("A1"), charge_async.enqueue("A2"), charge_timed.enqueue("A3")]
    await drain(app, concurrency=3)
    letters = {letter.job_id: letter for letter in list_dead(app)}
    assert set(letters) == {job.job_id for job in jobs}
    for job, name in zip(jobs, ["charge_sync", "charge_async", "charge_timed"], strict=True):
        text = letters[job.job_id].traceback
        assert first_frame(text).startswith(f'  File "{__file__}", line ')
        assert first_frame(text).endswith(f", in {name}"), text
        assert "lockgate/worker" not in text and "concurrent/futures" not in text, text
        assert 'in order_total\n    raise LookupError(f"no order' in text
    # The cause stays, with its own frames; the job's status keeps the same text.
    sync_text = letters[jobs[0].job_id].traceback
    assert "The above exception was the direct cause" in sync_text
    assert sync_text.rstrip().endswith("ValueError: cannot charge")
    with pytest.raises(JobFailed) as failed:
        jobs[0].result(timeout=10)
    assert failed.value.traceback == sync_text
    info = app.job(jobs[1].job_id)
    assert info.error is not None
    assert first_frame(info.error.traceback).endswith(", in charge_async")
