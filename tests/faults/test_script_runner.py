"""The script runners: one round trip per pipeline, calls of one loop turn batched, and a
server that lost lockgate's library (FUNCTION FLUSH, a fresh server) running each call
exactly once; another version's library beside it is left alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.connection import Connection

from faults.support import PrivateRedis
from lockgate.backend.keys import Keys
from lockgate.backend.lua import AsyncScripts, ScriptCall, SyncScripts
from lockgate.backend.lua.library import library

KEYS = Keys("runner")


class CountingConnection(Connection):
    """Counts what this client sends: one write per round trip (a pipeline is one)."""

    sent = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        await super().send_packed_command(command, check_health)


def incr_once(request: str) -> ScriptCall:
    """A call with a visible effect: counts once per request id."""
    return ScriptCall("incr_once", [KEYS.request("n", request), KEYS.counter("n")], [60_000, 1])


def library_names(client: redis.Redis) -> list[str]:
    """The names of the Functions libraries on a server, sorted."""
    rows = [dict(zip(row[::2], row[1::2], strict=True)) for row in client.function_list()]
    return sorted(row[b"library_name"].decode() for row in rows)


class Counted(NamedTuple):
    server: PrivateRedis
    scripts: AsyncScripts


@pytest.fixture
async def counted(private_redis: Callable[..., PrivateRedis]) -> AsyncIterator[Counted]:
    """A private server, and lockgate's scripts on a client that counts its round trips."""
    server = private_redis()
    client = aioredis.Redis.from_url(server.url, connection_class=CountingConnection)
    await client.ping()
    yield Counted(server, AsyncScripts(client))
    await client.aclose()


async def test_a_pipeline_of_scripts_is_one_round_trip(counted: Counted) -> None:
    scripts = counted.scripts
    await scripts.run_each([incr_once("warm")])  # loads the library
    before = CountingConnection.sent
    replies = await scripts.run_each([incr_once(f"r{i}") for i in range(10)])
    assert CountingConnection.sent - before == 1  # nothing checked or loaded before it
    assert [int(r[1]) for r in replies] == list(range(2, 12))


async def test_a_server_without_the_library_costs_one_load_and_one_rerun(
    counted: Counted,
) -> None:
    server, scripts = counted
    assert server.client.function_list() == []
    before = CountingConnection.sent
    replies = await scripts.run_each([incr_once(f"r{i}") for i in range(5)])
    assert CountingConnection.sent - before == 3  # the pipeline, FUNCTION LOAD, the rerun
    assert [int(r[1]) for r in replies] == [1, 2, 3, 4, 5]
    assert library_names(server.client) == [library().name]


async def test_calls_made_in_one_loop_turn_share_one_round_trip(counted: Counted) -> None:
    scripts = counted.scripts
    await scripts.run_soon(incr_once("warm"))
    before = CountingConnection.sent
    replies = await asyncio.gather(*(scripts.run_soon(incr_once(f"r{i}")) for i in range(20)))
    assert CountingConnection.sent - before == 1
    assert sorted(int(r[1]) for r in replies) == list(range(2, 22))
    again = await asyncio.gather(*(scripts.run_soon(incr_once(f"r{i}")) for i in range(3)))
    assert [int(r[0]) for r in again] == [0, 0, 0]  # each reply is its own call's


async def test_a_call_error_reaches_its_caller_only(counted: Counted) -> None:
    server, scripts = counted
    server.client.set(KEYS.counter("n"), "not a number")
    good = ScriptCall("incr_once", [KEYS.request("m", "1"), KEYS.counter("m")], [60_000, 1])
    results = await asyncio.gather(
        scripts.run_soon(incr_once("bad")), scripts.run_soon(good), return_exceptions=True
    )
    assert isinstance(results[0], redis.ResponseError)
    assert list(results[1]) == [1, 1]


async def test_after_function_flush_every_call_runs_once(counted: Counted) -> None:
    server, scripts = counted
    await scripts.run_each([incr_once("warm")])
    server.client.function_flush()
    replies = await scripts.run_each([incr_once(f"a{i}") for i in range(5)])
    assert [int(r[1]) for r in replies] == [2, 3, 4, 5, 6]
    server.client.function_flush()
    assert int((await scripts.run(incr_once("b")))[1]) == 7
    server.client.function_flush()
    sync = SyncScripts(server.client)
    assert [int(r[1]) for r in sync.run_each([incr_once("c1"), incr_once("c2")])] == [8, 9]
    server.client.function_flush()
    assert int(sync.run(incr_once("d"))[1]) == 10
    assert int(server.client.get(KEYS.counter("n")) or 0) == 10


def test_another_versions_library_stays_beside_this_one(
    private_redis: Callable[..., PrivateRedis],
) -> None:
    """A rolling deploy: an older worker's library (another name, other functions) keeps
    serving it while this version loads and calls its own."""
    server = private_redis()
    older = "lockgate_000000000000"
    server.client.function_load(
        f"#!lua name={older}\n"
        f"redis.register_function('{older}_incr_once', function(keys, args) return 'old' end)"
    )
    sync = SyncScripts(server.client)
    assert int(sync.run(incr_once("new"))[1]) == 1
    assert library_names(server.client) == sorted([older, library().name])
    assert server.client.fcall(f"{older}_incr_once", 0) == b"old"
    # Loading this version again (another worker starting) is no error.
    sync.load()
