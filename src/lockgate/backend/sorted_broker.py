"""Sorted-set backend: one ranked set per queue, FIFO within a level, aging across levels.

A job's rank is its server-side enqueue stamp minus its level's head start, lowest first:
FIFO within a level, and a low job that has waited long enough overtakes newer critical
ones (aging). Taking a job moves it atomically to an in-flight set scored by its lease
deadline; a heartbeat extends the lease while it runs; an expired lease (its worker died)
puts it back at its original rank. Idle workers block with XREAD on a short wake stream
XADDed on every enqueue and retry (every idle worker wakes, where a BLPOP list would wake
one per push), and otherwise wake only when the earliest lease is due: no busy polling.
Each take records an owner token; only that take may settle or extend the job.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from redis.typing import KeyT, StreamIdT

from lockgate.backend.broker import (
    NOT_CLAIMED,
    DelayedJob,
    Delivery,
    EnqueuePlan,
    KeyStats,
    LevelStats,
    Liveness,
    Outgoing,
    ReadClaim,
    ReadClaims,
    ReadResult,
    Settlement,
    batches,
    by_source,
    decode_job,
    delay_arg,
    delayed_job,
    purged,
    read_claim_args,
    soonest,
    text,
)
from lockgate.backend.connections import AsyncClient, block_ms
from lockgate.backend.faults import translated
from lockgate.backend.keys import Keys, SortedKeys, status_shard
from lockgate.backend.lua import Arg, AsyncScripts, ScriptCall
from lockgate.backend.settling import settle_async
from lockgate.core import codec
from lockgate.core.config import Levels
from lockgate.core.policy import aging_boost_us
from lockgate.errors import SerializationError

# Seconds of margin on the earliest lease end a take reported: until then no lease can
# expire, so a take need not name the jobs this worker runs (see SortedConsumer.read).
LEASE_MARGIN = 1.0


class SortedBroker:
    """The sorted backend's layout: enqueue and stats calls, and its consumers."""

    ranked = True

    def __init__(self, keys: Keys, levels: Levels, aging_seconds: float) -> None:
        self._keys = keys
        self._levels = levels
        self._aging = aging_seconds

    def consumer(
        self,
        client: AsyncClient,
        *,
        url: str,
        queues: Sequence[str],
        name: str,
        lease_seconds: float,
        claims: ReadClaims | None,
    ) -> SortedConsumer:
        return SortedConsumer(
            client, url=url, keys=self._keys, levels=self._levels, queues=queues,
            lease_seconds=lease_seconds, producer=self, consumer=name, claims=claims,
        )  # fmt: skip

    def stats_calls(self, queues: Sequence[str]) -> list[ScriptCall]:
        calls = []
        for queue in queues:
            q = self._keys.sorted_keys(queue)
            calls.append(
                ScriptCall("stats_sorted", [q.waiting, q.inflight, q.payloads, q.delayed], [])
            )
        return calls

    def parse_stats(self, queues: Sequence[str], replies: Sequence[Any]) -> list[LevelStats]:
        stats = []
        for queue, (now, waiting, inflight, payload, delayed) in zip(queues, replies, strict=True):
            age = None
            if payload:
                try:
                    age = max(0, now - round(codec.decode(payload).enqueued * 1000))
                except SerializationError:
                    age = None
            stats.append(
                LevelStats(queue, "*", waiting + inflight, waiting, inflight, delayed, None, age)
            )
        return stats

    def boost(self, level: str) -> int:
        """A level's head start in microseconds."""
        return aging_boost_us(self._levels.index(level), len(self._levels.names), self._aging)

    def plan_enqueue(self, jobs: Sequence[Outgoing]) -> EnqueuePlan:
        by_queue: dict[str, list[int]] = defaultdict(list)
        for position, outgoing in enumerate(jobs):
            by_queue[outgoing.job.queue].append(position)
        calls, positions = [], []
        for queue, members in by_queue.items():
            q = self._keys.sorted_keys(queue)
            for batch in batches(len(members)):
                script_keys = [q.waiting, q.payloads, q.ranks, q.clock, q.wake, q.delayed]
                args: list[str | bytes | int] = []
                for i in batch:
                    outgoing = jobs[members[i]]
                    job = outgoing.job
                    marker = self._keys.job(job.id)
                    script_keys += [marker, outgoing.once_key or marker]
                    args += [
                        job.id, self.boost(job.level), outgoing.data, delay_arg(outgoing, ""),
                        outgoing.once_ttl_ms,
                    ]  # fmt: skip
                calls.append(ScriptCall("enqueue_sorted", script_keys, args))
                positions.append([members[i] for i in batch])
        return EnqueuePlan(calls, positions)

    def wake_keys(self, queue: str) -> list[str]:
        return [self._keys.sorted_wake(queue)]

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
        q = self._keys.sorted_keys(queue)
        kept_levels = None if set(levels) >= set(self._levels.names) else levels
        deleted = 0
        # Pages in rank order by ZRANGE BYSCORE (ZSCAN and HMGET are not among the commands
        # the documented ACL user has). Each page starts at the last one's highest rank,
        # inclusive, and skips the jobs of that rank it saw: ranks may tie.
        low, seen = float("-inf"), set[str]()
        while True:
            want = chunk + len(seen)
            page: list[Any] = await client.zrange(
                q.waiting, f"{low:.0f}", "+inf", byscore=True, offset=0, num=want,
                withscores=True,
            )  # fmt: skip
            fresh = [(text(member), rank) for member, rank in page if text(member) not in seen]
            if fresh:
                jobs = await self._payloads(client, q, [job_id for job_id, _ in fresh])
                # A key's jobs behind its head first (lua/_fair_sorted.lua): the head's
                # place then goes to a job the purge keeps, or to none.
                for job in jobs:
                    if job is not None and job.key:
                        lane = self._keys.sorted_lane(queue, job.level, job.key)
                        deleted += await self._purge_lane(client, scripts, q, lane, task,
                                                          kept_levels, chunk)  # fmt: skip
                picked = [
                    job_id
                    for (job_id, _), job in zip(fresh, jobs, strict=True)
                    if purged(job, task, kept_levels)
                ]
                deleted += await self._purge(scripts, q, picked, chunk)
                top = fresh[-1][1]
                seen = (seen if top == low else set()) | {i for i, rank in fresh if rank == top}
                low = top
            if len(page) < want:
                break
        # The jobs parked while their key was at their task's limit (lua/_fair_sorted.lua).
        parked: list[Any] = await client.zrange(self._keys.sorted_parked_sets(queue), 0, -1)
        for name in parked:
            deleted += await self._purge_lane(
                client, scripts, q, text(name), task, kept_levels, chunk
            )
        return deleted

    async def _purge_lane(
        self,
        client: AsyncClient,
        scripts: AsyncScripts,
        q: SortedKeys,
        lane: str,
        task: str | None,
        levels: Sequence[str] | None,
        chunk: int,
    ) -> int:
        """Purge the jobs of one key's lane (or parked set) that the purge takes (see
        purge_waiting)."""
        deleted, start = 0, 0
        while True:
            members: list[Any] = await client.zrange(lane, start, start + chunk - 1)
            if not members:
                return deleted
            ids = [text(member) for member in members]
            jobs = await self._payloads(client, q, ids)
            picked = [i for i, job in zip(ids, jobs, strict=True) if purged(job, task, levels)]
            removed = await self._purge(scripts, q, picked, chunk)
            deleted += removed
            start += len(ids) - removed

    async def busiest_keys(
        self, client: AsyncClient, queues: Sequence[str], most: int, limits: Mapping[str, int]
    ) -> list[KeyStats]:
        """Per queue, the fairness keys of its first ``most`` + 1 jobs waiting (each key's
        head, see ``lua/_fair_sorted.lua``: its lane's jobs wait behind it) and of its
        jobs in flight (at most 10,000), with their counts and the ``limits`` of the tasks
        running."""
        rows: list[KeyStats] = []
        for queue in queues:
            q = self._keys.sorted_keys(queue)
            first: list[Any] = await client.zrange(q.waiting, 0, most)
            flying: list[Any] = await client.zrange(q.inflight, 0, 9_999)
            waiting, running = [text(m) for m in first], [text(m) for m in flying]
            jobs = await self._payloads(client, q, waiting + running)
            heads = sorted({(j.level, j.key) for j in jobs[: len(waiting)] if j and j.key})
            tasks: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
            for job in jobs[len(waiting) :]:
                if job is not None and job.key:
                    tasks[job.level, job.key][job.task] += 1
            async with client.pipeline(transaction=False) as pipe:
                for level, key in heads:
                    pipe.zcard(self._keys.sorted_lane(queue, level, key))
                behind: list[Any] = await pipe.execute()
            counts = {head: 1 + int(n) for head, n in zip(heads, behind, strict=True)}
            for level, key in sorted(set(counts) | set(tasks)):
                running_of = dict(tasks.get((level, key), {}))
                rows.append(
                    KeyStats(queue, level, key, counts.get((level, key), 0), running_of, {})
                )
        return rows

    async def _payloads(self, client: AsyncClient, q: SortedKeys, ids: list[str]) -> list[Any]:
        """The decoded jobs of ``ids`` (None: gone or undecodable), by HGETs in one trip."""
        async with client.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hget(q.payloads, job_id)
            payloads: list[Any] = await pipe.execute()
        return [decode_job(data) for data in payloads]

    async def delayed(self, client: AsyncClient, queue: str, limit: int) -> list[DelayedJob]:
        # One delayed set per queue, holding ids whose jobs are in the queue's payloads.
        q = self._keys.sorted_keys(queue)
        due = await soonest(client, q.delayed, limit)
        if not due:
            return []
        # HGETs, not one HMGET: HGET is on the README's ACL list, so the dashboard may
        # run as the workers' user (one key: one node, one trip).
        async with client.pipeline(transaction=False) as pipe:
            for member, _ in due:
                pipe.hget(q.payloads, member)
            payloads: list[Any] = await pipe.execute()
        return [
            delayed_job(data, due_ms, queue, "*", text(member))
            for (member, due_ms), data in zip(due, payloads, strict=True)
            if data is not None
        ]

    async def _purge(
        self, scripts: AsyncScripts, q: SortedKeys, job_ids: list[str], chunk: int
    ) -> int:
        deleted = 0
        for batch in batches(len(job_ids), chunk):
            ids = [job_ids[i] for i in batch]
            script_keys = [
                q.waiting, q.payloads, q.ranks, q.deliveries, q.owners, self._keys.statuses()
            ]  # fmt: skip
            args: list[Arg] = []
            for job_id in ids:
                script_keys += self._keys.job_record_keys(job_id)
                args += [job_id, status_shard(job_id)]
            deleted += int(await scripts.run(ScriptCall("purge_sorted", script_keys, args)))
        return deleted


class SortedConsumer:
    """One worker's takes, waits, heartbeats and acks on sorted-backend queues."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        url: str,
        keys: Keys,
        levels: Levels,
        queues: Sequence[str],
        lease_seconds: float,
        producer: SortedBroker,
        consumer: str,
        claims: ReadClaims | None = None,
    ) -> None:
        self._client = client
        self._claims = claims
        self.woken = 0
        self._scripts = AsyncScripts(client)
        self._url = url
        self._keys = keys
        self._levels = levels
        self._queues = list(queues)
        self._lease_ms = max(1, round(lease_seconds * 1000))
        self._liveness = Liveness.of(lease_seconds)
        self._turn = 0
        self._producer = producer
        self._consumer = consumer
        self._wake_ids: dict[KeyT, StreamIdT] = {}
        self._expiries_from = 0.0  # monotonic time from which a lease may expire

    async def read(
        self, free: int, quotas: Sequence[int], running: Sequence[str] = ()
    ) -> ReadResult:
        shift = self._turn % len(self._queues)
        self._turn += 1
        queues = self._queues[shift:] + self._queues[:shift]
        result = ReadResult(taken=[0] * len(self._levels.names), dry=[])
        # The running jobs are named only when a lease could have expired by now: a take
        # puts expired leases back, except these (a long list, read for every take).
        full = time.monotonic() >= self._expiries_from
        mine = running if full else ()
        earliest: float | None = None
        token, claim_args = read_claim_args(self._claims)
        for queue in queues:
            q = self._keys.sorted_keys(queue)
            call = ScriptCall(
                "take_sorted",
                [q.waiting, q.inflight, q.payloads, q.ranks, q.delayed, q.deliveries,
                 q.owners, q.wake, self._keys.paused(), self._keys.liveness()],
                [free - len(result.deliveries), self._lease_ms, self._consumer,
                 *self._liveness.args, int(full), len(mine), *mine, *claim_args],
            )  # fmt: skip
            with translated(self._url):
                taken, _returned, next_ms, wake_id = await self._scripts.run(call)
            self._wake_ids[q.wake] = text(wake_id)
            if next_ms >= 0:
                due = next_ms / 1000
                result.next_due = due if result.next_due is None else min(result.next_due, due)
                earliest = due if earliest is None else min(earliest, due)
            for i in range(0, len(taken), 6):
                delivery = self._delivery(queue, text(taken[i]), taken[i + 1])
                delivery.deliveries = int(taken[i + 2])
                delivery.owner = text(taken[i + 3])
                if taken[i + 4] != NOT_CLAIMED:
                    claim_token = f"{token}:{delivery.ref}"
                    delivery.claim = ReadClaim(claim_token, taken[i + 4], taken[i + 5] / 1000)
                result.deliveries.append(delivery)
                result.taken[delivery.level] += 1
        # next_ms counts this take's own leases too; none: nothing is in flight or delayed.
        horizon = earliest if earliest is not None else self._lease_ms / 1000
        self._expiries_from = time.monotonic() + horizon - LEASE_MARGIN
        return result

    def _delivery(self, queue: str, job_id: str, data: bytes | None) -> Delivery:
        if not data:
            return Delivery(queue, 0, queue, job_id, None, "payload missing", job_id)
        try:
            job = codec.decode(data)
        except SerializationError as e:
            return Delivery(queue, 0, queue, job_id, None, str(e), job_id, data)
        level = self._levels.names.index(job.level) if job.level in self._levels.weights else 0
        return Delivery(queue, level, queue, job_id, job, None, job_id, data)

    async def wait_for_work(self, timeout: float) -> None:
        if not self._wake_ids:
            return
        with translated(self._url):
            if await self._client.xread(dict(self._wake_ids), count=1, block=block_ms(timeout)):
                self.woken += 1

    def settle_call(self, settlement: Settlement) -> ScriptCall:
        delivery, outcome = settlement.delivery, settlement.outcome
        q = self._keys.sorted_keys(delivery.queue)
        keys = [
            q.inflight, q.payloads, q.ranks, q.deliveries, q.owners, q.delayed,
            self._keys.dead(), q.wake, self._keys.job(delivery.ref),
            self._keys.result(delivery.ref), self._keys.statuses(),
        ]  # fmt: skip
        keys += settlement.claim_keys(self._keys)
        following = outcome.next_job
        args: list[Arg] = [
            delivery.ref, delivery.owner, outcome.kind, *settlement.claim_args(),
            codec.encode(following) if following is not None else b"",
            max(0, round(outcome.delay * 1000)),
            self._producer.boost(following.level) if following is not None else 0,
            *settlement.end_args(),
        ]  # fmt: skip
        return ScriptCall("settle_sorted", keys, args)

    async def settle(self, calls: Sequence[ScriptCall]) -> list[Any]:
        return await settle_async(self._scripts, self._url, calls)

    async def reclaim(self, min_idle: float, running: Sequence[str] = ()) -> Delivery | None:
        return None  # expired leases come back through read()

    async def forget_consumers(self, min_idle: float) -> int:
        return 0  # no consumer registry on this backend

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> None:
        calls = []
        for queue, group in by_source(deliveries).items():
            q = self._keys.sorted_keys(queue)
            args: list[Arg] = [self._lease_ms]
            for delivery in group:
                args += [delivery.ref, delivery.owner]
            calls.append(ScriptCall("extend_sorted", [q.inflight, q.owners], args))
        if calls:
            with translated(self._url):
                await self._scripts.run_all(calls)

    @property
    def liveness_keys(self) -> list[str]:
        """Where this worker's liveness beats go (the namespace's liveness set)."""
        return [self._keys.liveness()]

    @property
    def client(self) -> AsyncClient:
        return self._client

    async def close(self) -> None:
        await self._client.aclose()
