"""The recent ends' Redis reads: each partition's index of task names and its capped lists
of ends (written by the settle scripts, see ``lua/_history.lua``), read in bounded
windows (ZRANGE of at most :data:`MAX_TASKS` names, LRANGE of at most ``limit`` entries),
never a SCAN."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from lockgate.backend.broker import text
from lockgate.backend.connections import AsyncClient
from lockgate.backend.faults import translated
from lockgate.backend.lua import AsyncScripts
from lockgate.backend.partitions import Layout

# Task names read from each partition's index at most (a bound for a page: the names are
# the app's tasks and '?', so far fewer).
MAX_TASKS = 1000


class HistorySource(Protocol):
    """What the reads need of the store: its layout and an async connection."""

    url: str
    layout: Layout

    async def async_connection(self) -> tuple[AsyncClient, AsyncScripts]: ...


async def task_names(store: HistorySource) -> set[str]:
    """The task names that have a history list in some partition.

    Raises:
        BrokerError: Redis refused a command or could not be reached.
    """
    client, _ = await store.async_connection()
    with translated(store.url):
        async with client.pipeline(transaction=False) as pipe:
            for keys in store.layout.parts:
                pipe.zrange(keys.history_tasks(), 0, MAX_TASKS - 1)
            replies: list[Any] = await pipe.execute()
    return {text(name) for names in replies for name in names}


async def read_ends(
    store: HistorySource, wanted: Sequence[tuple[str, str]], limit: int
) -> dict[tuple[str, str], list[list[bytes]]]:
    """The newest ``limit`` entries of each (task, outcome code) in ``wanted``: a list per
    partition, newest first (the caller merges them by time), in one pipelined round
    trip.

    Raises:
        BrokerError: Redis refused a command or could not be reached.
    """
    client, _ = await store.async_connection()
    parts = store.layout.parts
    with translated(store.url):
        async with client.pipeline(transaction=False) as pipe:
            for task, code in wanted:
                for keys in parts:
                    pipe.lrange(keys.history(task, code), 0, limit - 1)
            replies: list[Any] = await pipe.execute()
    width = len(parts)
    return {place: replies[n * width : (n + 1) * width] for n, place in enumerate(wanted)}
