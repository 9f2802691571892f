"""Lua scripts: each lives in its own ``.lua`` file here, loaded once per client.

A script is described by a :class:`ScriptCall` (which script, its keys, its arguments),
built by pure functions in the broker modules. The two runners below execute a list of
calls in one pipelined round trip, on an async or a sync client. redis-py's ``Script``
sends EVALSHA and falls back to loading the script on NOSCRIPT, so a server restart or a
SCRIPT FLUSH costs one extra round trip, never an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

import redis
import redis.asyncio as aioredis
from redis.commands.core import AsyncScript, Script

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
    """Scripts registered on one async client."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._scripts: dict[ScriptName, AsyncScript] = {}

    def _get(self, name: ScriptName) -> AsyncScript:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self._client.register_script(source(name))
        return script

    async def run(self, call: ScriptCall) -> Any:
        """Run one call."""
        return await self._get(call.script)(keys=list(call.keys), args=list(call.args))

    async def run_all(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Run several calls in one pipelined round trip (not a transaction)."""
        if len(calls) == 1:
            return [await self.run(calls[0])]
        async with self._client.pipeline(transaction=False) as pipe:
            for call in calls:
                await self._get(call.script)(
                    keys=list(call.keys), args=list(call.args), client=pipe
                )
            return list(await pipe.execute())

    async def run_each(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Run calls in one pipelined round trip; a call's error is returned in its place.

        A lost connection still raises: then nothing, or only part, was applied.
        """
        async with self._client.pipeline(transaction=False) as pipe:
            for call in calls:
                await self._get(call.script)(
                    keys=list(call.keys), args=list(call.args), client=pipe
                )
            return list(await pipe.execute(raise_on_error=False))


class SyncScripts:
    """Scripts registered on one sync client: the producers' facade for Django and Flask."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._scripts: dict[ScriptName, Script] = {}

    def _get(self, name: ScriptName) -> Script:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self._client.register_script(source(name))
        return script

    def run_all(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Run several calls in one pipelined round trip (not a transaction)."""
        if len(calls) == 1:
            call = calls[0]
            return [self._get(call.script)(keys=list(call.keys), args=list(call.args))]
        with self._client.pipeline(transaction=False) as pipe:
            for call in calls:
                self._get(call.script)(keys=list(call.keys), args=list(call.args), client=pipe)
            return list(pipe.execute())

    def run_each(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Sync :meth:`AsyncScripts.run_each`."""
        with self._client.pipeline(transaction=False) as pipe:
            for call in calls:
                self._get(call.script)(keys=list(call.keys), args=list(call.args), client=pipe)
            return list(pipe.execute(raise_on_error=False))
