"""Streams backend: one Redis Stream per (queue, level), one consumer group per namespace.

Reads follow a policy's per-level quotas in one script call and never take more messages
than the worker has free slots, so no critical job waits behind a prefetched low one. The
same call first moves due delayed jobs (retries, delayed enqueues) into their streams. An
idle worker blocks in a single XREAD over all its streams, from the ids the last empty
read saw, so a job that arrives while it waits wakes it at once and none is missed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.typing import KeyT, StreamIdT

from lockgate import codec
from lockgate.broker import (
    NOT_CLAIMED,
    Delivery,
    EnqueuePlan,
    LevelStats,
    Outgoing,
    ReadClaim,
    ReadClaims,
    ReadResult,
    Settlement,
    batches,
    by_source,
    decode_job,
    purged,
    read_claim_args,
    text,
    translated_replies,
)
from lockgate.codec import Job
from lockgate.config import Levels
from lockgate.connections import AsyncClient
from lockgate.errors import SerializationError
from lockgate.faults import translated
from lockgate.keys import GROUP, Keys
from lockgate.lua import Arg, AsyncScripts, ScriptCall

JOB_FIELD = b"job"


class StreamBroker:
    """The streams backend's layout: enqueue and stats calls, and its consumers."""

    ranked = False

    def __init__(self, keys: Keys, levels: Levels) -> None:
        self._keys = keys
        self._levels = levels

    def consumer(
        self,
        client: AsyncClient,
        *,
        url: str,
        queues: Sequence[str],
        name: str,
        lease_seconds: float,
        claims: ReadClaims | None,
    ) -> StreamConsumer:
        # Streams have no lease: a dead worker's jobs are reclaimed from the PEL.
        return StreamConsumer(
            client, url=url, keys=self._keys, levels=self._levels, queues=queues,
            consumer=name, claims=claims,
        )  # fmt: skip

    def _stats_layout(self, queues: Sequence[str]) -> list[tuple[str, str]]:
        return [(queue, level) for queue in queues for level in self._levels.names]

    def stats_calls(self, queues: Sequence[str]) -> list[ScriptCall]:
        layout = self._stats_layout(queues)
        streams = [self._keys.stream(queue, level) for queue, level in layout]
        delayed = [self._keys.delayed(queue, level) for queue, level in layout]
        return [ScriptCall("stats_stream", streams + delayed, [GROUP])]

    def parse_stats(self, queues: Sequence[str], replies: Sequence[Any]) -> list[LevelStats]:
        ((now, rows),) = replies
        stats = []
        for i, (queue, level) in enumerate(self._stats_layout(queues)):
            length, pending, consumers, oldest, waiting_later = rows[5 * i : 5 * i + 5]
            oldest_id = text(oldest)
            age = max(0, now - int(oldest_id.split("-", 1)[0])) if oldest_id else None
            stats.append(LevelStats(
                queue, level, length, length - pending, pending, waiting_later, consumers, age
            ))  # fmt: skip
        return stats

    def plan_enqueue(self, jobs: Sequence[Outgoing]) -> EnqueuePlan:
        calls, positions = [], []
        places: dict[tuple[str, str], tuple[str, str]] = {}
        for batch in batches(len(jobs)):
            script_keys: list[str] = []
            args: list[bytes | int] = []
            for i in batch:
                job = jobs[i].job
                place = places.get((job.queue, job.level))
                if place is None:
                    place = places[job.queue, job.level] = (
                        self._keys.stream(job.queue, job.level),
                        self._keys.delayed(job.queue, job.level),
                    )
                marker = self._keys.job(job.id)
                script_keys += [marker, *place, jobs[i].once_key or marker]
                args += [jobs[i].data, jobs[i].delay_ms, jobs[i].once_ttl_ms]
            script_keys.append(self._keys.wake())
            calls.append(ScriptCall("enqueue_stream", script_keys, args))
            positions.append(list(batch))
        return EnqueuePlan(calls, positions)

    def wake_keys(self, queue: str) -> list[str]:
        return [self._keys.wake()]

    async def purge_waiting(
        self,
        client: AsyncClient,
        scripts: AsyncScripts,
        queue: str,
        *,
        levels: Sequence[str],
        task: str | None,
        chunk: int,
    ) -> int:
        deleted = 0
        for level in levels:
            stream = self._keys.stream(queue, level)
            deleted += await self._purge_stream(client, scripts, stream, task, chunk)
        return deleted

    async def _purge_stream(
        self, client: AsyncClient, scripts: AsyncScripts, stream: str, task: str | None, chunk: int
    ) -> int:
        newest: list[Any] = await client.xrevrange(stream, count=1) or []
        if not newest:
            return 0
        # The group handed out every entry up to its last-delivered id (running, or done):
        # the waiting ones follow it, up to the newest when the purge started.
        start = "-"
        groups: list[dict[str, Any]] = await client.xinfo_groups(stream)
        for group in groups:
            if text(group["name"]) == GROUP:
                start = "(" + text(group["last-delivered-id"])
        deleted = 0
        while True:
            entries: list[Any] = (
                await client.xrange(stream, min=start, max=newest[0][0], count=chunk) or []
            )
            picked = [
                (text(entry_id), job.id if job else "")
                for entry_id, fields in entries
                if purged(job := decode_job(fields.get(JOB_FIELD)), task)
            ]
            if picked:
                script_keys = [stream]
                for _, job_id in picked:
                    script_keys += self._keys.job_record_keys(job_id)
                args: list[Arg] = [GROUP, *(entry_id for entry_id, _ in picked)]
                deleted += int(await scripts.run(ScriptCall("purge_stream", script_keys, args)))
            if len(entries) < chunk:
                break
            start = "(" + text(entries[-1][0])
        return deleted


def decode_entry(fields: Sequence[bytes]) -> tuple[Job | None, str | None, str, bytes | None]:
    """Decode a stream entry's flat field list: (job, error, job id for logs, raw job)."""
    values = dict(zip(fields[::2], fields[1::2], strict=False))
    data = values.get(JOB_FIELD)
    if data is None:
        names = ", ".join(text(name) for name in values) or "none"
        return None, f"entry has no 'job' field (fields: {names})", "?", None
    try:
        job = codec.decode(data)
    except SerializationError as e:
        return None, str(e), "?", data
    return job, None, job.id, data


class StreamConsumer:
    """One worker's reads, waits, settles, heartbeats and reclaims on its streams."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        url: str,
        keys: Keys,
        levels: Levels,
        queues: Sequence[str],
        consumer: str,
        claims: ReadClaims | None = None,
    ) -> None:
        self._client = client
        self._claims = claims
        self._scripts = AsyncScripts(client)
        self._url = url
        self._keys = keys
        self._levels = levels
        self._queues = list(queues)
        self._consumer = consumer
        self._turn = 0
        self._last_ids: dict[KeyT, StreamIdT] = {}
        self._reclaim_turn = 0
        self._places = {
            keys.stream(queue, level): (queue, index)
            for index, level in enumerate(levels.names)
            for queue in queues
        }

    def _layout(self) -> list[tuple[str, str, int]]:
        """(stream, queue, level index), highest level first; queues rotate per read."""
        shift = self._turn % len(self._queues)
        self._turn += 1
        queues = self._queues[shift:] + self._queues[:shift]
        return [
            (self._keys.stream(queue, level), queue, index)
            for index, level in enumerate(self._levels.names)
            for queue in queues
        ]

    def _delivery(self, stream: str, entry_id: bytes, fields: Sequence[bytes]) -> Delivery:
        queue, level = self._places[stream]
        job, error, job_id, raw = decode_entry(fields)
        return Delivery(queue, level, stream, text(entry_id), job, error, job_id, raw)

    async def read(
        self, free: int, quotas: Sequence[int], running: Sequence[str] = ()
    ) -> ReadResult:
        layout = self._layout()
        streams = [stream for stream, _, _ in layout]
        delayed = [self._keys.delayed(queue, self._levels.names[i]) for _, queue, i in layout]
        token, claim_args = read_claim_args(self._claims)
        args: list[Arg] = [GROUP, self._consumer, free, len(quotas), *quotas]
        args += [index + 1 for _, _, index in layout]
        args += [queue for _, queue, _ in layout]
        args += claim_args
        script_keys = [*streams, *delayed, self._keys.wake(), self._keys.paused()]
        call = ScriptCall("read_stream", script_keys, args)
        with translated(self._url):
            dry_flags, entries, last_ids, next_due = await self._scripts.run(call)
        levels = len(self._levels.names)
        result = ReadResult(taken=[0] * levels, dry=[True] * levels)
        result.next_due = next_due / 1000 if next_due >= 0 else None
        for k, (_, _, level) in enumerate(layout):
            result.dry[level] = result.dry[level] and dry_flags[k] == 1
        for i in range(0, len(entries), 5):
            delivery = self._delivery(streams[entries[i] - 1], entries[i + 1], entries[i + 2])
            state = entries[i + 3]
            if state != NOT_CLAIMED:
                claim_token = f"{token}:{delivery.ref}"
                delivery.claim = ReadClaim(claim_token, state, entries[i + 4] / 1000)
            result.deliveries.append(delivery)
            result.taken[delivery.level] += 1
        # A paused queue's streams come back without a last id (''): their new jobs must
        # not wake this worker; a resume XADDs the wake stream instead.
        self._last_ids = {
            stream: text(last)
            for stream, last in zip([*streams, self._keys.wake()], last_ids, strict=False)
            if last
        }
        return result

    async def wait_for_work(self, timeout: float) -> None:
        if not self._last_ids:
            return
        with translated(self._url):
            await self._client.xread(
                dict(self._last_ids), count=1, block=max(1, int(timeout * 1000))
            )

    def _marker(self, delivery: Delivery) -> str:
        return self._keys.job(delivery.job.id if delivery.job else delivery.job_id)

    def settle_call(self, settlement: Settlement) -> ScriptCall:
        delivery, outcome = settlement.delivery, settlement.outcome
        queue, level = self._places[delivery.source]
        keys = [
            delivery.source, self._marker(delivery),
            self._keys.delayed(queue, self._levels.names[level]), self._keys.dead(),
            self._keys.wake(), self._keys.result(delivery.job_id),
            self._keys.status(delivery.job_id),
        ]  # fmt: skip
        keys += settlement.claim_keys()
        following = outcome.next_job
        args: list[Arg] = [
            GROUP, self._consumer, delivery.ref, outcome.kind, *settlement.claim_args(),
            codec.encode(following) if following is not None else b"",
            max(0, round(outcome.delay * 1000)), *settlement.end_args(),
        ]  # fmt: skip
        return ScriptCall("settle_stream", keys, args)

    async def settle(self, calls: Sequence[ScriptCall]) -> list[Any]:
        with translated(self._url):
            replies = await self._scripts.run_each(calls)
        return translated_replies(replies, self._url)

    async def reclaim(self, min_idle: float, running: Sequence[str] = ()) -> Delivery | None:
        # Rotate the order so a stream with a steady trickle cannot hide another's.
        streams = list(self._places)
        shift = self._reclaim_turn % len(streams)
        self._reclaim_turn += 1
        streams = streams[shift:] + streams[:shift]
        args: list[Arg] = [GROUP, self._consumer, max(1, round(min_idle * 1000)), *running]
        with translated(self._url):
            index, entry_id, fields, count, _ = await self._scripts.run(
                ScriptCall("reclaim_stream", streams, args)
            )
        if not index:
            return None
        delivery = self._delivery(streams[index - 1], entry_id, fields)
        delivery.deliveries = int(count)
        return delivery

    async def forget_consumers(self, min_idle: float) -> int:
        args: list[Arg] = [GROUP, max(1, round(min_idle * 1000)), self._consumer]
        with translated(self._url):
            removed = await self._scripts.run(
                ScriptCall("forget_consumers", list(self._places), args)
            )
        return int(removed)

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> None:
        calls = [
            ScriptCall(
                "heartbeat_stream", [stream], [GROUP, self._consumer, *[d.ref for d in group]]
            )
            for stream, group in by_source(deliveries).items()
        ]
        if calls:
            with translated(self._url):
                await self._scripts.run_all(calls)

    @property
    def client(self) -> AsyncClient:
        return self._client

    async def close(self) -> None:
        await self._client.aclose()
