"""The dead-letter queue: what goes into it; listing, replaying, trimming, purging it.

The documented path of :mod:`lockgate.ops.deadletter`, which holds the code."""

from lockgate.backend.dead_store import record
from lockgate.ops.deadletter import (
    DETAILS,
    FIELDS,
    STREAM_ID,
    DeadLetter,
    Replayed,
    count_dead,
    list_dead,
    purge,
    replay,
    show_dead,
    trim,
    trim_args,
)

__all__ = [
    "DETAILS",
    "FIELDS",
    "STREAM_ID",
    "DeadLetter",
    "Replayed",
    "count_dead",
    "list_dead",
    "purge",
    "record",
    "replay",
    "show_dead",
    "trim",
    "trim_args",
]
