"""A starting worker's wait for Redis (``WorkerConfig.redis_wait``, ``lockgate worker --wait``).

Containers start in any order: a worker that exits at once because Redis is not up yet is
restarted by its orchestrator in a loop, or not at all. So a starting worker tries again,
with capped exponential backoff, for up to the wait, says once that it waits (the URL's
password masked, as in every :class:`~lockgate.errors.ConnectionFailed`), and gives up
with one error naming how long it waited. Only an unreachable or not yet ready server is
waited for: a refusal (a wrong password, a missing permission) cannot heal by waiting.

A running worker that loses Redis keeps going (its loops retry, :mod:`lockgate.worker.loop`);
its liveness keeper logs when Redis is back (:mod:`lockgate.worker.liveness`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from lockgate.backend.connections import AsyncClient
from lockgate.backend.store import Store
from lockgate.core.logs import get_logger
from lockgate.core.policy import reconnect_delay
from lockgate.errors import ConnectionFailed, ServerBusy

log = get_logger(__name__)
T = TypeVar("T")
BACKOFF_CAP = 2.0  # seconds: the longest pause between two tries (Redis is soon noticed)


async def reachable(connect: Callable[[], Awaitable[T]], wait: float) -> T:
    """``connect()``, tried again while Redis cannot be reached, for up to ``wait`` seconds.

    Args:
        connect: opens and checks the connection (e.g. ``store.connect_worker``).
        wait: seconds to keep trying; 0 tries once.

    Returns:
        What ``connect`` returned once it worked.

    Raises:
        ConnectionFailed: Redis could not be reached within ``wait`` (the message says how
            long the worker waited).
        ServerBusy: Redis still answered busy (loading its data) when the wait ended.
        BrokerError: Redis refused the client (not waited for).
    """
    deadline = time.monotonic() + wait
    started = time.monotonic()
    failures = 0
    while True:
        try:
            connected = await connect()
        except (ConnectionFailed, ServerBusy) as e:
            left = deadline - time.monotonic()
            if left <= 0:
                if wait > 0 and isinstance(e, ConnectionFailed):
                    raise ConnectionFailed(e.url, f"{e.reason} (waited {wait:g} s)") from e
                raise
            if failures == 0:
                log.warning("%s; waiting up to %g s for it", e, wait)
            await asyncio.sleep(min(left, reconnect_delay(failures, cap=BACKOFF_CAP)))
            failures += 1
            continue
        if failures:
            log.info("Redis answers after %.1f s of waiting", time.monotonic() - started)
        return connected


async def worker_client(store: Store, max_connections: int, wait: float) -> AsyncClient:
    """A worker's own async client (:meth:`Store.connect_worker`), once Redis answers
    (within ``wait`` seconds); the server's configuration risks are logged.

    Raises:
        ConnectionFailed: Redis could not be reached within ``wait``.
        BrokerError: Redis refused the client.
    """
    client, warnings = await reachable(lambda: store.connect_worker(max_connections), wait)
    for warning in warnings:
        log.warning("%s", warning)
    return client
