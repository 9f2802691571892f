"""A worker's consumer of a partitioned namespace: one stream consumer per partition, read
as one.

A read first needs to know where jobs wait: a count (``lua/peek_stream.lua``, one
pipelined call per partition, sent to every node at once on a cluster) moves due delayed
jobs and counts the jobs waiting in each stream. The read then takes exactly the jobs
its plan picked (:func:`lockgate.core.policy.spread_read`), so a worker never takes more jobs
than its free slots, nor a lower job while a higher one waits in any partition (as of
the count). A busy worker plans its next reads from the same count, less what it took,
for up to :data:`COUNT_EVERY`, or until the count proves short or wrong: one round trip
per read, as with one partition, and a count every few reads. FIFO holds within a level
of one partition.

An idle worker blocks on its queues' wake-up lists (``BLPOP``, all of them under the
namespace's own tag): a producer pushes one item per job it added, once the jobs landed,
so an enqueue wakes about as many idle workers as it brings jobs, where a blocking XREAD
would wake every one of them. A retry or delayed job scheduled by a settle pushes one
item too, so an idle worker learns the new due time. Each wait is bounded by
``idle_wait`` and the next due time, the safety net for an item lost with a failed-over
node.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from lockgate.backend.broker import Delivery, ReadResult, Settlement, translated_replies
from lockgate.backend.connections import AsyncClient, block_ms
from lockgate.backend.faults import translated
from lockgate.backend.keys import Keys
from lockgate.backend.lua import AsyncScripts, ScriptCall
from lockgate.backend.stream_consumer import Read, StreamConsumer
from lockgate.core.config import Levels
from lockgate.core.logs import get_logger
from lockgate.core.policy import spread_read
from lockgate.errors import LockgateError

# Items a wake-up list keeps, and the most one enqueue pushes (see lua/wake_workers.lua).
WAKEUPS_MAX = 64
# Seconds one count of the partitions' waiting jobs serves a busy worker's reads: a job
# that arrives in a partition meanwhile is seen at the next count (or when the counted
# jobs run out); a strict policy's precedence holds as of the last count.
COUNT_EVERY = 0.01
LOG_EVERY = 10.0  # seconds between two warnings of partition calls that failed
log = get_logger(__name__)


def wakeup_call(keys: Keys, counts: Mapping[str, int]) -> ScriptCall:
    """The call that pushes ``counts`` (queue -> items) to the namespace's wake-up lists."""
    queues = sorted(counts)
    return ScriptCall(
        "wake_workers", [keys.wakeup(queue) for queue in queues],
        [WAKEUPS_MAX, *(counts[queue] for queue in queues)],
    )  # fmt: skip


class PartitionedConsumer:
    """The :class:`~lockgate.backend.broker.Consumer` of a partitioned namespace.

    Args:
        parts: one stream consumer per partition, on one client, in partition order.
        base: the namespace's own keys (the wake-up lists).
        levels: the App's levels.
        queues: the queues read.
    """

    def __init__(
        self, parts: Sequence[StreamConsumer], base: Keys, levels: Levels, queues: Sequence[str]
    ) -> None:
        self._parts = list(parts)
        self._client = parts[0].client
        self._url = parts[0].url
        self._scripts = AsyncScripts(self._client)
        self._levels = levels
        self._wakeups = [base.wakeup(queue) for queue in queues]
        self._base = base
        self._owner = {stream: part for part in self._parts for stream in part.delivery_streams}
        self._stream_levels = [self._level(stream) for stream in self._parts[0].streams]
        # Workers start their rotations at random, so they do not all plan from the same
        # partition first.
        self._turn = random.randrange(len(self._parts))
        self._reclaim_turn = self._turn
        self._to_wake: Counter[str] = Counter()  # queue -> jobs put back, to wake for
        self._fresh = False  # whether the current read counted
        self._logged_at = -LOG_EVERY
        self.woken = 0
        self._counts: list[list[int]] | None = None  # jobs waiting, per partition and stream
        self._counted_at = 0.0
        self._due_at: float | None = None  # when the next delayed job is due (monotonic)

    def _level(self, stream: str) -> int:
        return self._parts[0].place(stream)[1]

    async def _count(self) -> None:
        """Count the jobs waiting in every partition (due delayed jobs move first); a
        partition whose call failed counts as empty (and is logged), so the others are
        still served while one primary is down.

        Raises:
            BrokerError: every partition failed (or the round trip did).
        """
        peeks = await self._each([part.peek_call() for part in self._parts], "count")
        self._counts = [
            [0] * len(self._stream_levels) if peek is None else list(map(int, peek[0]))
            for peek in peeks
        ]
        self._counted_at = now = time.monotonic()
        dues = [int(peek[1]) for peek in peeks if peek is not None and int(peek[1]) >= 0]
        self._due_at = now + min(dues) / 1000 if dues else None
        self._fresh = True

    async def _each(self, calls: Sequence[ScriptCall], what: str) -> list[Any]:
        """Run calls (one per partition, or per partition read) in one round trip; a
        failed call's reply is None, logged at most every :data:`LOG_EVERY` seconds.

        Raises:
            LockgateError: every call failed (the first call's error), or the round trip.
        """
        if not calls:
            return []
        with translated(self._url):
            replies = translated_replies(await self._scripts.run_each(calls), self._url)
        failed = [reply for reply in replies if isinstance(reply, LockgateError)]
        if failed and len(failed) == len(replies):
            raise failed[0]
        if failed and time.monotonic() - self._logged_at > LOG_EVERY:
            self._logged_at = time.monotonic()
            log.warning("%s: %d of %d partition calls failed (%s); the others are served",
                        what, len(failed), len(replies), failed[0])  # fmt: skip
        return [None if isinstance(reply, LockgateError) else reply for reply in replies]

    async def _plan(self, free: int, quotas: Sequence[int]) -> list[list[int]]:
        """Per partition, the jobs to read from each stream, from a count not older than
        :data:`COUNT_EVERY` (see :func:`lockgate.core.policy.spread_read`)."""
        counted = self._counts is None or time.monotonic() - self._counted_at > COUNT_EVERY
        if counted:
            await self._count()
        start, self._turn = self._turn % len(self._parts), self._turn + 1
        assert self._counts is not None
        plan = spread_read(self._counts, self._stream_levels, quotas, free, start)
        if not counted and sum(map(sum, plan)) < free:
            # The count ran short of the free slots: new jobs may have come meanwhile (or
            # been put back), and an empty read must never rest on an old count.
            await self._count()
            assert self._counts is not None
            plan = spread_read(self._counts, self._stream_levels, quotas, free, start)
        return plan

    async def read(
        self, free: int, quotas: Sequence[int], running: Sequence[str] = ()
    ) -> ReadResult:
        self._fresh = False
        result = await self._read(free, quotas)
        if not result.deliveries and not self._fresh:
            # Planned from an older count that proved wrong (another worker took those
            # jobs): an empty read must rest on a fresh count, or the worker would idle
            # while jobs wait in other partitions.
            result = await self._read(free, quotas)
        return result

    async def _read(self, free: int, quotas: Sequence[int]) -> ReadResult:
        """One planned read (see :meth:`read`)."""
        plan = await self._plan(free, quotas)
        waiting = self._counts
        assert waiting is not None
        calls: list[ScriptCall] = []
        reads: list[tuple[int, Read]] = []
        for index, (part, counts) in enumerate(zip(self._parts, plan, strict=True)):
            picked = [(stream, n) for stream, n in zip(part.streams, counts, strict=True) if n]
            if picked:
                call, read = part.counted_read_call(picked)
                calls.append(call)
                reads.append((index, read))
        # A partition whose read failed gives nothing; the others' jobs are delivered
        # (they are this worker's now: left unstarted, they would wait for reclaim).
        replies = await self._each(calls, "read")
        levels = len(self._levels.names)
        result = ReadResult(taken=[0] * levels, dry=[True] * levels)
        # The next reads plan from these counts, less what this one took, until they are
        # COUNT_EVERY old, or found wrong (a stream gave fewer jobs than planned: another
        # worker took them).
        stale = None in replies
        for (index, read), reply in zip(reads, replies, strict=True):
            if reply is None:
                continue
            part = self._parts[index]
            taken = part.parse_read(reply, read.layout, read.token)
            result.deliveries += taken.deliveries
            for level, count in enumerate(taken.taken):
                result.taken[level] += count
            got = Counter(part.home(delivery.source) for delivery in taken.deliveries)
            for k, stream in enumerate(part.streams):
                waiting[index][k] = max(0, waiting[index][k] - got[stream])
                stale = stale or got[stream] < plan[index][k]
        # A level is dry when the plan took every job counted waiting on it.
        for counts, planned in zip(self._counts_before(waiting, plan), plan, strict=True):
            for k, level in enumerate(self._stream_levels):
                if counts[k] > planned[k]:
                    result.dry[level] = False
        if self._due_at is not None:
            result.next_due = max(0.0, self._due_at - time.monotonic())
        if stale:
            self._counts = None
        return result

    @staticmethod
    def _counts_before(after: list[list[int]], plan: list[list[int]]) -> list[list[int]]:
        return [[a + p for a, p in zip(left, taken, strict=True)]
                for left, taken in zip(after, plan, strict=True)]  # fmt: skip

    async def wait_for_work(self, timeout: float) -> None:
        # BLPOP's timeout is in seconds, decimals allowed (Redis 6+); 0 would block for ever.
        with translated(self._url):
            if await self._client.blpop(self._wakeups, timeout=block_ms(timeout) / 1000):
                self.woken += 1
        self._counts = None  # woken or timed out: count again

    def settle_call(self, settlement: Settlement) -> ScriptCall:
        if settlement.outcome.next_job is not None:  # a retry or put-back: a job comes back
            self._to_wake[settlement.delivery.queue] += 1
        return self._owner[settlement.delivery.source].settle_call(settlement)

    async def settle(self, calls: Sequence[ScriptCall]) -> list[Any]:
        # A settle call names its own stream's keys: any part's pipeline sends it right.
        replies = await self._parts[0].settle(calls)
        if self._to_wake:
            # The count knows nothing of the jobs put back (nor of their due times), and
            # idle workers are told.
            self._counts = None
            counts, self._to_wake = self._to_wake, Counter()
            try:
                with translated(self._url):
                    await self._scripts.run(wakeup_call(self._base, counts))
            except LockgateError as e:  # the settles landed; idle workers wake by timeout
                log.warning("could not wake idle workers for a retry (%s)", e)
        return replies

    async def reclaim(self, min_idle: float, running: Sequence[str] = ()) -> Delivery | None:
        # Partitions in turn from a rotating start: one job at a time, as with one
        # partition; one that fails is passed over (see _each).
        start, self._reclaim_turn = self._reclaim_turn, self._reclaim_turn + 1
        errors: list[LockgateError] = []
        for i in range(len(self._parts)):
            part = self._parts[(start + i) % len(self._parts)]
            try:
                delivery = await part.reclaim(min_idle, running)
            except LockgateError as e:
                errors.append(e)
                continue
            if delivery is not None:
                return delivery
        self._failed("reclaim", errors)
        return None

    async def forget_consumers(self, min_idle: float) -> int:
        removed: list[int] = []
        errors: list[LockgateError] = []
        for part in self._parts:
            try:
                removed.append(await part.forget_consumers(min_idle))
            except LockgateError as e:
                errors.append(e)
        self._failed("forget consumers", errors)
        return sum(removed)

    def _failed(self, what: str, errors: Sequence[LockgateError]) -> None:
        """Raise the first error when every partition failed, else log (rarely)."""
        if len(errors) == len(self._parts):
            raise errors[0]
        if errors and time.monotonic() - self._logged_at > LOG_EVERY:
            self._logged_at = time.monotonic()
            log.warning("%s: %d of %d partition calls failed (%s); the others are served",
                        what, len(errors), len(self._parts), errors[0])  # fmt: skip

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> None:
        # Calls per stream, each naming its own keys: one pipeline reaches every node.
        await self._parts[0].heartbeat(deliveries)

    @property
    def liveness_keys(self) -> list[str]:
        """Every partition's liveness set: a worker beats to each."""
        return [key for part in self._parts for key in part.liveness_keys]

    @property
    def client(self) -> AsyncClient:
        return self._client

    async def close(self) -> None:
        await self._client.aclose()
