"""Arguments end to end: typed values reach the task as their types; poison stays out.

A task annotated with ``date``, ``Decimal``, ``UUID`` and ``bytes`` receives those types
from a real worker; a value that would change on the way is refused at enqueue with
nothing sent; an entry nested 5,000 deep is dead-lettered as undecodable while the worker
keeps running the jobs after it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest
import redis

from conftest import job_ended, running, wait_until, worker_for
from lockgate import App, SerializationError
from lockgate.backend.keys import GROUP
from lockgate.core.codec import MAX_DEPTH
from lockgate.ops.deadletter import list_dead

REF = UUID("12345678-1234-5678-1234-567812345678")


def deep_entry(depth: int) -> bytes:
    return (
        b'{"id":"x","task":"t","queue":"default","level":"normal","args":'
        + b"[" * depth
        + b"]" * depth
        + b"}"
    )


async def test_annotated_arguments_reach_the_task_as_their_types(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    received: list[tuple[Any, ...]] = []

    @app.task
    async def book(d: date, amount: Decimal, ref: UUID, blob: bytes) -> None:
        received.append((d, amount, ref, blob))

    book.enqueue(date(2024, 2, 29), Decimal("19.90"), REF, b"\x00\xffpdf")
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.processed == 1 or worker.dead)
    assert worker.dead == 0, list_dead(app)
    assert received == [(date(2024, 2, 29), Decimal("19.90"), REF, b"\x00\xffpdf")]
    assert [type(value) for value in received[0]] == [date, Decimal, UUID, bytes]
    assert str(received[0][1]) == "19.90"


async def test_a_value_that_would_change_is_refused_at_enqueue(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()

    @app.task
    def report(day) -> None:  # type: ignore[no-untyped-def]
        ...

    with pytest.raises(SerializationError, match=r"task 'report', parameter 'day'.*'2024-02-29'"):
        report.enqueue(date(2024, 2, 29), job_id="refused-1")
    deep: list[Any] = []
    for _ in range(1_000):
        deep = [deep]
    with pytest.raises(SerializationError, match=f"limit of {MAX_DEPTH}"):
        await report.enqueue_async(deep, job_id="refused-2")
    # Nothing reached Redis: no entry, and both job ids are still free.
    assert report.enqueue("2024-02-29", job_id="refused-1").created
    assert rclient.xlen(app.keys.stream("default", "normal")) == 1
    assert job_ended(rclient, app.keys, "refused-2")


async def test_an_entry_nested_5000_deep_is_dead_lettered_and_the_worker_goes_on(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    ran: list[int] = []

    @app.task
    async def good(n: int) -> None:
        ran.append(n)

    stream = app.keys.stream("default", "normal")
    poison_id = rclient.xadd(stream, {"job": deep_entry(5_000)}).decode()
    good.enqueue(1)
    worker = worker_for(app, concurrency=1)
    async with running(worker) as run:
        await wait_until(lambda: worker.dead == 1 and ran == [1])
        good.enqueue(2)  # and it still takes new work afterwards
        await wait_until(lambda: ran == [1, 2])
        assert not run.done()
    (letter,) = list_dead(app)
    assert (letter.entry, letter.reason) == (poison_id, "undecodable entry")
    assert f"limit of {MAX_DEPTH}" in letter.error
    assert rclient.xpending(stream, GROUP)["pending"] == 0
