"""The worker's activity counter: a job watcher that counts, in memory, what its jobs did
(see :mod:`lockgate.core.activity` for what is counted and how the counts reach Redis)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lockgate.core.activity import (
    BOUNDS,
    KEEP_MINUTES,
    WAIT,
    Counts,
    Stat,
    bucket_of,
    counter_name,
    minute_of,
)
from lockgate.worker.joblog import ended_as

if TYPE_CHECKING:
    from lockgate.backend.broker import Delivery
    from lockgate.worker.runner import Ending

_COUNTED: dict[str, Stat] = {
    "succeeded": "done", "retried": "retried", "dead_lettered": "dead", "cancelled": "cancelled",
}  # fmt: skip


class ActivityRecorder:
    """A job watcher (see :mod:`lockgate.worker.events`) that counts, in memory, what a worker's
    jobs did per queue, level and minute, until its registry loop takes the counts.

    Thread-safe. Counts that could not be sent are given back and kept for
    :data:`KEEP_MINUTES` at most, so its memory stays bounded while Redis is down.

    Args:
        levels: the app's level names, in order (a delivery names its level by index).
    """

    def __init__(self, levels: Sequence[str]) -> None:
        self._levels = tuple(levels)
        self._lock = threading.Lock()
        self._counts: Counts = {}
        self._names: dict[tuple[str, str, str], str] = {}  # counter names, built once
        self._waits = [f"{WAIT}{bucket}" for bucket in range(len(BOUNDS) + 1)]

    def _level(self, index: int) -> str:
        return self._levels[index] if 0 <= index < len(self._levels) else str(index)

    def started(self, delivery: Delivery, now: float) -> None:
        """Count the wait of a job's first attempt when its run begins (after any
        put-backs; not a redelivery, which may have begun before), or when it ends unrun
        (expired, a duplicate: see :meth:`settled`)."""
        job = delivery.job
        if job is None or job.attempt != 1 or delivery.deliveries != 1:
            return
        if job.enqueued > 0:
            wait = self._waits[bucket_of(max(0.0, now - job.enqueued))]
            self.count(wait, delivery.queue, self._level(delivery.level), now)

    def settled(self, ending: Ending, owned: bool) -> None:
        """Count a run that ended done, retried, dead or cancelled (not a zombie's)."""
        ended = ended_as(ending)
        stat = _COUNTED.get(ended) if owned and ended is not None else None
        if stat is not None:
            delivery = ending.delivery
            at = ending.finished or time.time()
            self.count(stat, delivery.queue, self._level(delivery.level), at)
        if owned and ended not in (None, "put_back") and not ending.started:
            self.started(ending.delivery, ending.finished or time.time())  # its wait ended

    def count(self, stat: str, queue: str, level: str, at: float, amount: int = 1) -> None:
        """Add ``amount`` to counter ``stat`` of a queue and level, in the minute of Unix
        time ``at``."""
        key = (stat, queue, level)
        name = self._names.get(key)
        if name is None:
            name = self._names[key] = counter_name(stat, queue, level)
        minute = minute_of(at)
        with self._lock:
            fields = self._counts.get(minute)
            if fields is None:
                fields = self._counts[minute] = {}
            fields[name] = fields.get(name, 0) + amount

    def take(self) -> Counts:
        """The counts so far, which the recorder forgets (they are on their way)."""
        with self._lock:
            counts, self._counts = self._counts, {}
        return counts

    def give_back(self, counts: Counts, now: float | None = None) -> None:
        """Keep counts a flush could not send, for the next; those older than
        :data:`KEEP_MINUTES` (at Unix time ``now``) are dropped."""
        oldest = minute_of(time.time() if now is None else now) - KEEP_MINUTES
        with self._lock:
            for minute, fields in counts.items():
                mine = self._counts.setdefault(minute, {})
                for name, amount in fields.items():
                    mine[name] = mine.get(name, 0) + amount
            for minute in [m for m in self._counts if m < oldest]:
                del self._counts[minute]

    def __len__(self) -> int:
        """How many counters are held (for tests and the memory bound)."""
        with self._lock:
            return sum(len(fields) for fields in self._counts.values())
