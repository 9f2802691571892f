"""Pausing, resuming and purging a queue: shared by ``lockgate queue`` and the dashboard.

The documented path of :mod:`lockgate.ops.queues`, which holds the code."""

from lockgate.ops.queues import (
    check,
    pause,
    paused,
    purge,
    resume,
)

__all__ = [
    "check",
    "pause",
    "paused",
    "purge",
    "resume",
]
