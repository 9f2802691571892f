"""A client's first contact with a namespace: the partition count, recorded in Redis,
which every client checks before its first call, so producers and workers of one
namespace agree (see :mod:`lockgate.backend.partitions`); and the names of its App's
queues, which it adds to the namespace's (``Keys.queue_names``) in the same contact, so
that a queue a producer enqueues in shows before any worker serves it.

The count is read, and written by the first client that finds none (SET NX GET: of two
first clients, the second reads the first's). A partitioned App that finds no record
refuses a namespace that already holds jobs in the one-partition layout (lockgate 0.2's,
or ``partitions=1`` before the record existed): its workers would never read them. A
server that refuses the write for now (over maxmemory, a failover) leaves the check to
the next call, so a worker still starts and drains then.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lockgate.backend.broker import text
from lockgate.backend.connections import AsyncClient, SyncClient
from lockgate.backend.faults import translated
from lockgate.backend.partitions import Layout
from lockgate.core.logs import get_logger
from lockgate.errors import BrokerError, ConfigError, ServerBusy

log = get_logger(__name__)
MAX_NAMES = 1_000  # queue names read for a page: far more than any namespace has


def old_layout_keys(layout: Layout, queues: Sequence[str], levels: Sequence[str]) -> list[str]:
    """The one-partition keys that hold jobs of ``queues``: streams, delayed sets, and
    the dead letters."""
    base = layout.base
    places = [(queue, level) for queue in queues for level in levels]
    return [
        *(base.stream(queue, level) for queue, level in places),
        *(base.delayed(queue, level) for queue, level in places),
        base.dead(),
    ]


def verdict(layout: Layout, recorded: Any, old_jobs: int = 0) -> None:
    """Raise unless a client of ``layout`` may use the namespace (pure).

    Args:
        layout: the client's layout.
        recorded: the recorded count (None: there was none).
        old_jobs: with no record, how many one-partition keys hold jobs.

    Raises:
        ConfigError: the counts differ, or a partitioned App meets jobs it cannot read.
    """
    name, count = layout.namespace, layout.partitions
    if recorded is None and layout.partitioned and old_jobs:
        raise ConfigError(
            f"namespace {name!r} holds jobs in the one-partition layout (lockgate 0.2, or "
            f"partitions=1), which an App with partitions={count} never reads: drain them "
            "first, or use a new namespace"
        )
    if recorded is not None and text(recorded) != str(count):
        raise ConfigError(
            f"namespace {name!r} has {text(recorded)} partition(s) in Redis but this App "
            f"says partitions={count}: producers and workers of a namespace must agree "
            "(the count is fixed for its life)"
        )


def check(
    client: SyncClient, url: str, layout: Layout, queues: Sequence[str], levels: Sequence[str]
) -> bool:
    """Check (and, the first time, write) the namespace's count, then add ``queues`` to
    its queue names (best effort: a refusal is logged at debug level); False when the
    server refused the check for now (it is then still to do).

    Raises:
        ConfigError: see :func:`verdict`.
        BrokerError: Redis could not be reached or refused the client.
    """
    key = layout.base.partitions()
    try:
        with translated(url):
            recorded: Any = client.get(key)
            if recorded is None:
                old = int(client.exists(*old_layout_keys(layout, queues, levels)))
                verdict(layout, None, old)
                recorded = client.set(key, layout.partitions, nx=True, get=True)
            verdict(layout, recorded)
    except ServerBusy:
        return False
    try:  # best effort: the check passed, whatever became of the names
        with translated(url):
            client.zadd(layout.base.queue_names(), dict.fromkeys(queues, 0))
    except BrokerError as e:  # out of memory, a replica: they show once a worker serves
        log.debug("the queue names of namespace %r were not recorded: %s", layout.namespace, e)
    return True


async def check_async(
    client: AsyncClient, url: str, layout: Layout, queues: Sequence[str], levels: Sequence[str]
) -> bool:
    """Async :func:`check`."""
    key = layout.base.partitions()
    try:
        with translated(url):
            recorded: Any = await client.get(key)
            if recorded is None:
                old = int(await client.exists(*old_layout_keys(layout, queues, levels)))
                verdict(layout, None, old)
                recorded = await client.set(key, layout.partitions, nx=True, get=True)
            verdict(layout, recorded)
    except ServerBusy:
        return False
    try:  # best effort: the check passed, whatever became of the names
        with translated(url):
            await client.zadd(layout.base.queue_names(), dict.fromkeys(queues, 0))
    except BrokerError as e:  # out of memory, a replica: they show once a worker serves
        log.debug("the queue names of namespace %r were not recorded: %s", layout.namespace, e)
    return True


async def queue_names(client: AsyncClient, url: str, layout: Layout) -> list[str]:
    """The queues the namespace's clients were configured with (at most
    :data:`MAX_NAMES`, in name order).

    Raises:
        BrokerError: Redis could not be reached or refused the client.
    """
    with translated(url):
        names: list[Any] = await client.zrange(layout.base.queue_names(), 0, MAX_NAMES - 1)
    return [text(name) for name in names]
