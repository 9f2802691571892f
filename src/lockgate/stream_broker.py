"""Streams backend: one Redis Stream per (queue, level), one consumer group per namespace.

Reads follow a policy's per-level quotas in one script call and never take more messages
than the worker has free slots, so no critical job waits behind a prefetched low one. An
idle worker blocks in a single XREAD over all its streams, from the ids the last empty
read saw, so a job that arrives while it waits wakes it at once and none is missed.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence

import redis.asyncio as aioredis
from redis.typing import KeyT, StreamIdT

from lockgate import codec
from lockgate.broker import Delivery, EnqueuePlan, ReadResult, batches, text, translated
from lockgate.codec import Job
from lockgate.config import Levels
from lockgate.errors import SerializationError
from lockgate.keys import GROUP, Keys
from lockgate.lua import AsyncScripts, ScriptCall

log = logging.getLogger(__name__)
JOB_FIELD = b"job"


class StreamProducer:
    """Builds enqueue calls for the streams backend."""

    def __init__(self, keys: Keys) -> None:
        self._keys = keys

    def plan_enqueue(self, jobs: Sequence[tuple[Job, bytes]]) -> EnqueuePlan:
        calls, positions = [], []
        for batch in batches(len(jobs)):
            script_keys: list[str] = []
            for i in batch:
                job = jobs[i][0]
                script_keys += [self._keys.job(job.id), self._keys.stream(job.queue, job.level)]
            calls.append(ScriptCall("enqueue_stream", script_keys, [jobs[i][1] for i in batch]))
            positions.append(list(batch))
        return EnqueuePlan(calls, positions)


def decode_entry(fields: Sequence[bytes]) -> tuple[Job | None, str | None, str]:
    """Decode a stream entry's flat field list into (job, error, job id for logs)."""
    values = dict(zip(fields[::2], fields[1::2], strict=False))
    data = values.get(JOB_FIELD)
    if data is None:
        names = ", ".join(text(name) for name in values) or "none"
        return None, f"entry has no 'job' field (fields: {names})", "?"
    try:
        job = codec.decode(data)
    except SerializationError as e:
        return None, str(e), "?"
    return job, None, job.id


class StreamConsumer:
    """One worker's reads, waits and acks on the streams of its queues."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        url: str,
        keys: Keys,
        levels: Levels,
        queues: Sequence[str],
        consumer: str,
    ) -> None:
        self._client = client
        self._scripts = AsyncScripts(client)
        self._url = url
        self._keys = keys
        self._levels = levels
        self._queues = list(queues)
        self._consumer = consumer
        self._turn = 0
        self._last_ids: dict[KeyT, StreamIdT] = {}

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

    async def read(self, free: int, quotas: Sequence[int]) -> ReadResult:
        layout = self._layout()
        args: list[str | int] = [GROUP, self._consumer, free, len(quotas), *quotas]
        args += [index + 1 for _, _, index in layout]
        call = ScriptCall("read_stream", [stream for stream, _, _ in layout], args)
        with translated(self._url):
            dry_flags, entries, last_ids = await self._scripts.run(call)
        levels = len(self._levels.names)
        result = ReadResult(taken=[0] * levels, dry=[True] * levels)
        for k, (_, _, level) in enumerate(layout):
            result.dry[level] = result.dry[level] and dry_flags[k] == 1
        for i in range(0, len(entries), 3):
            stream, queue, level = layout[entries[i] - 1]
            job, error, job_id = decode_entry(entries[i + 2])
            result.deliveries.append(
                Delivery(queue, level, stream, text(entries[i + 1]), job, error, job_id)
            )
            result.taken[level] += 1
        self._last_ids = {
            stream: text(last) for (stream, _, _), last in zip(layout, last_ids, strict=False)
        }
        return result

    async def wait_for_work(self, timeout: float) -> None:
        if not self._last_ids:
            return
        with translated(self._url):
            await self._client.xread(
                dict(self._last_ids), count=1, block=max(1, int(timeout * 1000))
            )

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        by_stream: dict[str, list[Delivery]] = defaultdict(list)
        for delivery in deliveries:
            by_stream[delivery.source].append(delivery)
        calls = [
            ScriptCall(
                "ack_stream",
                [stream] + [self._keys.job(d.job.id if d.job else d.job_id) for d in group],
                [GROUP] + [d.ref for d in group],
            )
            for stream, group in by_stream.items()
        ]
        with translated(self._url):
            await self._scripts.run_all(calls)

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> None:
        return None

    async def close(self) -> None:
        await self._client.aclose()
