"""Lua scripts: each lives in its own ``.lua`` file here, loaded once per client.

A script is described by a :class:`ScriptCall` (which script, its keys, its arguments),
built by pure functions in the broker modules. The two runners below execute a list of
calls in one pipelined round trip, on an async or a sync client, as EVALSHA. A call that
meets NOSCRIPT (a server restart, a SCRIPT FLUSH) loads its script and runs again: one
extra round trip then, never an error. (redis-py's own ``Script`` in a pipeline sends
``SCRIPT EXISTS`` before every pipeline, a hidden round trip each time.)
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

import redis
import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

ScriptName = Literal[
    "enqueue_stream",
    "read_stream",
    "enqueue_sorted",
    "take_sorted",
    "extend_sorted",
    "reclaim_stream",
    "heartbeat_stream",
    "forget_consumers",
    "dlq_purge",
    "dlq_trim",
    "idem_claim",
    "idem_settle",
    "incr_once",
    "stats_stream",
    "stats_sorted",
    "settle_stream",
    "settle_sorted",
]
Arg = str | bytes | int | float


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """One invocation of a script: its name, KEYS and ARGV."""

    script: ScriptName
    keys: Sequence[str]
    args: Sequence[Arg]


INCLUDE = "--#include "


def _text(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.lua").read_text(encoding="utf-8")


@cache
def source(name: ScriptName) -> str:
    """The text of a script, with each ``--#include FRAGMENT`` line replaced by the
    fragment's text, once (logic several scripts share lives once, in ``_FRAGMENT.lua``;
    a fragment may include others)."""
    return _expand(name, set())


@cache
def sha(name: ScriptName) -> str:
    """The SHA1 digest by which Redis knows a script (EVALSHA)."""
    return hashlib.sha1(source(name).encode()).hexdigest()


def _evalsha(target: Any, call: ScriptCall) -> Any:
    """EVALSHA of a call on a client or a pipeline, async or sync (what it returns)."""
    return target.execute_command(
        "EVALSHA", sha(call.script), len(call.keys), *call.keys, *call.args
    )


def _missing(replies: Sequence[Any]) -> list[int]:
    """Positions of the calls whose script the server did not have (nothing ran there)."""
    return [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]


def _raise_first(replies: list[Any]) -> list[Any]:
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _expand(name: str, included: set[str]) -> str:
    out = []
    for line in _text(name).splitlines(keepends=True):
        if not line.startswith(INCLUDE):
            out.append(line)
            continue
        fragment = line[len(INCLUDE) :].strip()
        if fragment not in included:
            included.add(fragment)
            out.append(_expand(fragment, included))
    return "".join(out)


class AsyncScripts:
    """Scripts run through one async client."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._soon: list[tuple[ScriptCall, asyncio.Future[Any]]] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def run(self, call: ScriptCall) -> Any:
        """Run one call."""
        try:
            return await _evalsha(self._client, call)
        except NoScriptError:
            await self._client.script_load(source(call.script))
            return await _evalsha(self._client, call)

    async def run_all(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Run several calls in one pipelined round trip (not a transaction); the first
        call's error is raised, after every call ran."""
        if len(calls) == 1:
            return [await self.run(calls[0])]
        return _raise_first(await self.run_each(calls))

    async def run_each(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Run calls in one pipelined round trip; a call's error is returned in its place.

        A lost connection still raises: then nothing, or only part, was applied.
        """
        replies = await self._pipeline(calls)
        missing = _missing(replies)
        if missing:
            for name in {calls[i].script for i in missing}:
                await self._client.script_load(source(name))
            again = await self._pipeline([calls[i] for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return replies

    async def _pipeline(self, calls: Sequence[ScriptCall]) -> list[Any]:
        async with self._client.pipeline(transaction=False) as pipe:
            for call in calls:
                _evalsha(pipe, call)
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

    def __init__(self, client: redis.Redis) -> None:
        self._client = client

    def run(self, call: ScriptCall) -> Any:
        """Run one call."""
        try:
            return _evalsha(self._client, call)
        except NoScriptError:
            self._client.script_load(source(call.script))
            return _evalsha(self._client, call)

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
            for name in {calls[i].script for i in missing}:
                self._client.script_load(source(name))
            again = self._pipeline([calls[i] for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return replies

    def _pipeline(self, calls: Sequence[ScriptCall]) -> list[Any]:
        with self._client.pipeline(transaction=False) as pipe:
            for call in calls:
                _evalsha(pipe, call)
            return list(pipe.execute(raise_on_error=False))
