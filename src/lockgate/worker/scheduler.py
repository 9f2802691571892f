"""The scheduler: enqueues the ticks of an app's ``@app.cron`` tasks.

A worker runs one beside its loop (a helper it owns and supervises, see
:mod:`lockgate.worker.loop`) for the cron tasks of the queues it serves; every worker may run
one. Each tick is enqueued with its once-only key (:mod:`lockgate.core.cron`), which the
enqueue script takes with ``SET NX PX``: the first scheduler to reach Redis creates the
job, every other one finds the key taken and creates nothing, even after the job ended.

What it enqueues: the latest tick up to now of each schedule, whenever that tick changes.
At start that is the tick before now, so after downtime the last missed tick runs once
(unless another scheduler already enqueued it) and earlier ones are skipped; then each
tick as it comes. It sleeps until the next tick of any schedule, looking at the clock at
least every :data:`MAX_SLEEP` seconds (a stepped clock, a suspended host).

Errors are not handled here: an enqueue that fails (Redis down) raises out of
:meth:`Scheduler.run`, and the owner logs it and runs it again after a capped backoff;
the tick is enqueued then (its once-only key makes a repeat harmless).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from lockgate.api.app import App
from lockgate.api.task import EnqueueResult
from lockgate.core.cron import Schedule, stamp
from lockgate.core.logs import get_logger
from lockgate.core.message import Message

log = get_logger(__name__)
MAX_SLEEP = 60.0  # seconds: the longest sleep between looks at the clock
WAKE_MARGIN = 0.001  # seconds past a tick to wake, so that the tick is due when looked at

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The wall clock, as an aware UTC datetime."""
    return datetime.now(UTC)


def served(app: App, queues: Iterable[str]) -> list[Schedule]:
    """The schedules of the app's cron tasks whose queue is one of ``queues``."""
    wanted = set(queues)
    return [schedule for name, schedule in app.schedules.items() if app.tasks[name].queue in wanted]


class Scheduler:
    """Enqueues the ticks of some cron schedules, each once however many schedulers run.

    Args:
        app: the app whose cron tasks these are.
        schedules: the schedules to follow (:func:`served` picks a worker's).
        stop: set to make :meth:`run` return (a worker passes its stop event).
        clock: the wall clock (tests give their own).
    """

    def __init__(
        self,
        app: App,
        schedules: Sequence[Schedule],
        *,
        stop: asyncio.Event | None = None,
        clock: Clock = utc_now,
    ) -> None:
        self.app = app
        self.schedules = tuple(schedules)
        self.stop = stop if stop is not None else asyncio.Event()
        self.clock = clock
        self._sent: dict[str, datetime] = {}  # task -> the latest tick enqueued (or taken)

    def message(self, schedule: Schedule, tick: datetime) -> Message:
        """The job of one tick, with its once-only key."""
        task = self.app.tasks[schedule.task]
        message = task.using(job_id=schedule.job_id(tick)).message(
            *schedule.args, **schedule.kwargs
        )
        job = message.job
        # In the job's partition: the enqueue script takes it with the job.
        once_key = self.app.store.layout.for_job(job.id, job.key).tick(schedule.task, stamp(tick))
        once_ttl_ms = max(1, round(schedule.once_ttl(tick) * 1000))
        return replace(message, once=(once_key, once_ttl_ms))

    async def enqueue_due(self, now: datetime | None = None) -> list[EnqueueResult]:
        """Enqueue the latest tick up to ``now`` of each schedule, unless this scheduler
        already did (one round trip for all of them).

        Returns:
            What each enqueue did: ``created`` is False for a tick that another scheduler
            (or this one, before a restart) enqueued already.

        Raises:
            ConnectionFailed: Redis cannot be reached (nothing is marked as sent).
        """
        now = now if now is not None else self.clock()
        due: list[tuple[Schedule, datetime]] = []
        for schedule in self.schedules:
            tick = schedule.previous(now)
            if tick is not None and self._sent.get(schedule.task) != tick:
                due.append((schedule, tick))
        if not due:
            return []
        results = await self.app.enqueue_many_async(self.message(s, t) for s, t in due)
        for (schedule, tick), result in zip(due, results, strict=True):
            self._sent[schedule.task] = tick
            if result.created:
                log.info("cron task %s: tick %s enqueued", schedule.task, stamp(tick))
            else:
                log.debug("cron task %s: tick %s was enqueued already", schedule.task,
                          stamp(tick))  # fmt: skip
        return results

    def next_tick(self, now: datetime) -> datetime | None:
        """The first tick after ``now`` of any schedule (None: none within 50 years)."""
        ticks = [t for s in self.schedules if (t := s.next(now)) is not None]
        return min(ticks, default=None)

    async def run(self) -> None:
        """Enqueue ticks as they come until ``stop`` is set.

        Raises:
            LockgateError: an enqueue failed (the owner logs it and runs this again).
        """
        if self.schedules and not self._sent:
            log.info("scheduler: %d cron tasks (%s)", len(self.schedules),
                     ", ".join(s.task for s in self.schedules))  # fmt: skip
        while not self.stop.is_set():
            now = self.clock()
            await self.enqueue_due(now)
            wake = self.next_tick(now)
            delay = MAX_SLEEP
            if wake is not None:
                delay = min(delay, (wake - self.clock()).total_seconds() + WAKE_MARGIN)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), max(0.0, delay))
