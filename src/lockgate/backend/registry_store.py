"""The worker registry's and the activity counts' Redis calls (see
:mod:`lockgate.backend.registry` for the records and :mod:`lockgate.worker.registry` for
the worker's loop that sends them).

The scripts place counts in the server's minutes; a worker guesses them with the offset
between its clock and the server's that the last call showed, and sends again the counts
a wrong guess left (see :meth:`RegistryStore._registry_call`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, Protocol

from lockgate.backend.broker import text
from lockgate.backend.connections import AsyncClient, SyncClient
from lockgate.backend.faults import translated
from lockgate.backend.keys import Keys
from lockgate.backend.lua import AsyncScripts, ScriptCall, SyncScripts
from lockgate.backend.registry import WorkerInfo, decode, heartbeat_call, leave_call, placed
from lockgate.core.activity import Batch, Counts, batches
from lockgate.core.sansio import drive, drive_async

Read = tuple[Any, ...]  # a read command: the client's method name, then its arguments


class RegistryHost(Protocol):
    """What the registry calls use of their store (:class:`lockgate.backend.store.Store`)."""

    url: str
    keys: Keys

    async def async_connection(self) -> tuple[AsyncClient, AsyncScripts]: ...

    def sync_connection(self) -> tuple[SyncClient, SyncScripts]: ...

    async def check_partitions_async(self, client: AsyncClient | None = None) -> None: ...


class RegistryStore:
    """The registry and activity calls of one store (through its async clients)."""

    def __init__(self, store: RegistryHost) -> None:
        self._store = store
        # The server's clock less this host's (s), as last seen: the registry's guess of
        # the server's minute for activity counts (see lockgate.worker.activity).
        self._clock_offset = 0.0

    async def heartbeat_worker(
        self, info: WorkerInfo, expires: float, counts: Mapping[int, Mapping[str, int]]
    ) -> Counts:
        """Refresh worker ``info.name``'s registry entry, to expire in ``expires`` seconds,
        and add its activity counts (per minute of its clock, counter name -> amount), on
        the server's clock (see :meth:`_registry_call`).

        Returns:
            The counts not added: to send with the next heartbeat.

        Raises:
            BrokerError: Redis refused a command or could not be reached.
        """
        client, scripts = await self._store.async_connection()
        await self._store.check_partitions_async(client)  # put off by a busy server at start
        keys = self._store.keys
        return await self._registry_call(
            scripts, counts, lambda sent: heartbeat_call(keys, info, expires, sent)
        )

    async def remove_worker(self, name: str, counts: Mapping[int, Mapping[str, int]]) -> Counts:
        """Remove worker ``name`` from the registry (a clean stop) and add its last
        activity counts (see :meth:`_registry_call`).

        Returns:
            The counts not added (lost).

        Raises:
            BrokerError: Redis refused a command or could not be reached.
        """
        _, scripts = await self._store.async_connection()
        keys = self._store.keys
        return await self._registry_call(scripts, counts, lambda sent: leave_call(keys, name, sent))

    async def _registry_call(
        self,
        scripts: AsyncScripts,
        counts: Mapping[int, Mapping[str, int]],
        call: Callable[[list[Batch]], ScriptCall],
    ) -> Counts:
        """Run a registry script with ``counts``, their minutes guessed with the last
        offset seen between the clocks: one round trip, and one more with the counts it
        could not place (the guess was off: the first call, or a clock that moved)."""
        left = {minute: dict(counters) for minute, counters in counts.items()}
        for _ in range(2):
            sent = time.time()
            sending = batches(left, sent, self._clock_offset)
            with translated(self._store.url):
                reply = await scripts.run(call(sending))
            now_ms, left = placed(reply, sending)
            self._clock_offset = now_ms / 1000 - (sent + time.time()) / 2
            if not left:
                break
        return left

    async def server_time(self) -> float:
        """The server's clock: Unix seconds (the node that keeps the registry).

        Raises:
            BrokerError: Redis refused the call or could not be reached.
        """
        _, scripts = await self._store.async_connection()
        call = ScriptCall("server_time", [self._store.keys.workers()], [])
        sent = time.time()
        with translated(self._store.url):
            now_ms = int(await scripts.run(call))
        self._clock_offset = now_ms / 1000 - (sent + time.time()) / 2
        return now_ms / 1000

    async def live_workers(self) -> list[WorkerInfo]:
        """The workers whose registry entry has not expired (two reads, no write).

        Raises:
            BrokerError: Redis refused a command or could not be reached.
        """
        client, _ = await self._store.async_connection()

        async def do(command: Read) -> Any:
            if command[0] == "gets":
                async with client.pipeline(transaction=False) as pipe:
                    for key in command[1]:
                        pipe.get(key)
                    return await pipe.execute()
            return await getattr(client, command[0])(*command[1:])

        with translated(self._store.url):
            return await drive_async(self._live_steps(), do)

    def live_workers_sync(self) -> list[WorkerInfo]:
        """:meth:`live_workers` through the sync client (the sync API's).

        Raises:
            BrokerError: Redis refused a command or could not be reached.
        """
        client, _ = self._store.sync_connection()

        def do(command: Read) -> Any:
            if command[0] == "gets":
                with client.pipeline(transaction=False) as pipe:
                    for key in command[1]:
                        pipe.get(key)
                    return pipe.execute()
            return getattr(client, command[0])(*command[1:])

        with translated(self._store.url):
            return drive(self._live_steps(), do)

    def _live_steps(self) -> Generator[Read, Any, list[WorkerInfo]]:
        """:meth:`live_workers`, sans I/O: it yields the commands to send (see
        :mod:`lockgate.core.sansio`): "gets" is a pipeline of GETs, one round trip (the
        entries share the namespace's hash tag), and GET, unlike MGET, is on the ACL
        list of the operations page."""
        keys = self._store.keys
        replied = yield ("zrange", keys.workers(), 0, -1)
        names = [text(name) for name in replied if isinstance(name, bytes | str)]
        if not names:
            return []
        values = yield ("gets", [keys.worker(name) for name in names])
        found = [decode(value) for value in values if value is not None]
        return [info for info in found if info is not None]

    async def activity_counts(self, minutes: Sequence[int]) -> list[dict[str, int]]:
        """The activity counts of each of ``minutes`` (Unix time // 60), in one round
        trip: counter name -> amount (empty for a minute nothing was counted in)."""
        client, _ = await self._store.async_connection()
        with translated(self._store.url):
            async with client.pipeline(transaction=False) as pipe:
                for minute in minutes:
                    pipe.zrange(self._store.keys.activity(minute), 0, -1, withscores=True)
                replies = await pipe.execute()
        return [{text(name): round(score) for name, score in rows} for rows in replies]
