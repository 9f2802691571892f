"""Lua scripts: each lives in its own ``.lua`` file here; together they are one Redis
Functions library (see :mod:`lockgate.backend.lua.library`), loaded on a server when first needed.

A script is described by a :class:`ScriptCall` (which script, its keys, its arguments),
built by pure functions in the broker modules. The two runners below execute a list of
calls in one pipelined round trip, on an async or a sync client, as ``FCALL`` (``FCALL_RO``
for read-only scripts). Calls that meet "Function not found" (a fresh server, a
``FUNCTION FLUSH``, a new primary) load the library and run again, only those calls: one
extra round trip then, never an error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from lockgate.backend.lua.library import ScriptName, library, source

if TYPE_CHECKING:
    from lockgate.backend.connections import AsyncClient, SyncClient

__all__ = ["Arg", "AsyncScripts", "ScriptCall", "ScriptName", "SyncScripts", "source"]

Arg = str | bytes | int | float
FUNCTION_NOT_FOUND = "function not found"
# Seconds a cluster node whose pipeline lost its connection is passed over by rounds
# that reach other nodes too: its calls fail at once instead of being sent. redis-py
# retries a failed cluster pipeline for seconds, closing the client's connections to
# every node meanwhile (the other nodes' calls in flight fail with them), so a round
# that waits for a down node each time both stalls and spoils the live nodes' calls.
NODE_REST = 5.0


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """One invocation of a script: its name, KEYS and ARGV."""

    script: ScriptName
    keys: Sequence[str]
    args: Sequence[Arg]


def _fcall(target: Any, call: ScriptCall) -> Any:
    """FCALL (or FCALL_RO) of a call on a client or a pipeline, async or sync."""
    functions = library()
    command = "FCALL_RO" if functions.read_only(call.script) else "FCALL"
    return target.execute_command(
        command, functions.functions[call.script], len(call.keys), *call.keys, *call.args
    )


def function_missing(error: BaseException) -> bool:
    """Whether an error says the server lacks this version's library (nothing ran)."""
    return isinstance(error, redis.ResponseError) and FUNCTION_NOT_FOUND in str(error).lower()


def _missing(replies: Sequence[Any]) -> list[int]:
    """Positions of the calls whose function the server did not have."""
    return [i for i, reply in enumerate(replies) if function_missing(reply)]


class NodeResting(redis.ConnectionError):
    """A node's calls not sent: its connection was lost a moment ago (see NODE_REST)."""


def _by_node(client: Any, calls: Sequence[ScriptCall]) -> dict[Any, list[int]]:
    """Positions of the calls by the cluster node serving their first key (one group on
    a single server, or for calls without keys)."""
    if not isinstance(client, AsyncRedisCluster):
        return {None: list(range(len(calls)))}
    groups: dict[Any, list[int]] = {}
    for i, call in enumerate(calls):
        node = _node_of(client, call.keys[0]) if call.keys else None
        groups.setdefault(node, []).append(i)
    return groups


def _node_of(client: AsyncRedisCluster, key: str) -> str | None:
    """The name of the node serving ``key`` as the client knows it (None before it knows
    the slots: the cluster pipeline then finds out)."""
    try:
        node = client.get_node_from_key(key)
    except (redis.RedisError, redis.exceptions.RedisClusterException):  # slots not mapped yet
        return None
    return node.name if node is not None else None


def _raise_first(replies: list[Any]) -> list[Any]:
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


class AsyncScripts:
    """Scripts run through one async client."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._soon: list[tuple[ScriptCall, asyncio.Future[Any]]] = []
        self._sending: set[asyncio.Task[None]] = set()
        self._resting: dict[str, float] = {}  # node name -> until (monotonic)

    async def run(self, call: ScriptCall) -> Any:
        """Run one call."""
        try:
            return await _fcall(self._client, call)
        except redis.ResponseError as e:
            if not function_missing(e):
                raise
        await self.load()
        return await _fcall(self._client, call)

    async def load(self) -> None:
        """Load this version's library on the server (every primary of a cluster).

        REPLACE: the same name is the same code, so replacing is harmless, and a cluster
        whose other primaries have it already loads it on the one that lost it instead
        of failing there with "already exists".
        """
        await self._client.function_load(library().code, replace=True)

    async def run_all(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Run several calls in one pipelined round trip (not a transaction); the first
        call's error is raised, after every call ran."""
        if len(calls) == 1:
            return [await self.run(calls[0])]
        return _raise_first(await self.run_each(calls))

    async def run_each(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Run calls in one pipelined round trip; a call's error is returned in its place.

        A lost connection raises (then nothing, or only part, was applied), unless the
        calls reach several cluster nodes and some answered: then each call of a node
        that failed gets that node's error in its place (see :meth:`_pipeline`).
        """
        replies = await self._pipeline(calls)
        missing = _missing(replies)
        if missing:
            await self.load()
            again = await self._pipeline([calls[i] for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return replies

    async def _pipeline(self, calls: Sequence[ScriptCall]) -> list[Any]:
        groups = _by_node(self._client, calls)
        if len(groups) == 1:
            return await self._send_pipeline(calls)
        # One pipeline per cluster node, sent together (as redis-py's cluster pipeline
        # does): a node that is down fails its own calls only (each gets the error in its
        # place), where one pipeline would fail every call, those of live nodes too.
        # When every node failed, the round trip did: raised as before.
        nodes, positions = list(groups), list(groups.values())
        sent = await asyncio.gather(
            *(self._send_group(node, [calls[i] for i in group])
              for node, group in zip(nodes, positions, strict=True)),
            return_exceptions=True,
        )  # fmt: skip
        for node, outcome in zip(nodes, sent, strict=True):
            if isinstance(outcome, asyncio.CancelledError):
                raise outcome
            lost = isinstance(outcome, redis.ConnectionError | redis.TimeoutError)
            if node is not None and lost and not isinstance(outcome, NodeResting):
                self._resting[node] = time.monotonic() + NODE_REST
        if all(isinstance(outcome, BaseException) for outcome in sent):
            raise next(o for o in sent if isinstance(o, BaseException))
        replies: list[Any] = [None] * len(calls)
        for group, outcome in zip(positions, sent, strict=True):
            for k, i in enumerate(group):
                replies[i] = outcome if isinstance(outcome, BaseException) else outcome[k]
        return replies

    async def _send_group(self, node: str | None, calls: Sequence[ScriptCall]) -> list[Any]:
        """One node's calls of a round, unless the node rests (see :data:`NODE_REST`)."""
        if node is not None and self._resting.get(node, 0.0) > time.monotonic():
            raise NodeResting(f"{node} lost its connection a moment ago: not asked")
        return await self._send_pipeline(calls)

    async def _send_pipeline(self, calls: Sequence[ScriptCall]) -> list[Any]:
        async with self._client.pipeline(transaction=False) as pipe:
            for call in calls:
                _fcall(pipe, call)
            return list(await pipe.execute(raise_on_error=False))

    async def run_soon(self, call: ScriptCall) -> Any:
        """Run one call in the same round trip as every call made in this turn of the
        event loop (the claims of all the jobs one read started go out together).

        Raises:
            redis.RedisError: the call's own error, or the pipeline's.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._soon.append((call, future))
        if len(self._soon) == 1:  # the first of this turn: send once the turn is over
            loop.call_soon(self._send_soon)
        return await future

    def _send_soon(self) -> None:
        batch, self._soon = self._soon, []
        sending = asyncio.get_running_loop().create_task(self._send(batch))
        self._sending.add(sending)
        sending.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[ScriptCall, asyncio.Future[Any]]]) -> None:
        calls = [call for call, future in batch if not future.done()]
        waiting = [future for _, future in batch if not future.done()]
        if not calls:
            return
        try:
            replies = [await self.run(calls[0])] if len(calls) == 1 else await self.run_each(calls)
        except asyncio.CancelledError:
            for future in waiting:
                future.cancel()
            raise
        except Exception as e:
            replies = [e] * len(calls)
        for future, reply in zip(waiting, replies, strict=True):
            if future.done():
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)


class SyncScripts:
    """Scripts run through one sync client: the producers' facade for Django and Flask."""

    def __init__(self, client: SyncClient) -> None:
        self._client = client

    def run(self, call: ScriptCall) -> Any:
        """Run one call."""
        try:
            return _fcall(self._client, call)
        except redis.ResponseError as e:
            if not function_missing(e):
                raise
        self.load()
        return _fcall(self._client, call)

    def load(self) -> None:
        """Sync :meth:`AsyncScripts.load`."""
        self._client.function_load(library().code, replace=True)

    def run_all(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Sync :meth:`AsyncScripts.run_all`."""
        if len(calls) == 1:
            return [self.run(calls[0])]
        return _raise_first(self.run_each(calls))

    def run_each(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Sync :meth:`AsyncScripts.run_each`."""
        replies = self._pipeline(calls)
        missing = _missing(replies)
        if missing:
            self.load()
            again = self._pipeline([calls[i] for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return replies

    def _pipeline(self, calls: Sequence[ScriptCall]) -> list[Any]:
        with self._client.pipeline(transaction=False) as pipe:
            for call in calls:
                _fcall(pipe, call)
            return list(pipe.execute(raise_on_error=False))
