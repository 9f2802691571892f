"""A worker's loop of the registry: its heartbeats and activity counts, every
:data:`HEARTBEAT_EVERY` seconds (see :mod:`lockgate.backend.registry` for the records)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.metadata
import itertools
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from lockgate.backend.faults import classify
from lockgate.backend.registry import JOBS_LISTED, WorkerInfo
from lockgate.core.logs import get_logger
from lockgate.errors import LockgateError
from lockgate.worker.activity import (
    ActivityRecorder,
)

if TYPE_CHECKING:
    from lockgate.api.app import App
    from lockgate.backend.broker import Delivery
    from lockgate.worker.runner import Ending

log = get_logger(__name__)
HEARTBEAT_EVERY = 2.0  # seconds between a worker's heartbeats (and activity flushes)
EXPIRES_AFTER = 3 * HEARTBEAT_EVERY  # a worker that stopped heartbeating drops out then
LAST_FLUSH_TIMEOUT = 5.0  # seconds a clean stop gives its last flush


@functools.cache
def lockgate_version() -> str:
    """The installed lockgate's version ("unknown" when it is not installed)."""
    try:
        return importlib.metadata.version("lockgate")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class RunStarts:
    """A watcher noting when each run of this worker started, for its registry entry
    (the dashboard's running jobs and job pages show it; the streams backend keeps no
    start of its own). A run is forgotten when it settles, or when its run ended without
    an ending that settles (an abandoned run's dropped ending, a runner's bug: the
    worker's loop says so, :meth:`ended`), so none stays listed."""

    def __init__(self) -> None:
        self._starts: dict[tuple[str, str], tuple[str, float]] = {}

    def started(self, delivery: Delivery, now: float) -> None:
        """Note the run's start."""
        self._starts[delivery.source, delivery.ref] = (delivery.job_id, now)

    def settled(self, ending: Ending, owned: bool) -> None:
        """Forget the run."""
        self._starts.pop((ending.delivery.source, ending.delivery.ref), None)

    def ended(self, delivery: Delivery | None) -> None:
        """Forget the run of ``delivery``, whose task ended (None: none)."""
        if delivery is not None:
            self._starts.pop((delivery.source, delivery.ref), None)

    def listed(self, most: int) -> tuple[tuple[str, float], ...]:
        """The runs going on (job id, start), the first ``most`` started."""
        return tuple(itertools.islice(self._starts.values(), most))


class Registry:
    """A worker's entry in the registry and its activity counts; owned by the worker.

    The worker adds :attr:`recorder` to its watchers, runs :meth:`run` as the supervised
    helper ``registry``, and calls :meth:`close` on a clean stop, once its last settles
    landed and the helper ended.

    Args:
        app: the worker's app.
        name: the worker's name.
        queues: the queues it serves.
        concurrency: how many jobs it runs at once at most.
        running: how many jobs it runs now (asked at each heartbeat).
    """

    def __init__(
        self,
        app: App,
        name: str,
        queues: Sequence[str],
        concurrency: int,
        running: Callable[[], int],
    ) -> None:
        self._app = app
        self._name = name
        self._queues = tuple(queues)
        self._concurrency = concurrency
        self._running = running
        self._started: float | None = None  # set when the loop first runs
        self._listed = False  # a heartbeat landed: there is an entry to remove
        self.recorder = ActivityRecorder(app.levels.names)
        self.runs = RunStarts()

    def info(self, now: float) -> WorkerInfo:
        """This worker as a heartbeat at Unix time ``now`` describes it."""
        return WorkerInfo(
            name=self._name, host=socket.gethostname(), pid=os.getpid(), queues=self._queues,
            concurrency=self._concurrency, running=self._running(),
            started_at=datetime.fromtimestamp(self._started or now, UTC),
            last_heartbeat=datetime.fromtimestamp(now, UTC), version=lockgate_version(),
            jobs=self.runs.listed(JOBS_LISTED),
        )  # fmt: skip

    async def run(self, closing: asyncio.Event) -> None:
        """Heartbeat and send the counts every :data:`HEARTBEAT_EVERY` seconds until
        ``closing`` is set (the first at once).

        Raises:
            BrokerError: Redis refused the flush or could not be reached (the counts are
                kept; the worker's supervision restarts the loop).
        """
        if self._started is None:
            self._started = time.time()
        while not closing.is_set():
            await self.flush()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(closing.wait(), HEARTBEAT_EVERY)

    async def flush(self) -> None:
        """One heartbeat with the counts so far, in one round trip.

        Raises:
            BrokerError: as for :meth:`run`.
        """
        counts = self.recorder.take()
        try:
            left = await self._app.store.registry.heartbeat_worker(
                self.info(time.time()), EXPIRES_AFTER, counts
            )
        except BaseException:
            self.recorder.give_back(counts)
            raise
        self.recorder.give_back(left)  # not placed (a clock that jumped): the next time
        self._listed = True

    async def close(self, timeout: float = LAST_FLUSH_TIMEOUT) -> None:
        """A clean stop: send the last counts and remove the entry (one round trip, at
        most ``timeout`` seconds). Never raises: a failure is logged, and the entry then
        expires by itself."""
        if not self._listed and not len(self.recorder):
            return  # never listed: the worker stopped at once, or Redis refused it
        last = asyncio.ensure_future(self._last_flush())
        done, _ = await asyncio.wait({last}, timeout=timeout)
        if not done:
            last.cancel()
            log.warning("worker %s: the registry did not answer within %.0fs; its entry "
                        "expires by itself", self._name, timeout)  # fmt: skip

    async def _last_flush(self) -> None:
        counts = self.recorder.take()
        try:
            left = await self._app.store.registry.remove_worker(self._name, counts)
            if left:
                log.warning("worker %s: %d activity counts are lost (its clock moved)",
                            self._name, sum(len(c) for c in left.values()))  # fmt: skip
        except LockgateError as e:
            # A refusal that cannot heal already stops the worker, with its own message.
            level = logging.DEBUG if classify(e) == "fatal" else logging.WARNING
            log.log(level, "worker %s: could not leave the registry (%s); its entry "
                    "expires within %.0fs, %d activity counts are lost", self._name, e,
                    EXPIRES_AFTER, sum(len(c) for c in counts.values()))  # fmt: skip
        except Exception as e:  # a bug: logged, the stop goes on
            log.exception("worker %s: leaving the registry failed (%r)", self._name, e)
