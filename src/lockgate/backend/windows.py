"""Bounded reads of a queue's jobs for the dashboard's job pages: the first waiting jobs
of a queue and level from a cursor, the running ones, and a job's dead letter.

Every read here is a window: it names how many entries it reads at most (XRANGE and
XPENDING with COUNT, ZRANGE with a LIMIT, one HGET per job listed), so a page costs the
same on a queue of ten jobs or of millions; nothing scans a queue. The commands are the
ones the README's ACL user has (XINFO GROUPS, XRANGE, XREVRANGE, XPENDING, XLEN, ZRANGE,
ZCARD, HGET); a key or consumer group that does not exist yet reads as empty.

Streams backend: a level's waiting jobs are the stream's entries after the consumer
group's last-delivered id (those before it were handed out: running, or gone once
settled); a keyed job (``@app.task(key_by=...)``) waits in its lane's stream
(``Keys.fair_jobs``), the lanes taking turns in the level's rotation (a sorted set,
``Keys.fair_rotation``), and runs from the level's delivery stream (``Keys.fair_stream``).
Running jobs are the group's pending entries (XPENDING) of both streams; one running job
is its marker's entry's row among them (XPENDING of that id alone). Sorted backend:
one ranked set per queue (every level), a keyed job's head in it and the rest of its lane
behind it (``Keys.sorted_lane``); running jobs are the in-flight set, whose owner tokens
say the worker and the server time of the take.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from lockgate.backend.broker import decode_job, text
from lockgate.backend.connections import AsyncClient
from lockgate.backend.faults import translated
from lockgate.backend.keys import GROUP, Keys
from lockgate.backend.sorted_broker import SortedBroker
from lockgate.backend.store import Store
from lockgate.backend.stream_consumer import JOB_FIELD
from lockgate.core.codec import Job

# The waiting jobs of one rank read past a cursor of that rank (sorted backend): ranks are
# enqueue stamps in microseconds less a level's head start, so ties are rare.
TIES = 32
STREAM_ENTRY = re.compile(r"^\d+-\d+$")  # a marker's entry id (lua/_marker.lua)
DEAD_SPAN_MS = 120_000  # a dead letter is looked for this far either side of the job's end
DEAD_PAGE = 100  # letters read at a time, outward from the job's end
DEAD_PAGES = 10  # pages read each way at most (1,000 letters each side)
Command = tuple[str, tuple[Any, ...], dict[str, Any]]  # a client method, its arguments


@dataclass(frozen=True, slots=True)
class ListedJob:
    """One job of a window.

    Attributes:
        job_id: its id (``?`` when its entry holds no job).
        job: the stored job, None when it cannot be decoded.
        place: where it is: a stream entry id, or its rank (sorted backend).
        lane: a keyed job's lane (``<task>=<key>``) when it waits in one, else None.
        behind: jobs waiting behind it in its lane (a lane's head), else 0.
    """

    job_id: str
    job: Job | None
    place: str
    lane: str | None = None
    behind: int = 0


@dataclass(frozen=True, slots=True)
class Window:
    """Jobs of a window and the cursor of the next one (None: this was the last)."""

    jobs: list[ListedJob]
    next: str | None


@dataclass(frozen=True, slots=True)
class RunningJob:
    """One job a worker runs.

    Attributes:
        job_id: its id.
        job: the stored job, None when it cannot be decoded.
        worker: the worker (consumer) it was handed to.
        deliveries: how many times it was handed out.
        started_ms: when its run started (server ms; sorted backend), else None.
        seen_ms: how long ago its worker last said it runs it (streams: the pending
            entry's idle time, reset by each heartbeat), else None.
    """

    job_id: str
    job: Job | None
    worker: str
    deliveries: int
    started_ms: int | None = None
    seen_ms: int | None = None


def _entry_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms or 0), int(seq or 0)


def _job_of(fields: Any) -> tuple[str, Job | None]:
    data = fields.get(JOB_FIELD) if isinstance(fields, dict) else None
    job = decode_job(data)
    return (job.id if job is not None else "?"), job


async def _replies(client: AsyncClient, calls: Sequence[Command]) -> list[Any]:
    """Run read commands in one round trip; a command on a missing key or group answers
    None instead of its error."""
    if not calls:
        return []
    async with client.pipeline(transaction=False) as pipe:
        for name, args, kwargs in calls:
            getattr(pipe, name)(*args, **kwargs)
        replies: list[Any] = await pipe.execute(raise_on_error=False)
    out: list[Any] = []
    for reply in replies:
        if isinstance(reply, ResponseError):  # NOGROUP, no such key: nothing there yet
            out.append(None)
        elif isinstance(reply, Exception):
            raise reply
        else:
            out.append(reply)
    return out


async def waiting(store: Store, queue: str, level: str, after: str | None, count: int) -> Window:
    """The first ``count`` jobs waiting in ``queue`` (and ``level``, streams backend;
    ``*`` on the sorted backend, whose set holds every level) after the cursor ``after``
    (a previous window's ``next``; None: from the head).

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    client, _ = await store.async_connection()
    with translated(store.url):
        if isinstance(store.broker, SortedBroker):
            return await _sorted_waiting(client, store.keys, queue, after, count)
        return await _stream_waiting(client, store.layout.parts, queue, level, after, count)


async def _stream_waiting(
    client: AsyncClient, parts: Sequence[Keys], queue: str, level: str, after: str | None,
    count: int,
) -> Window:  # fmt: skip
    streams = [keys.stream(queue, level) for keys in parts]
    groups = await _replies(client, [("xinfo_groups", (s,), {}) for s in streams])
    calls: list[Command] = []
    for stream, found in zip(streams, groups, strict=True):
        start = "-"
        for group in found or []:
            if text(group["name"]) == GROUP:
                start = text(group["last-delivered-id"])
        if after is not None and (start == "-" or _entry_order(after) > _entry_order(start)):
            start = after
        low = start if start == "-" else f"({start}"
        calls.append(("xrange", (stream,), {"min": low, "max": "+", "count": count}))
    rows = [
        [(text(entry_id), fields) for entry_id, fields in reply or []]
        for reply in await _replies(client, calls)
    ]
    merged = list(heapq.merge(*rows, key=lambda row: _entry_order(row[0])))
    jobs = [ListedJob(*_job_of(fields), place=entry_id) for entry_id, fields in merged[:count]]
    more = len(merged) > count or any(len(r) == count for r in rows)
    return Window(jobs, jobs[-1].place if more and jobs else None)


async def _sorted_waiting(
    client: AsyncClient, keys: Keys, queue: str, after: str | None, count: int
) -> Window:
    q = keys.sorted_keys(queue)
    low, seen = "-inf", ""
    if after is not None:
        rank, _, seen = after.partition(" ")
        low = rank if _number(rank) else "-inf"
    page: list[Any] = await client.zrange(
        q.waiting, low, "+inf", byscore=True, offset=0, num=count + 1 + TIES, withscores=True
    )
    found = [(text(member), float(rank)) for member, rank in page]
    if after is not None:  # members of the cursor's rank up to its own were shown
        found = [(m, r) for m, r in found if not (f"{r:.0f}" == low and m <= seen)]
    ids = [member for member, _ in found[:count]]
    payloads = await _replies(client, [("hget", (q.payloads, job_id), {}) for job_id in ids])
    jobs = [decode_job(data) for data in payloads]
    heads = [(job.level, job.key) for job in jobs if job is not None and job.key]
    lanes = await _replies(
        client, [("zcard", (keys.sorted_lane(queue, lvl, key),), {}) for lvl, key in heads]
    )
    behind = {head: int(n or 0) for head, n in zip(heads, lanes, strict=True)}
    listed = [
        ListedJob(
            job_id, job, f"{rank:.0f}", job.key if job is not None and job.key else None,
            behind.get((job.level, job.key), 0) if job is not None and job.key else 0,
        )
        for (job_id, rank), job in zip(found, jobs, strict=False)
    ]  # fmt: skip
    more = len(found) > count
    last = listed[-1] if listed else None
    return Window(listed, f"{last.place} {last.job_id}" if more and last else None)


def _number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


async def lanes(store: Store, queue: str, level: str, offset: int, count: int) -> Window:
    """Streams backend: the keyed jobs' lanes of ``queue`` and ``level`` in turn order from
    position ``offset`` (at most ``count`` per partition), each as its first job with how
    many wait behind it; the cursor is the next offset. Empty on the sorted backend,
    whose keyed heads wait in the queue's set (:func:`waiting`).

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    if isinstance(store.broker, SortedBroker):
        return Window([], None)
    client, _ = await store.async_connection()
    parts = store.layout.parts
    with translated(store.url):
        rotations = await _replies(client, [
            ("zrange", (keys.fair_rotation(queue, level), offset, offset + count - 1), {})
            for keys in parts
        ])  # fmt: skip
        named = [
            (keys, text(lane))
            for keys, found in zip(parts, rotations, strict=True)
            for lane in found or []
            if text(lane)  # "": the turn of the jobs without a key
        ]
        calls: list[Command] = []
        for keys, lane in named:
            stream = keys.fair_jobs(queue, level, lane)
            calls += [("xrange", (stream,), {"min": "-", "max": "+", "count": 1}),
                      ("xlen", (stream,), {})]  # fmt: skip
        replies = await _replies(client, calls)
    jobs = []
    for i, (_, lane) in enumerate(named):
        first, length = replies[2 * i] or [], int(replies[2 * i + 1] or 0)
        if first:
            entry_id, fields = first[0]
            job_id, job = _job_of(fields)
            jobs.append(ListedJob(job_id, job, text(entry_id), lane, max(0, length - 1)))
    more = any(len(found or []) == count for found in rotations)
    return Window(jobs, str(offset + count) if more else None)


async def running(
    store: Store, queues: Sequence[str], levels: Sequence[str], count: int
) -> list[RunningJob]:
    """Up to ``count`` running jobs of ``queues`` (per queue and level, and in all), the
    longest-held first on the sorted backend, the oldest entries first on streams.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    client, _ = await store.async_connection()
    with translated(store.url):
        if isinstance(store.broker, SortedBroker):
            found = []
            for queue in queues:
                found += await _sorted_running(client, store.keys, queue, count)
            return found[:count]
        streams = [
            stream
            for keys in store.layout.parts
            for queue in queues
            for level in levels
            for stream in (keys.stream(queue, level), keys.fair_stream(queue, level))
        ]
        pending = await _replies(client, [
            ("xpending_range", (stream, GROUP), {"min": "-", "max": "+", "count": count})
            for stream in streams
        ])  # fmt: skip
        rows = [
            (stream, row) for stream, found in zip(streams, pending, strict=True)
            for row in found or []
        ][:count]  # fmt: skip
        entries = await _replies(client, [
            ("xrange", (stream,), {"min": row["message_id"], "max": row["message_id"],
                                   "count": 1})
            for stream, row in rows
        ])  # fmt: skip
    listed = []
    for (_, row), entry in zip(rows, entries, strict=True):
        job_id, job = _job_of(entry[0][1]) if entry else ("?", None)
        listed.append(RunningJob(
            job_id, job, text(row["consumer"]), int(row["times_delivered"]),
            seen_ms=int(row["time_since_delivered"]),
        ))  # fmt: skip
    return listed


async def _sorted_running(
    client: AsyncClient, keys: Keys, queue: str, count: int
) -> list[RunningJob]:
    q = keys.sorted_keys(queue)
    flying: list[Any] = await client.zrange(q.inflight, 0, count - 1)
    ids = [text(member) for member in flying]
    calls: list[Command] = [("hget", (q.payloads, i), {}) for i in ids]
    calls += [("hget", (q.owners, i), {}) for i in ids]
    replies = await _replies(client, calls)
    found = []
    for job_id, data, owner in zip(ids, replies[: len(ids)], replies[len(ids) :], strict=True):
        # '<consumer>:<deliveries>:<server us of the take>' (lua/take_sorted.lua)
        worker, deliveries, stamp = _owner(text(owner or b""))
        found.append(RunningJob(job_id, decode_job(data), worker, deliveries, stamp))
    return found


async def running_job(store: Store, job_id: str) -> RunningJob | None:
    """Job ``job_id``'s run, read from its own place alone (a few commands, however many
    jobs run): the entry its marker names and that entry's row of the group's pending
    entries (streams), or its in-flight score and owner token (sorted backend); None when
    it does not run.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    client, _ = await store.async_connection()
    parts = store.layout.parts
    with translated(store.url):
        markers = await _replies(client, [("get", (keys.job(job_id),), {}) for keys in parts])
        placed = next(((keys, text(m)) for keys, m in zip(parts, markers, strict=True) if m), None)
        if placed is None:
            return None
        keys, marker = placed
        words = marker.split(" ")
        if words[0] == "sorted" and len(words) == 2:
            q = keys.sorted_keys(words[1])
            held, data, owner = await _replies(client, [
                ("zscore", (q.inflight, job_id), {}), ("hget", (q.payloads, job_id), {}),
                ("hget", (q.owners, job_id), {}),
            ])  # fmt: skip
            if held is None:
                return None
            worker, deliveries, stamp = _owner(text(owner or b""))
            return RunningJob(job_id, decode_job(data), worker, deliveries, stamp)
        entry, stream = words[0], (keys.place_keys(marker) or [""])[0]
        if not stream or not STREAM_ENTRY.match(entry):
            return None  # waiting in a lane, delayed, or a marker that names no entry
        rows, found = await _replies(client, [
            ("xpending_range", (stream, GROUP), {"min": entry, "max": entry, "count": 1}),
            ("xrange", (stream,), {"min": entry, "max": entry, "count": 1}),
        ])  # fmt: skip
    if not rows:
        return None
    row = rows[0]
    return RunningJob(
        job_id, _job_of(found[0][1])[1] if found else None, text(row["consumer"]),
        int(row["times_delivered"]), seen_ms=int(row["time_since_delivered"]),
    )  # fmt: skip


def _owner(token: str) -> tuple[str, int, int | None]:
    """The worker, delivery count and take time (ms) of a sorted-backend owner token."""
    parts = token.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return token, 1, None
    return parts[0], int(parts[1]), int(parts[2]) // 1000


async def dead_letter_of(
    store: Store, job_id: str, ended_ms: int
) -> tuple[str, dict[str, str]] | None:
    """Job ``job_id``'s dead letter (its id and fields), looked for outward from
    ``ended_ms`` (when it ended, the worker's clock): forward from it (the letter is
    written as the job settles, just after) and backward from it (a worker's clock ahead
    of the server's), :data:`DEAD_PAGE` letters at a time, within :data:`DEAD_SPAN_MS`
    and :data:`DEAD_PAGES` pages each way per partition; None when none is found there.
    The letters nearest the end come first, however many were written before and after.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    client, _ = await store.async_connection()
    parts = store.layout.parts
    low, high = str(max(0, ended_ms - DEAD_SPAN_MS)), str(ended_ms + DEAD_SPAN_MS)
    # (partition, forward, where the next page starts)
    reads = [(part, forward, str(ended_ms) if forward else f"({ended_ms}")
             for part in range(len(parts)) for forward in (True, False)]  # fmt: skip
    for _ in range(DEAD_PAGES):
        with translated(store.url):
            replies = await _replies(client, [
                ("xrange", (parts[part].dead(),), {"min": at, "max": high, "count": DEAD_PAGE})
                if forward else
                ("xrevrange", (parts[part].dead(),), {"max": at, "min": low, "count": DEAD_PAGE})
                for part, forward, at in reads
            ])  # fmt: skip
        following = []
        for (part, forward, _), found in zip(reads, replies, strict=True):
            for entry_id, fields in found or []:
                if text(fields.get(b"job_id", b"")) == job_id:
                    letter = text(entry_id) if len(parts) == 1 else f"{part}/{text(entry_id)}"
                    return letter, {text(name): text(value) for name, value in fields.items()}
            if found and len(found) == DEAD_PAGE:  # more there: the next page after it
                following.append((part, forward, f"({text(found[-1][0])}"))
        if not following:
            return None
        reads = following
    return None
