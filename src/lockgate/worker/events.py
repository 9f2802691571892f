"""What a worker tells the code that watches it, job by job: metrics, the activity counts
of the dashboard, job logs.

A watcher implements :class:`JobWatcher` and is added to ``Worker.watchers`` before the
worker runs. Its calls happen on the worker's event loop (``settled`` also from a pool
thread, for a sync run abandoned at a forced stop) and must be quick and thread-safe
(count, note, queue for later): I/O belongs in a loop of the watcher's own. A watcher that raises is
logged and never stops the worker or its jobs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from lockgate.backend.broker import Delivery
    from lockgate.worker.runner import Ending

from lockgate.core.logs import get_logger

log = get_logger(__name__)


class JobWatcher(Protocol):
    """Told of each job a worker starts and settles."""

    def started(self, delivery: Delivery, now: float) -> None:
        """A run began at Unix time ``now``, its task about to be called (its wait ends).

        A run put back unrun (rate limited, its claim held elsewhere, an unknown task)
        never begins; nor does one that ends unrun (a duplicate of work done, expired,
        undecodable, wrong arguments): ``settled`` alone tells of those, with
        ``ending.started`` 0."""

    def settled(self, ending: Ending, owned: bool) -> None:
        """An ending landed in Redis; ``owned`` is False when another worker had taken the
        job over (a zombie's settle, which changed nothing)."""


class Watchers:
    """The watchers of one worker; each call reaches every one, errors logged."""

    def __init__(self) -> None:
        self._watchers: list[JobWatcher] = []

    def add(self, watcher: JobWatcher) -> None:
        """Watch the worker's jobs from now on."""
        self._watchers.append(watcher)

    def __len__(self) -> int:
        return len(self._watchers)

    def __bool__(self) -> bool:  # asked twice per job: no len() call
        return bool(self._watchers)

    def started(self, delivery: Delivery, now: float) -> None:
        for watcher in self._watchers:
            try:
                watcher.started(delivery, now)
            except Exception:
                log.exception("a job watcher failed on job %s", delivery.job_id)

    def settled(self, ending: Ending, owned: bool) -> None:
        for watcher in self._watchers:
            try:
                watcher.settled(ending, owned)
            except Exception:
                log.exception("a job watcher failed on job %s", ending.delivery.job_id)
