"""Read-only listing of delayed jobs (retries and delayed enqueues waiting for a due time).

Each backend keeps delayed jobs in sorted sets scored by due time (server milliseconds)
and lists them (see ``delayed`` of :mod:`lockgate.backend.stream_broker` and
:mod:`lockgate.backend.sorted_broker`); a partitioned namespace's jobs are read from every
partition. Reads only: a job that becomes due meanwhile is simply missing or still listed.
"""

from __future__ import annotations

from collections.abc import Sequence

from lockgate.api.app import App
from lockgate.backend.broker import DelayedJob

__all__ = ["DelayedJob", "delayed_jobs"]


async def delayed_jobs(
    app: App, limit: int = 100, queues: Sequence[str] | None = None
) -> list[DelayedJob]:
    """The delayed jobs due soonest, soonest first.

    Args:
        app: whose namespace and backend to read.
        limit: at most this many jobs (also read per queue and level).
        queues: the queues to read (default: the app's).

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    return await app.store.delayed(queues or app.queues, limit)
