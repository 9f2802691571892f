"""Pausing, resuming and purging a queue: shared by ``lockgate queue`` and the dashboard.

A paused queue keeps accepting jobs, and workers take none of them until it is resumed.
The pause is a set of queue names per namespace that every read script checks in the
same atomic step that hands out jobs, so once :func:`pause` returned no worker starts
another job of the queue (jobs already running finish; due delayed jobs and retries still
move into the queue, where they wait). :func:`resume` wakes the idle workers. Workers of a
lockgate release older than this module do not know the set and go on reading.

A purge deletes a queue's *waiting* jobs (optionally of one level and/or one task) and
frees their job ids; running jobs and delayed ones stay. It deletes in chunks of at most
1,000 jobs per atomic call, so Redis is never blocked for long; a job a worker takes
between two chunks is running, and stays.
"""

from __future__ import annotations

from lockgate.api.app import App
from lockgate.errors import ConfigError

__all__ = ["check", "pause", "paused", "purge", "resume"]


def check(app: App, queue: str, level: str | None = None) -> None:
    """Refuse a queue no task of the app uses, and a level it does not declare (pure).

    Raises:
        ConfigError: the queue or the level is unknown (one line naming the known ones).
    """
    if queue not in app.queues:
        raise ConfigError(f"unknown queue {queue!r}; the app's queues: {', '.join(app.queues)}")
    if level is not None:
        app.levels.index(level)


async def pause(app: App, queue: str) -> None:
    """Pause ``queue``: it keeps accepting jobs, and workers take none from it.

    Pausing a paused queue does nothing.

    Args:
        app: the App whose namespace holds the queue.
        queue: a queue some task of the app uses.

    Raises:
        ConfigError: no task of the app uses ``queue``.
        ConnectionFailed: Redis cannot be reached.
    """
    check(app, queue)
    await app.store.pause(queue)


async def resume(app: App, queue: str) -> None:
    """Resume ``queue``: workers take its jobs again (idle ones are woken).

    Resuming a queue that is not paused does nothing.

    Args:
        app: the App whose namespace holds the queue.
        queue: a queue some task of the app uses, or one that is paused (a queue no task
            uses any more can still be resumed).

    Raises:
        ConfigError: no task of the app uses ``queue`` and it is not paused.
        ConnectionFailed: Redis cannot be reached.
    """
    if queue not in app.queues and queue not in await app.store.paused():
        check(app, queue)
    await app.store.resume(queue)


async def paused(app: App) -> set[str]:
    """The paused queues of the app's namespace.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    return await app.store.paused()


async def purge(app: App, queue: str, *, level: str | None = None, task: str | None = None) -> int:
    """Delete the waiting jobs of ``queue`` and free their job ids.

    Running jobs and delayed ones (retries, delayed enqueues) stay.

    Args:
        app: the App whose namespace holds the queue.
        queue: a queue some task of the app uses.
        level: only the jobs of this level (None: every level).
        task: only the jobs of this task name (None: every task's, and entries that
            cannot be decoded).

    Returns:
        How many jobs were deleted.

    Raises:
        ConfigError: no task of the app uses ``queue``, or ``level`` is not declared.
        ConnectionFailed: Redis cannot be reached.
    """
    check(app, queue, level)
    levels = app.levels.names if level is None else (level,)
    return await app.store.purge_waiting(queue, levels, task)
