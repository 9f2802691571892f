"""Read-only queries about queues, shared by the CLI and anything that wants numbers.

The documented path of :mod:`lockgate.ops.inspect`, which holds the code."""

from lockgate.ops.inspect import (
    RECENT_MINUTES,
    Stats,
    StatsReport,
    activity,
    live_workers,
    queue_stats,
    stats_report,
)

__all__ = [
    "RECENT_MINUTES",
    "Stats",
    "StatsReport",
    "activity",
    "live_workers",
    "queue_stats",
    "stats_report",
]
