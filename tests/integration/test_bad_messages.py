"""Messages a worker cannot run are logged with their id and dead-lettered, never dropped.

Unknown tasks, undecodable entries, entries without a job and wrong arguments go to the
dead-letter stream with the job as it was stored and why; the original entry is acked and
deleted, so nothing stays pending and nothing disappears without a trace.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
import redis

from conftest import job_ended, running, wait_until, worker_for
from lockgate import App
from lockgate.backend.keys import GROUP
from lockgate.core.codec import Job, encode
from lockgate.ops.deadletter import FIELDS, list_dead
from lockgate.ops.inspect import queue_stats

GARBAGE = b"\xff{not json"


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def dead_letters(rclient: redis.Redis, app: App) -> list[dict[str, bytes]]:
    """The dead-letter stream as stored, oldest first (bytes kept exactly)."""
    return [
        {name.decode(): value for name, value in fields.items()}
        for _, fields in rclient.xrange(app.keys.dead())
    ]


async def test_streams_unrunnable_messages_are_dead_lettered(
    make_app: Callable[..., App], rclient: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    worker_app = make_app(unknown_task_grace=0)  # put back for a while otherwise
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
    garbage_id = rclient.xadd(stream, {"job": GARBAGE}).decode()
    no_field_id = rclient.xadd(stream, {"payload": "x"}).decode()
    known.enqueue(5, job_id="good-1")
    stored = {entry_id.decode(): fields for entry_id, fields in rclient.xrange(stream)}
    ids = list(stored)
    assert len(ids) == 5

    worker = worker_for(worker_app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.processed == 1 and worker.dead == 4)
    assert ran == [5]
    assert worker.retried == 0

    # Each bad message is logged once on its way to the dead-letter queue, by job id
    # where the entry has one.
    logged = errors(caplog)
    to_dlq = [m for m in logged if "dead-letter queue" in m]
    assert len(to_dlq) == 4, logged
    assert any("ghost-1" in m and "unknown task 'ghost'" in m for m in to_dlq), logged
    assert any("wrong-args-1" in m and "wrong arguments" in m for m in to_dlq), logged
    assert sum("undecodable" in m for m in to_dlq) == 2, logged

    # Nothing silently dropped: every bad entry is in the DLQ, named by its entry id,
    # with the job bytes exactly as they were stored.
    letters = {letter["entry"].decode(): letter for letter in dead_letters(rclient, worker_app)}
    assert set(letters) == set(ids[:4])
    for entry_id, letter in letters.items():
        assert set(letter) == set(FIELDS)
        assert letter["origin"] == stream.encode()
        assert letter["queue"] == b"default"
        assert letter["deliveries"] == b"1"
        assert letter["job"] == stored[entry_id].get(b"job", b"")
    ghost_letter = letters[ids[0]]
    assert (ghost_letter["job_id"], ghost_letter["task"]) == (b"ghost-1", b"ghost")
    assert ghost_letter["reason"] == b"unknown task 'ghost'"
    assert (ghost_letter["attempt"], ghost_letter["level"]) == (b"1", b"normal")
    wrong = letters[ids[1]]
    assert (wrong["job_id"], wrong["reason"]) == (b"wrong-args-1", b"wrong arguments")
    assert wrong["error_type"] == b"InvalidArguments"
    assert b"task 'known'" in wrong["error"]
    garbage = letters[garbage_id]
    assert (garbage["job_id"], garbage["reason"]) == (b"?", b"undecodable entry")
    assert b"undecodable" in garbage["error"]
    no_field = letters[no_field_id]
    assert (no_field["job_id"], no_field["reason"]) == (b"?", b"undecodable entry")
    assert b"no 'job' field" in no_field["error"]

    # Acked and deleted: nothing pending, the stream empty, every job id free again.
    assert rclient.xpending(stream, GROUP)["pending"] == 0
    assert rclient.xlen(stream) == 0
    for job_id in ("ghost-1", "wrong-args-1", "good-1"):
        assert job_ended(rclient, worker_app.keys, job_id)
    stats = await queue_stats(worker_app)
    (normal,) = [row for row in stats.levels if row.level == "normal"]
    assert (normal.length, normal.pending, normal.waiting, normal.delayed) == (0, 0, 0, 0)
    assert stats.dead_letters == 4
    assert worker.processed == 1


async def test_sorted_unrunnable_messages_are_dead_lettered(
    make_app: Callable[..., App], rclient: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(backend="sorted", unknown_task_grace=0)  # put back for a while otherwise
    ran: list[int] = []

    @app.task
    async def known(x: int) -> None:
        ran.append(x)

    q = app.keys.sorted_keys("default")
    unknown = Job(id="ghost-1", task="ghost", queue="default", level="normal")
    wrong = Job(id="wrong-args-1", task="known", queue="default", level="normal", args=[1, 2])
    payloads = {"ghost-1": encode(unknown), "wrong-args-1": encode(wrong), "garbage-1": GARBAGE}
    for rank, (job_id, payload) in enumerate(payloads.items(), start=1):
        rclient.zadd(q.waiting, {job_id: rank})
        rclient.hset(q.payloads, job_id, payload)
        rclient.hset(q.ranks, job_id, rank)
        rclient.set(app.keys.job(job_id), "sorted")
    known.enqueue(5, job_id="good-1")

    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.processed == 1 and worker.dead == 3)
    assert ran == [5]
    logged = [m for m in errors(caplog) if "dead-letter queue" in m]
    reasons = {
        "ghost-1": b"unknown task 'ghost'",
        "wrong-args-1": b"wrong arguments",
        "garbage-1": b"undecodable entry",
    }
    assert len(logged) == 3, logged
    letters = {letter["job_id"].decode(): letter for letter in dead_letters(rclient, app)}
    assert set(letters) == set(reasons)
    for job_id, reason in reasons.items():
        assert any(job_id in m and reason.decode() in m for m in logged), (job_id, logged)
        letter = letters[job_id]
        assert letter["reason"] == reason
        assert letter["job"] == payloads[job_id]
        assert (letter["origin"], letter["entry"]) == (b"default", job_id.encode())
        assert letter["deliveries"] == b"1"
        # Out of flight, payload, rank and delivery count gone, job id free.
        assert rclient.zscore(q.inflight, job_id) is None
        assert rclient.zscore(q.waiting, job_id) is None
        assert not rclient.hexists(q.payloads, job_id)
        assert not rclient.hexists(q.ranks, job_id)
        assert not rclient.hexists(q.deliveries, job_id)
        assert job_ended(rclient, app.keys, job_id)
    assert letters["wrong-args-1"]["error_type"] == b"InvalidArguments"
    assert b"undecodable" in letters["garbage-1"]["error"]
    assert not rclient.hexists(q.payloads, "good-1")
    stats = await queue_stats(app)
    (row,) = stats.levels
    assert (row.length, row.waiting, row.pending, row.delayed) == (0, 0, 0, 0)
    assert stats.dead_letters == 3


async def test_list_dead_reads_letters_of_entries_that_are_not_utf8(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()

    @app.task
    async def known() -> None: ...

    entry_id = rclient.xadd(app.keys.stream("default", "normal"), {"job": GARBAGE}).decode()
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.dead == 1)
    (letter,) = list_dead(app)
    assert (letter.entry, letter.reason) == (entry_id, "undecodable entry")


async def test_an_undecodable_entry_is_logged_with_its_entry_id_and_cause(
    make_app: Callable[..., App], rclient: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Without a job id, the log line must still say which entry died and why."""
    app = make_app()

    @app.task
    async def known() -> None: ...

    stream = app.keys.stream("default", "normal")
    garbage_id = rclient.xadd(stream, {"job": GARBAGE}).decode()
    no_field_id = rclient.xadd(stream, {"payload": "x"}).decode()
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.dead == 2)
    logged = errors(caplog)
    assert any(garbage_id in m and "undecodable" in m for m in logged), logged
    assert any(no_field_id in m and "no 'job' field" in m for m in logged), logged
