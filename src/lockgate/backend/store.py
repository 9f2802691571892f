"""The seam between lockgate and Redis: one Store per App.

A Store owns the App's connections (a sync client, one async client per event loop, or
the worker's) to whatever the URL names (one server, a Redis Cluster, a Sentinel's
primary) and makes every call lockgate sends about the namespace: enqueue, the worker's
consumer, claims, counters, stats, delayed jobs. Its parts make the calls of one role
each: ``store.dead`` the dead letters' (:mod:`lockgate.backend.dead_store`),
``store.jobs`` one job's status and cancellation (:mod:`lockgate.backend.job_store`),
``store.registry`` the worker registry's and the activity counts'
(:mod:`lockgate.backend.registry_store`). It alone knows the key names
(:mod:`lockgate.backend.keys`) and which backend (:mod:`lockgate.backend.stream_broker`,
:mod:`lockgate.backend.sorted_broker`) lays out the jobs; the modules above it speak in jobs,
letters and counts.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from lockgate.backend import partition_record
from lockgate.backend.broker import (
    Broker,
    Consumer,
    DelayedJob,
    EnqueuePlan,
    KeyStats,
    LevelStats,
    ReadClaims,
    soonest_first,
    text,
)
from lockgate.backend.connections import (
    AsyncClient,
    SyncClient,
    connect_worker_client,
    open_async_client,
    server_warnings,
    sync_client,
)
from lockgate.backend.dead_store import PURGE_CHUNK, DeadLetters
from lockgate.backend.faults import translated
from lockgate.backend.flow_store import Flows
from lockgate.backend.job_store import Jobs
from lockgate.backend.lua import Arg, AsyncScripts, ScriptCall, SyncScripts
from lockgate.backend.partitioned import WAKEUPS_MAX, wakeup_call
from lockgate.backend.partitions import Layout
from lockgate.backend.registry_store import RegistryStore
from lockgate.backend.sorted_broker import SortedBroker
from lockgate.backend.stream_broker import StreamBroker
from lockgate.core.config import Backend, Levels
from lockgate.core.logs import get_logger
from lockgate.core.ratelimit import Rate
from lockgate.errors import ConfigError, LockgateError

log = get_logger(__name__)
# The sorted backend's busiest keys are those of the first jobs waiting in each queue: one
# HGET and decode each, for every overview (1,000 made the page 7 times slower on a long
# queue than on an empty one).
SORTED_HEADS = 200


def _wakeup_failed(error: LockgateError) -> None:
    """The jobs landed but idle workers could not be woken: they find the jobs at their
    next look (``idle_wait``); the enqueue still succeeded, so it must not raise."""
    log.warning("enqueued, but could not wake idle workers (%s): they look within idle_wait",
                error)  # fmt: skip


class Store:
    """Connections to Redis and every call about one namespace's keys.

    Args:
        url: the Redis URL (one server, cluster seeds, or a Sentinel service).
        namespace: the key namespace (one Cluster hash tag per partition).
        levels: the App's priority levels.
        backend: ``streams`` or ``sorted``.
        aging_seconds: the sorted backend's head start per level.
        partitions: how many partitions the namespace has (see
            :mod:`lockgate.backend.partitions`; the sorted backend has one).
        queues: the App's queues, when asked (a partitioned App checks them for jobs
            of the one-partition layout, see :mod:`lockgate.backend.partition_record`).
    """

    def __init__(
        self,
        url: str,
        namespace: str,
        levels: Levels,
        backend: Backend,
        aging_seconds: float,
        partitions: int = 1,
        queues: Callable[[], Sequence[str]] = lambda: ("default",),
    ) -> None:
        self.url = url
        self._queues = queues
        self._levels = levels
        self.layout = Layout(namespace, partitions)
        self.keys = self.layout.base
        self.broker: Broker = (
            StreamBroker(self.layout, levels)
            if backend == "streams"
            else SortedBroker(self.keys, levels, aging_seconds)
        )
        self.dead = DeadLetters(self)
        self.jobs = Jobs(self)
        self.flows = Flows(self)
        self.registry = RegistryStore(self)
        # Whether Redis agreed with this App's partition count (once, before the first
        # script call or a worker's start).
        self._partitions_checked = False
        self._check_locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self._lock = threading.Lock()
        self._sync: tuple[SyncClient, SyncScripts] | None = None
        self._async: dict[asyncio.AbstractEventLoop, tuple[AsyncClient, AsyncScripts]] = {}

    # connections

    def sync_connection(self) -> tuple[SyncClient, SyncScripts]:
        """The shared sync client and its scripts (created on first use)."""
        with self._lock:
            if self._sync is None:
                client = sync_client(self.url)
                self._sync = (client, SyncScripts(client))
            return self._sync

    async def _checked_async(self, client: AsyncClient) -> AsyncClient:
        """``client``, once the namespace's partition count agrees (else it is closed)."""
        try:
            await self.check_partitions_async(client)
        except BaseException:
            await client.aclose()
            raise
        return client

    def _check_partitions(self, client: SyncClient) -> None:
        """Before this Store's first script call: the namespace's partition count agrees
        (see :mod:`lockgate.backend.partition_record`).

        Raises:
            ConfigError: it does not.
        """
        if not self._partitions_checked:
            self._partitions_checked = partition_record.check(
                client, self.url, self.layout, self._queues(), self._levels.names
            )

    async def check_partitions_async(self, client: AsyncClient | None = None) -> None:
        """Async :meth:`_check_partitions` (a worker's heartbeat calls it too, so a check
        that a busy server put off is done)."""
        if self._partitions_checked:
            return
        # Once per loop, not by every first caller at once on a client still connecting.
        for old in [old for old in self._check_locks if old.is_closed()]:
            del self._check_locks[old]
        lock = self._check_locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())
        async with lock:
            if self._partitions_checked:
                return
            if client is None:
                client, _ = await self.async_connection()
            self._partitions_checked = await partition_record.check_async(
                client, self.url, self.layout, self._queues(), self._levels.names
            )

    async def async_connection(self) -> tuple[AsyncClient, AsyncScripts]:
        """The running loop's async client and its scripts (created on first use)."""
        # redis.asyncio clients belong to one event loop; keep one per loop.
        loop = asyncio.get_running_loop()
        pair = self._async.get(loop)
        if pair is not None:
            return pair
        for old in [old for old in self._async if old.is_closed()]:
            del self._async[old]
        client = await open_async_client(self.url)
        pair = self._async.setdefault(loop, (client, AsyncScripts(client)))
        if pair[0] is not client:  # another caller of this loop made one meanwhile
            await client.aclose()
        return pair

    async def connect_worker(self, max_connections: int) -> tuple[AsyncClient, list[str]]:
        """A worker's own async client, checked, and the server's configuration risks.

        Raises:
            ConnectionFailed: nothing (or no Redis) answers at the URL.
            BrokerError: the server refused the client.
        """
        client = await connect_worker_client(self.url, max_connections=max_connections)
        return await self._checked_async(client), await server_warnings(client)

    async def declare_key_limits(self, client: AsyncClient, limits: Mapping[str, int]) -> None:
        """Write the ``key_concurrency`` of a worker's keyed tasks (0: none), where reads
        look them up (``Keys.fair_limits``): the worker started last decides."""
        if not limits:
            return
        fields: dict[Any, Any] = dict(limits)
        with translated(self.url):
            for keys in self.layout.parts:
                await client.hset(keys.fair_limits(), mapping=fields)

    def retarget(self, url: str) -> None:
        """Use another URL from now on (the CLI's ``--url``); the sync client closes.

        Raises:
            ConfigError: an async client is open (it belongs to its loop: close it first).
        """
        for old in [old for old in self._async if old.is_closed()]:
            del self._async[old]  # clients of finished loops (asyncio.run): nothing to reuse
        if self._async:
            raise ConfigError("the Redis URL cannot change while async clients are open")
        with self._lock:
            if self._sync is not None:
                self._sync[0].close()
                self._sync = None
            self.url = url
            self._partitions_checked = False

    def adopt_async_client(self, client: AsyncClient) -> None:
        """Use ``client`` for this loop's async calls, unless the loop already has one."""
        self._async.setdefault(asyncio.get_running_loop(), (client, AsyncScripts(client)))

    def release_async_client(self, client: AsyncClient) -> None:
        """Stop using an adopted ``client`` (its owner is about to close it)."""
        loop = asyncio.get_running_loop()
        if self._async.get(loop, (None,))[0] is client:
            del self._async[loop]

    def close(self) -> None:
        """Close the sync client."""
        with self._lock:
            if self._sync is not None:
                self._sync[0].close()
                self._sync = None

    async def aclose(self) -> None:
        """Close this loop's async client."""
        pair = self._async.pop(asyncio.get_running_loop(), None)
        if pair is not None:
            await pair[0].aclose()

    def after_fork_in_child(self, forked_away: list[object]) -> None:
        """Set the parent's clients aside (into ``forked_away``, never closed here).

        Closing an async client would unregister its socket from the epoll instance both
        processes share; the sync client's pool reset takes a lock another parent thread
        may have held at fork. The child's loops and threads make their own.
        """
        self._lock = threading.Lock()
        forked_away.append(self._async)
        self._async = {}
        forked_away.append(self._sync)
        self._sync = None

    # script calls

    def run(self, calls: Sequence[ScriptCall], job_ids: Sequence[str] | None = None) -> list[Any]:
        """Run script calls in one round trip per node (sync); errors translated.

        Args:
            calls: the script calls.
            job_ids: for calls that write jobs, their ids (see :func:`translated`).

        Raises:
            OutcomeUnknown: ``job_ids`` given, and no reply came after the calls were sent.
            BrokerError: Redis refused, or could not be reached.
        """
        client, scripts = self.sync_connection()
        self._check_partitions(client)
        with translated(self.url, job_ids):
            return scripts.run_all(calls) if calls else []

    async def run_async(
        self, calls: Sequence[ScriptCall], job_ids: Sequence[str] | None = None
    ) -> list[Any]:
        """Async :meth:`run`."""
        client, scripts = await self.async_connection()
        await self.check_partitions_async(client)
        with translated(self.url, job_ids):
            return await scripts.run_all(calls) if calls else []

    async def run_soon(self, call: ScriptCall) -> Any:
        """Run one call in the round trip of every call made in this turn of the event
        loop (see :meth:`lockgate.backend.lua.AsyncScripts.run_soon`); errors translated."""
        _, scripts = await self.async_connection()
        with translated(self.url):
            return await scripts.run_soon(call)

    # jobs

    def enqueue(self, plan: EnqueuePlan, job_ids: Sequence[str]) -> list[bool]:
        """Run an enqueue plan of the jobs ``job_ids``; per job, False when its id was
        already queued or running.

        In a partitioned namespace, then wake as many idle workers as it added jobs (up to
        :data:`WAKEUPS_MAX`): only once the jobs landed, which on a cluster may be
        another node than the wake-up lists'.

        Raises:
            OutcomeUnknown: no reply after the plan was sent (the jobs may be queued).
            BrokerError: Redis refused, or could not be reached.
        """
        created = plan.created(self.run(plan.calls, job_ids))
        if (call := self._wakeup_call(plan.wakeups(created))) is not None:
            try:
                self.run([call])
            except LockgateError as e:
                _wakeup_failed(e)
        return created

    async def enqueue_async(self, plan: EnqueuePlan, job_ids: Sequence[str]) -> list[bool]:
        """Async :meth:`enqueue`."""
        created = plan.created(await self.run_async(plan.calls, job_ids))
        if (call := self._wakeup_call(plan.wakeups(created))) is not None:
            try:
                await self.run_async([call])
            except LockgateError as e:
                _wakeup_failed(e)
        return created

    def wake_idle(self, counts: Mapping[str, int]) -> None:
        """After jobs landed other than by :meth:`enqueue` (a dead-letter replay): wake
        idle workers of a partitioned namespace as :meth:`enqueue` does; a failure is
        logged, never raised (the jobs are there)."""
        if (call := self._wakeup_call(counts)) is not None:
            try:
                self.run([call])
            except LockgateError as e:
                _wakeup_failed(e)

    async def wake_idle_async(self, counts: Mapping[str, int]) -> None:
        """Async :meth:`wake_idle` (after a settle queued jobs of a flow)."""
        if (call := self._wakeup_call(counts)) is not None:
            try:
                await self.run_async([call])
            except LockgateError as e:
                _wakeup_failed(e)

    def _wakeup_call(self, counts: Mapping[str, int]) -> ScriptCall | None:
        """The call that pushes ``counts`` (queue -> items) to the wake-up lists."""
        if not counts or not self.layout.partitioned:
            return None
        return wakeup_call(self.keys, counts)

    def read_claims(
        self, tasks: Sequence[str], lease_seconds: float, legacy_markers: bool
    ) -> ReadClaims:
        """How a worker's reads claim the jobs of the idempotent ``tasks`` (in the first
        partition: a partitioned consumer moves them to each one's, see
        :meth:`ReadClaims.on`)."""
        return ReadClaims(
            self.keys.claim(""), tuple(sorted(tasks)), lease_seconds,
            self.keys.done_bucket_prefix, legacy_markers,
        )  # fmt: skip

    def consumer(
        self,
        client: AsyncClient,
        *,
        queues: Sequence[str],
        name: str,
        lease_seconds: float,
        claims: ReadClaims | None,
    ) -> Consumer:
        """A worker's consumer of ``queues`` on its own ``client``."""
        return self.broker.consumer(
            client, url=self.url, queues=queues, name=name, lease_seconds=lease_seconds,
            claims=claims,
        )  # fmt: skip

    async def stats(self, queues: Sequence[str]) -> tuple[list[LevelStats], int]:
        """Per queue and level the counts, and how many dead letters there are."""
        client, _ = await self.async_connection()
        rows = self.broker.parse_stats(
            queues, await self.run_async(self.broker.stats_calls(queues))
        )
        with translated(self.url):
            dead = sum([int(await client.xlen(keys.dead())) for keys in self.layout.parts])
        return rows, dead

    async def busiest_keys(
        self, queues: Sequence[str], top: int, limits: Mapping[str, int]
    ) -> list[KeyStats]:
        """The ``top`` fairness keys with the most jobs waiting and running, busiest first
        with the ``limits`` (task name -> ``key_concurrency``) of their tasks running.
        Reads at most 1,000 keys and 10,000 running jobs per queue and level (on the
        sorted backend, the keys of the first :data:`SORTED_HEADS` jobs waiting in each
        queue).

        Raises:
            ConnectionFailed: Redis cannot be reached.
        """
        if isinstance(self.broker, SortedBroker):
            client, _ = await self.async_connection()
            with translated(self.url):
                rows = await self.broker.busiest_keys(client, queues, SORTED_HEADS - 1, limits)
            return sorted(rows, key=lambda row: -row.busy)[:top]
        places = [f"{queue}:{level}" for queue in queues for level in self._levels.names]
        calls = [
            ScriptCall(
                "fair_keys", [keys.fair_rotation(queues[0], self._levels.names[0])],
                [keys.prefix, 999, *places],
            )
            for keys in self.layout.parts
        ]  # fmt: skip
        merged: dict[tuple[str, str, str], KeyStats] = {}  # a key's rows of each partition
        for reply in await self.run_async(calls):
            for place, flat in zip(places, reply, strict=True):
                queue, _, level = place.partition(":")
                for row in _key_rows(queue, level, flat, limits):
                    seen = merged.get((queue, level, row.key))
                    if seen is not None:
                        running = dict(Counter(seen.running) + Counter(row.running))
                        limits_seen = {**seen.limits, **row.limits}
                        row = replace(row, waiting=seen.waiting + row.waiting,
                                      running=running, limits=limits_seen)  # fmt: skip
                    merged[queue, level, row.key] = row
        rows = sorted(merged.values(), key=lambda row: -row.busy)
        return rows[:top]

    async def delayed(self, queues: Sequence[str], limit: int) -> list[DelayedJob]:
        """The delayed jobs of ``queues`` due soonest, at most ``limit``, soonest first
        (each backend's :meth:`Broker.delayed`; reads only).

        Raises:
            ConnectionFailed: Redis cannot be reached.
        """
        client, _ = await self.async_connection()
        found: list[DelayedJob] = []
        with translated(self.url):
            for queue in queues:
                found += await self.broker.delayed(client, queue, limit)
        return soonest_first(found, limit)

    # claims and counters

    def claim_place(
        self,
        key: str,
        job_id: str | None = None,
        place: str | None = None,
        job_key: str | None = None,
    ) -> tuple[str, str]:
        """The Redis key of the idempotency claim on ``key`` and its done markers' prefix
        (see :meth:`lockgate.backend.partitions.Layout.claim_place`)."""
        return self.layout.claim_place(key, job_id, place, job_key)

    def judge_call(self, holder: str, caller: str, quiet_ms: int, gap_ms: int) -> ScriptCall:
        """The call that judges whether the worker ``holder`` is dead (see
        ``lua/judge_owner.lua``), on the first partition's liveness set."""
        args: list[Arg] = [holder, caller, quiet_ms, gap_ms]
        return ScriptCall("judge_owner", [self.layout.parts[0].liveness()], args)

    def incr_once(
        self, name: str, request_id: str, amount: int, ttl_ms: int, legacy: bool = False
    ) -> tuple[bool, int]:
        """Add ``amount`` to counter ``name`` unless ``request_id`` was counted (under the
        guard's either name, see :meth:`lockgate.backend.partitions.Layout.request_keys`); with
        ``legacy`` (``App(legacy_markers=True)``) also guard it where 0.2 looks."""
        counter = self.layout.counter_keys(name)[0]
        guard, older = self.layout.request_keys(name, request_id)
        args: list[Arg] = [ttl_ms, amount, int(legacy), f"t:{name}"]
        call = ScriptCall("incr_once", [guard, counter, older], args)
        counted, value = self.run([call])[0]
        return bool(counted), int(value)

    def counter(self, name: str) -> int:
        """Counter ``name``'s value (0 when never counted)."""
        client, _ = self.sync_connection()
        with translated(self.url):
            return int(client.get(self.layout.counter_keys(name)[0]) or 0)

    def cooldown(self, key: str, ms: int) -> bool:
        """Start a cooldown of ``ms`` on ``key`` unless one runs (one SET NX PX)."""
        client, _ = self.sync_connection()
        with translated(self.url):
            return bool(client.set(self.layout.cooldown(key), "1", nx=True, px=ms))

    async def rate_limit_wait(self, task: str, rate: Rate | None, key_rate: Rate | None = None,
                              key: str | None = None) -> tuple[float, bool]:  # fmt: skip
        """Ask task ``task``'s shared limiters for a start now: its fairness key ``key``'s
        ``key_rate_limit``'s (``key_rate``) first, then its ``rate_limit``'s (``rate``),
        those not None (see ``lua/rate_limit.lua``).

        Sent in the round trip of the other calls made in this turn of the event loop, so
        the jobs one read started ask together.

        Returns:
            (0.0, True) when the job may start now (recorded in each limiter), else the
            seconds until its turn may come and whether every limiter reserved it (False:
            only the key's did, and the job asks the task's when it comes back).

        Raises:
            BrokerError: Redis refused the call or could not be reached.
        """
        limiters: list[str] = []
        args: list[Arg] = []
        if key_rate is not None and key is not None:
            limiters.append(self.keys.key_rate_limit(task, key))
            args += [key_rate.interval_us, key_rate.burst]
        if rate is not None:
            limiters.append(self.keys.rate_limit(task))
            args += [rate.interval_us, rate.burst]
        if not limiters:
            return 0.0, True
        ms, reserved = await self.run_soon(ScriptCall("rate_limit", limiters, args))
        return int(ms) / 1000, int(reserved) == len(limiters)

    # paused queues, purges of waiting jobs (see lockgate.queues)

    async def pause(self, queue: str) -> None:
        """Add ``queue`` to the paused queues (each partition's, in turn), which every
        read script checks."""
        client, _ = await self.async_connection()
        with translated(self.url):
            for keys in self.layout.parts:
                await client.zadd(keys.paused(), {queue: 0})

    async def resume(self, queue: str) -> None:
        """Take ``queue`` out of the paused queues, then wake the idle workers."""
        client, _ = await self.async_connection()
        with translated(self.url):
            for keys in self.layout.parts:
                await client.zrem(keys.paused(), queue)
            for wake in self.broker.wake_keys(queue):
                await client.xadd(wake, {"resumed": queue}, maxlen=16, approximate=False)
        if (call := self._wakeup_call({queue: WAKEUPS_MAX})) is not None:
            try:
                await self.run_async([call])
            except LockgateError as e:  # resumed: idle workers look within idle_wait
                _wakeup_failed(e)

    async def paused(self) -> set[str]:
        """The paused queues (as the first partition has them: a pause or resume that
        stopped half-way is finished by running it again)."""
        client, _ = await self.async_connection()
        with translated(self.url):
            queues: list[Any] = await client.zrange(self.layout.parts[0].paused(), 0, -1)
        return {text(queue) for queue in queues}

    async def purge_waiting(
        self, queue: str, levels: Sequence[str], task: str | None, chunk: int = PURGE_CHUNK
    ) -> int:
        """Delete ``queue``'s waiting jobs on ``levels`` (``task``'s only, unless None),
        ``chunk`` per atomic call; how many were deleted."""
        client, scripts = await self.async_connection()
        with translated(self.url):
            return await self.broker.purge_waiting(
                client, scripts, queue, levels=levels, task=task, chunk=chunk
            )

    def shared_secret(self, key: str, candidate: bytes) -> bytes:
        """The secret kept at ``key``: ``candidate``, written by the first caller (SET NX
        GET), else the one found there. One round trip (sync).

        Raises:
            BrokerError: Redis refused a command or could not be reached.
        """
        client, _ = self.sync_connection()
        with translated(self.url):
            found: Any = client.set(key, candidate, nx=True, get=True)
        return bytes(found) if found is not None else candidate

    # the namespace

    async def forget_namespace(self) -> int:
        """Delete every key of the namespace (on every primary); how many were deleted."""
        client, _ = await self.async_connection()
        deleted = 0
        with translated(self.url):
            for pattern in self.layout.patterns:
                async for key in client.scan_iter(match=pattern, count=1000):
                    deleted += int(await client.unlink(key))
        return deleted


def _key_rows(
    queue: str, level: str, flat: Sequence[Any], limits: Mapping[str, int]
) -> list[KeyStats]:
    """The rows of one queue and level in a ``fair_keys`` reply (pure)."""
    rows, i = [], 0
    while i < len(flat):
        key, waiting, i = text(flat[i]), int(flat[i + 1]), i + 2
        running: dict[str, int] = {}
        while text(flat[i]) != "":
            running[text(flat[i])] = int(flat[i + 1])
            i += 2
        i += 1
        shown = {task: limits[task] for task in running if task in limits}
        rows.append(KeyStats(queue, level, key, waiting, running, shown))
    return rows
