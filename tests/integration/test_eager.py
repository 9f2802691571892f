"""``with app.eager():`` runs enqueued jobs inline for users' tests: retries applied,
``current_job()`` set, results readable, nothing queued."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import date

import pytest

from lockgate import App, RetryableError, current_job
from lockgate.errors import InvalidArguments, JobFailed
from lockgate.ops.inspect import queue_stats


async def test_eager_runs_inline_with_retries_and_current_job(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    seen: list[tuple[str, int]] = []

    @app.task(retries=2, backoff=60)
    def charge(order: str, amount: int) -> dict[str, int]:
        job = current_job()
        seen.append((job.job_id, job.attempt))
        if job.attempt < 2:
            raise RetryableError("gateway busy")  # retried at once: delays are skipped
        return {order: amount}

    @app.task
    async def due(days: int) -> date:
        await asyncio.sleep(0)
        return date(2024, 1, days)

    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(retries=0)
    def boom() -> None:
        raise ValueError("card declined")

    with app.eager():
        r = charge.enqueue("A1", 100, job_id="pay:A1")
        assert r.created and r.status() == "done"
        assert r.result() == {"A1": 100}
        d = await due.enqueue_async(31)
        assert await d.result_async() == date(2024, 1, 31)
        assert due.enqueue(5).result() == date(2024, 1, 5)  # async task from a running loop
        b = boom.enqueue()
        assert b.status() == "dead"
        with pytest.raises(JobFailed, match="card declined"):
            b.result()
        info = app.job("pay:A1")
        assert (info.status, info.attempts) == ("done", 2)
        with pytest.raises(InvalidArguments):
            charge.enqueue("A1")  # the same checks as a real enqueue
    assert seen == [("pay:A1", 1), ("pay:A1", 2)]
    # A handle answers from its eager run after the block too.
    assert (r.status(), r.result()) == ("done", {"A1": 100})
    # Calling the task runs the plain function; nothing was queued.
    assert add(2, 3) == 5
    stats = await queue_stats(app)
    assert sum(row.length + row.delayed for row in stats.levels) == 0
