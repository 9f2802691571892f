"""Read-only queries about queues, shared by the CLI and anything that wants numbers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lockgate.api.app import App
from lockgate.backend.broker import KeyStats, LevelStats
from lockgate.backend.registry import WorkerInfo
from lockgate.core.activity import KEEP_MINUTES, Activity, Totals, minute_of, summarize
from lockgate.errors import ConfigError

__all__ = [
    "Activity", "KeyStats", "LevelStats", "Stats", "StatsReport", "WorkerInfo", "activity",
    "busiest_keys", "live_workers", "queue_stats", "stats_report",
]  # fmt: skip
RECENT_MINUTES = 15  # the window of `lockgate stats` and the dashboard
BUSIEST_KEYS = 10  # the fairness keys `lockgate stats` shows


@dataclass(frozen=True, slots=True)
class Stats:
    """A namespace's counts: per queue and level, and the dead-letter queue's length."""

    namespace: str
    backend: str
    levels: list[LevelStats]
    dead_letters: int

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "namespace": self.namespace,
            "backend": self.backend,
            "levels": [row.as_dict() for row in self.levels],
            "dead_letters": self.dead_letters,
        }


async def queue_stats(app: App, queues: tuple[str, ...] | None = None) -> Stats:
    """Per queue and level: length, waiting, pending, delayed, consumers, oldest wait.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    rows, dead = await app.store.stats(queues or app.queues)
    return Stats(app.namespace, app.backend, rows, dead)


async def live_workers(app: App) -> list[WorkerInfo]:
    """The workers serving ``app``'s namespace now, by name (see :mod:`lockgate.worker.registry`).

    A worker that stopped cleanly is gone at once; one that was killed, once its entry
    expires (``registry.EXPIRES_AFTER`` seconds after its last heartbeat).

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    return sorted(await app.store.registry.live_workers(), key=lambda info: info.name)


async def activity(app: App, minutes: int = RECENT_MINUTES) -> Activity:
    """What the workers of ``app``'s namespace did in the last ``minutes`` minutes (the
    current one included, partly): per queue and level, done, retried (an attempt failed
    and will run again), dead (a final failure) and cancelled runs, and wait times, per
    minute and in total (see :mod:`lockgate.worker.activity`). Counts reach Redis a couple of
    seconds after the runs end. The window ends at the server's time, not this host's:
    the workers' counts are placed by it.

    Raises:
        ConfigError: ``minutes`` is not 1 to ``activity.KEEP_MINUTES``.
        ConnectionFailed: Redis cannot be reached.
    """
    if isinstance(minutes, bool) or not isinstance(minutes, int) or not 0 < minutes <= KEEP_MINUTES:
        raise ConfigError(f"minutes must be a whole number from 1 to {KEEP_MINUTES}: {minutes!r}")
    now = await app.store.registry.server_time()  # the clock the counts were placed by
    last = minute_of(now)
    window = list(range(last - minutes + 1, last + 1))
    counts = await app.store.registry.activity_counts(window)
    return summarize(dict(zip(window, counts, strict=True)), minutes=minutes, now=now)


@dataclass(frozen=True, slots=True)
class StatsReport:
    """What ``lockgate stats`` shows: the queue counts, the live workers, what was
    done, retried and dead-lettered in the last minutes, and the paused queues."""

    stats: Stats
    workers: list[WorkerInfo]
    activity: Activity
    keys: list[KeyStats]
    paused: frozenset[str] = frozenset()

    def serving(self, queue: str) -> int:
        """How many live workers serve ``queue``."""
        return sum(queue in info.queues for info in self.workers)

    def recent(self, row: LevelStats) -> Totals:
        """The activity totals of a row's queue and level (every level of the queue on
        the sorted backend, whose rows have level ``*``)."""
        if row.level == "*":
            return self.activity.combined(row.queue).totals
        return self.activity.of(row.queue, row.level).totals

    def as_dict(self) -> dict[str, Any]:
        """:meth:`Stats.as_dict`, each level with its ``live_workers``, ``done``,
        ``retried`` and ``dead`` counts and whether its queue is ``paused``, and the
        ``workers``, ``recent_minutes`` and ``paused_queues``."""
        found = self.stats.as_dict()
        for row, shown in zip(self.stats.levels, found["levels"], strict=True):
            totals = self.recent(row)
            shown.update(live_workers=self.serving(row.queue), done=totals.done,
                         retried=totals.retried, dead=totals.dead,
                         paused=row.queue in self.paused)  # fmt: skip
        found["paused_queues"] = sorted(self.paused)
        found["recent_minutes"] = self.activity.minutes
        found["workers"] = [info.as_dict() for info in self.workers]
        found["busiest_keys"] = [row.as_dict() for row in self.keys]
        return found


async def busiest_keys(app: App, top: int = BUSIEST_KEYS) -> list[KeyStats]:
    """The ``top`` fairness keys of ``app``'s queues with the most jobs waiting and
    running, busiest first, with the ``key_concurrency`` of their tasks running.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    limits = {
        name: task.key_concurrency for name, task in app.tasks.items() if task.key_concurrency
    }
    return await app.store.busiest_keys(app.queues, top, limits)


async def stats_report(app: App, minutes: int = RECENT_MINUTES) -> StatsReport:
    """:func:`queue_stats`, :func:`live_workers`, :func:`activity`, the
    :data:`BUSIEST_KEYS` busiest fairness keys of ``app`` and its paused queues.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    limits = {
        name: task.key_concurrency for name, task in app.tasks.items() if task.key_concurrency
    }
    keys = await app.store.busiest_keys(app.queues, BUSIEST_KEYS, limits)
    return StatsReport(
        await queue_stats(app), await live_workers(app), await activity(app, minutes), keys,
        frozenset(await app.store.paused()),
    )  # fmt: skip
