"""Client round trips to Redis, counted inside one process (``BENCH_COUNT_ROUND_TRIPS=1``).

Redis ``INFO commandstats`` counts commands, those a script runs included, so it cannot
tell one script call from five. Here every ``send_packed_command`` of a redis-py
connection, sync or asyncio, counts one: a single command is one call, a whole pipeline
(``MULTI``/``EXEC`` included) is one call, a health-check ``PING`` or a connection's
handshake is one call each. That is the number of trips the client makes to the server.
Connections named ``PROBE_NAME`` (the benchmark probe's own) are left out.

The lockgate adapter installs the counter at import when ``BENCH_COUNT_ROUND_TRIPS=1``;
the probe takes the count as jobs finish. ``python -m benchmarks.roundtrips`` checks the
counting against ``BENCH_URL`` (or redis://127.0.0.1:6379/0): 100 ``PING`` calls count
100, one pipeline of 100 commands counts 1, sync and asyncio, the probe's connections 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

ENV = "BENCH_COUNT_ROUND_TRIPS"
PROBE_NAME = "lockgate-bench-probe"

_lock = threading.Lock()
_inside: contextvars.ContextVar[bool] = contextvars.ContextVar("counted_send", default=False)
_count = 0
_taken = 0
_installed = False


def enabled() -> bool:
    """Whether this process counts (``BENCH_COUNT_ROUND_TRIPS=1``)."""
    return os.environ.get(ENV) == "1"


def _tick(connection: Any) -> None:
    global _count
    if connection.client_name != PROBE_NAME:
        with _lock:
            _count += 1


def install() -> None:
    """Count every round trip of redis-py connections in this process from now on."""
    global _installed
    # Imported here: the probe imports this module in every library's environment, and
    # only the counting needs redis-py's connection classes (asyncio ones since 5.0).
    import redis.asyncio.connection
    import redis.connection

    with _lock:
        if _installed:
            return
        _installed = True
    sync_class = redis.connection.AbstractConnection
    async_class = redis.asyncio.connection.AbstractConnection
    sync_send: Callable[..., None] = sync_class.send_packed_command
    async_send: Callable[..., Any] = async_class.send_packed_command

    def counted(self: Any, command: Any, check_health: bool = True) -> None:
        _tick(self)
        sync_send(self, command, check_health)

    async def counted_async(self: Any, command: Any, check_health: bool = True) -> None:
        if not _inside.get():
            _tick(self)
        await async_send(self, command, check_health)

    sync_class.send_packed_command = counted  # type: ignore[method-assign]
    async_class.send_packed_command = counted_async  # type: ignore[method-assign]
    # lockgate's write deadline brings its own send (a mixin over the connection class
    # it builds when it connects, so after this install): counted there, once; when it
    # falls back to the base class's send, that one is not counted again.
    with contextlib.suppress(ImportError):
        from lockgate.backend.write_deadline import DeadlineWrites

        own = DeadlineWrites.send_packed_command
        DeadlineWrites.send_packed_command = _counted_once(own)  # type: ignore[method-assign]


def _counted_once(send: Callable[..., Any]) -> Callable[..., Any]:
    async def counted(self: Any, command: Any, check_health: bool = True) -> None:
        if _inside.get():
            await send(self, command, check_health)
            return
        _tick(self)
        token = _inside.set(True)
        try:
            await send(self, command, check_health)
        finally:
            _inside.reset(token)

    return counted


def count() -> int:
    """Round trips counted in this process so far."""
    with _lock:
        return _count


def take() -> int:
    """Round trips counted since the previous ``take`` (since ``install`` the first time)."""
    global _taken
    with _lock:
        delta, _taken = _count - _taken, _count
        return delta


def _check(label: str, counted: int, expected: int) -> bool:
    ok = counted == expected
    print(f"{'ok  ' if ok else 'FAIL'} {label}: counted {counted}, expected {expected}")
    return ok


def _sync_checks(url: str) -> list[bool]:
    results = []
    with contextlib.closing(redis.Redis.from_url(url)) as client:
        client.ping()  # connect (the handshake's own trips are not part of the check)
        before = count()
        for _ in range(100):
            client.ping()
        results.append(_check("sync: 100 PING", count() - before, 100))
        for transaction in (False, True):
            pipe = client.pipeline(transaction=transaction)
            for _ in range(100):
                pipe.ping()
            before = count()
            pipe.execute()
            results.append(_check(f"sync: pipeline of 100 (transaction={transaction})",
                                  count() - before, 1))  # fmt: skip
    with contextlib.closing(redis.Redis.from_url(url, client_name=PROBE_NAME)) as probe:
        before = count()
        for _ in range(10):
            probe.ping()
        results.append(_check("sync: 10 PING from the probe's client", count() - before, 0))
    return results


async def _async_checks(url: str) -> list[bool]:
    import redis.asyncio

    results = []
    client = redis.asyncio.Redis.from_url(url)
    try:
        await client.ping()
        before = count()
        for _ in range(100):
            await client.ping()
        results.append(_check("asyncio: 100 PING", count() - before, 100))
        for transaction in (False, True):
            pipe = client.pipeline(transaction=transaction)
            for _ in range(100):
                pipe.ping()
            before = count()
            await pipe.execute()
            results.append(_check(f"asyncio: pipeline of 100 (transaction={transaction})",
                                  count() - before, 1))  # fmt: skip
    finally:
        await client.aclose()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.roundtrips")
    parser.add_argument("--result", help="also write the outcome here, as JSON")
    args = parser.parse_args()
    url = os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0")
    install()
    results = _sync_checks(url) + asyncio.run(_async_checks(url))
    if args.result:
        outcome = {"ok": all(results), "redis_py": redis.__version__}
        Path(args.result).write_text(json.dumps(outcome))
    if not all(results):
        print("round-trip counting is wrong for this redis-py", redis.__version__)
        sys.exit(1)


if __name__ == "__main__":
    main()
