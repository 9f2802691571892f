"""Sorted-set backend: one ranked set per queue, FIFO within a level, aging across levels.

A job's rank is its server-side enqueue stamp minus its level's head start, lowest first:
FIFO within a level, and a low job that has waited long enough overtakes newer critical
ones (aging). Taking a job moves it atomically to an in-flight set scored by its lease
deadline; a heartbeat extends the lease while it runs; an expired lease (its worker died)
puts it back at its original rank. Idle workers block on a short wake-up list pushed on
every enqueue, and otherwise wake only when the earliest lease is due: no busy polling.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import redis.asyncio as aioredis

from lockgate import codec
from lockgate.broker import Delivery, EnqueuePlan, ReadResult, batches, text, translated
from lockgate.codec import Job
from lockgate.config import Levels
from lockgate.errors import SerializationError
from lockgate.keys import Keys
from lockgate.lua import AsyncScripts, ScriptCall
from lockgate.policy import aging_boost_us


class SortedProducer:
    """Builds enqueue calls for the sorted backend."""

    def __init__(self, keys: Keys, levels: Levels, aging_seconds: float) -> None:
        self._keys = keys
        self._levels = levels
        self._aging = aging_seconds

    def plan_enqueue(self, jobs: Sequence[tuple[Job, bytes]]) -> EnqueuePlan:
        by_queue: dict[str, list[int]] = defaultdict(list)
        for position, (job, _) in enumerate(jobs):
            by_queue[job.queue].append(position)
        calls, positions = [], []
        count = len(self._levels.names)
        for queue, members in by_queue.items():
            q = self._keys.sorted_keys(queue)
            for batch in batches(len(members)):
                script_keys = [q.waiting, q.payloads, q.ranks, q.clock, q.wakeup]
                args: list[str | bytes | int] = []
                for i in batch:
                    job, data = jobs[members[i]]
                    script_keys.append(self._keys.job(job.id))
                    boost = aging_boost_us(self._levels.index(job.level), count, self._aging)
                    args += [job.id, boost, data]
                calls.append(ScriptCall("enqueue_sorted", script_keys, args))
                positions.append([members[i] for i in batch])
        return EnqueuePlan(calls, positions)


class SortedConsumer:
    """One worker's takes, waits, heartbeats and acks on sorted-backend queues."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        url: str,
        keys: Keys,
        levels: Levels,
        queues: Sequence[str],
        lease_seconds: float,
    ) -> None:
        self._client = client
        self._scripts = AsyncScripts(client)
        self._url = url
        self._keys = keys
        self._levels = levels
        self._queues = list(queues)
        self._lease_ms = max(1, round(lease_seconds * 1000))
        self._turn = 0
        self._next_deadline: float | None = None

    async def read(self, free: int, quotas: Sequence[int]) -> ReadResult:
        shift = self._turn % len(self._queues)
        self._turn += 1
        queues = self._queues[shift:] + self._queues[:shift]
        result = ReadResult(taken=[0] * len(self._levels.names), dry=[])
        self._next_deadline = None
        for queue in queues:
            q = self._keys.sorted_keys(queue)
            call = ScriptCall(
                "take_sorted",
                [q.waiting, q.inflight, q.payloads, q.ranks],
                [free - len(result.deliveries), self._lease_ms],
            )
            with translated(self._url):
                taken, _returned, next_deadline = await self._scripts.run(call)
            if next_deadline >= 0:
                due = next_deadline / 1000
                self._next_deadline = min(self._next_deadline or due, due)
            for i in range(0, len(taken), 2):
                delivery = self._delivery(queue, text(taken[i]), taken[i + 1])
                result.deliveries.append(delivery)
                result.taken[delivery.level] += 1
        return result

    def _delivery(self, queue: str, job_id: str, data: bytes | None) -> Delivery:
        if not data:
            return Delivery(queue, 0, queue, job_id, None, "payload missing", job_id)
        try:
            job = codec.decode(data)
        except SerializationError as e:
            return Delivery(queue, 0, queue, job_id, None, str(e), job_id)
        level = self._levels.names.index(job.level) if job.level in self._levels.weights else 0
        return Delivery(queue, level, queue, job_id, job, None, job_id)

    async def wait_for_work(self, timeout: float) -> None:
        if self._next_deadline is not None:
            timeout = min(timeout, self._next_deadline + 0.01)
        wakeups = [self._keys.sorted_wakeup(queue) for queue in self._queues]
        with translated(self._url):
            # BLPOP's timeout is in seconds and accepts fractions since Redis 6.0.
            await self._client.blpop(wakeups, timeout=max(0.01, timeout))

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        by_queue: dict[str, list[str]] = defaultdict(list)
        for delivery in deliveries:
            by_queue[delivery.queue].append(delivery.ref)
        calls = []
        for queue, job_ids in by_queue.items():
            q = self._keys.sorted_keys(queue)
            markers = [self._keys.job(job_id) for job_id in job_ids]
            calls.append(
                ScriptCall("ack_sorted", [q.inflight, q.payloads, q.ranks, *markers], job_ids)
            )
        with translated(self._url):
            await self._scripts.run_all(calls)

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> None:
        by_queue: dict[str, list[str]] = defaultdict(list)
        for delivery in deliveries:
            by_queue[delivery.queue].append(delivery.ref)
        calls = [
            ScriptCall(
                "extend_sorted", [self._keys.sorted_inflight(queue)], [self._lease_ms, *job_ids]
            )
            for queue, job_ids in by_queue.items()
        ]
        if calls:
            with translated(self._url):
                await self._scripts.run_all(calls)

    async def close(self) -> None:
        await self._client.aclose()
