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

from lockgate.backend.broker import (
    Consumer,
    DelayedJob,
    EnqueuePlan,
    LevelStats,
    Liveness,
    Outgoing,
    ReadClaims,
    batches,
    decode_job,
    delay_arg,
    delayed_job,
    purged,
    soonest,
    soonest_first,
    text,
)
from lockgate.backend.connections import AsyncClient
from lockgate.backend.keys import GROUP, Keys, fair_lane, status_shard
from lockgate.backend.lua import Arg, AsyncScripts, ScriptCall
from lockgate.backend.partitioned import PartitionedConsumer
from lockgate.backend.partitions import Layout, home_of
from lockgate.backend.stream_consumer import JOB_FIELD, StreamConsumer
from lockgate.core.config import Levels


class StreamBroker:
    """The streams backend's layout: enqueue and stats calls, and its consumers."""

    ranked = False

    def __init__(self, layout: Layout, levels: Levels) -> None:
        self._layout = layout
        self._keys = layout.base
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
    ) -> Consumer:
        # Streams have no lease: a dead worker's jobs are reclaimed from the PEL.
        parts = [
            StreamConsumer(
                client, url=url, keys=keys, levels=self._levels, queues=queues,
                consumer=name, claims=claims.on(keys) if claims is not None else None,
                liveness=Liveness.of(lease_seconds),
            )
            for keys in self._layout.parts
        ]  # fmt: skip
        if len(parts) == 1:
            return parts[0]
        return PartitionedConsumer(parts, self._layout.base, self._levels, queues)

    def _stats_layout(self, queues: Sequence[str]) -> list[tuple[str, str]]:
        return [(queue, level) for queue in queues for level in self._levels.names]

    def stats_calls(self, queues: Sequence[str]) -> list[ScriptCall]:
        layout = self._stats_layout(queues)
        calls = []
        for keys in self._layout.parts:  # one call per partition, summed by parse_stats
            streams = [keys.stream(queue, level) for queue, level in layout]
            delayed = [keys.delayed(queue, level) for queue, level in layout]
            calls.append(ScriptCall("stats_stream", streams + delayed, [GROUP]))
        return calls

    def parse_stats(self, queues: Sequence[str], replies: Sequence[Any]) -> list[LevelStats]:
        per_partition = [self._parse_partition(queues, now, rows) for now, rows in replies]
        return [merge_stats(rows) for rows in zip(*per_partition, strict=True)]

    def _parse_partition(self, queues: Sequence[str], now: int, rows: Any) -> list[LevelStats]:
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
        # A script's keys share one slot: the jobs of each partition go in calls of their own.
        by_partition: dict[int, list[int]] = {}
        for i, outgoing in enumerate(jobs):
            part = home_of(outgoing.job.id, outgoing.job.home, self._layout.partitions)
            by_partition.setdefault(part, []).append(i)
        for part, members in by_partition.items():
            keys = self._layout.parts[part]
            for batch in batches(len(members)):
                chosen = [members[i] for i in batch]
                calls.append(_enqueue_call(keys, [jobs[i] for i in chosen]))
                positions.append(chosen)
        queues = [outgoing.job.queue for outgoing in jobs] if self._layout.partitioned else []
        return EnqueuePlan(calls, positions, queues)

    def wake_keys(self, queue: str) -> list[str]:
        # A partitioned namespace's idle workers wait on wake-up lists instead (see Store).
        return [] if self._layout.partitioned else [self._keys.wake()]

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
        for keys in self._layout.parts:
            for level in levels:
                # The level's stream, then each fairness key's waiting jobs (lua/_fair.lua).
                fair: list[Any] = await client.zrange(keys.fair_rotation(queue, level), 0, -1)
                streams = [keys.stream(queue, level)]
                streams += [keys.fair_jobs(queue, level, text(lane)) for lane in fair if lane]
                for stream in streams:
                    deleted += await _purge_stream(client, scripts, keys, stream, task, chunk)
        return deleted

    async def delayed(self, client: AsyncClient, queue: str, limit: int) -> list[DelayedJob]:
        # A delayed set per partition and level, holding the encoded jobs.
        found: list[DelayedJob] = []
        for keys in self._layout.parts:
            for level in self._levels.names:
                entries = await soonest(client, keys.delayed(queue, level), limit)
                found += [delayed_job(data, due_ms, queue, level) for data, due_ms in entries]
        return soonest_first(found, limit)


def _enqueue_call(keys: Keys, jobs: Sequence[Outgoing]) -> ScriptCall:
    """One enqueue script call for jobs of one partition (``keys``)."""
    script_keys: list[str] = []
    args: list[bytes | int] = []
    places: dict[tuple[str, str], tuple[str, str]] = {}
    for outgoing in jobs:
        job = outgoing.job
        place = places.get((job.queue, job.level))
        if place is None:
            place = places[job.queue, job.level] = (
                keys.stream(job.queue, job.level),
                keys.delayed(job.queue, job.level),
            )
        marker = keys.job(job.id)
        if job.key is not None:  # it waits in its lane's stream (see lua/_fair.lua)
            lane = fair_lane(job.key, outgoing.limited)
            place = (keys.fair_jobs(job.queue, job.level, lane), place[1])
        script_keys += [marker, *place, outgoing.once_key or marker]
        args += [outgoing.data, delay_arg(outgoing, GROUP), outgoing.once_ttl_ms]
    script_keys.append(keys.wake())
    return ScriptCall("enqueue_stream", script_keys, args)


def merge_stats(rows: Sequence[LevelStats]) -> LevelStats:
    """One queue and level's counts over its partitions (pure): sums, the most consumers,
    the oldest wait."""
    first = rows[0]
    if len(rows) == 1:
        return first
    ages = [row.oldest_wait_ms for row in rows if row.oldest_wait_ms is not None]
    return LevelStats(
        first.queue, first.level, sum(r.length for r in rows), sum(r.waiting for r in rows),
        sum(r.pending for r in rows), sum(r.delayed for r in rows),
        max(r.consumers or 0 for r in rows), max(ages) if ages else None,
    )  # fmt: skip


async def _purge_stream(
    client: AsyncClient, scripts: AsyncScripts, keys: Keys, stream: str, task: str | None,
    chunk: int,
) -> int:  # fmt: skip
    """Purge one stream's waiting jobs (``task``'s, unless None), ``chunk`` per call."""
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
            script_keys = [stream, keys.statuses()]
            args: list[Arg] = [GROUP]
            for entry_id, job_id in picked:
                script_keys += keys.job_record_keys(job_id)
                args += [entry_id, job_id, status_shard(job_id)]
            deleted += int(await scripts.run(ScriptCall("purge_stream", script_keys, args)))
        if len(entries) < chunk:
            break
        start = "(" + text(entries[-1][0])
    return deleted
