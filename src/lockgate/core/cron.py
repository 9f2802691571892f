"""Cron schedules of ``@app.cron`` tasks: parsing, ticks, and each tick's job id.

Pure: no I/O. A :class:`Schedule` is a cron expression read in an explicit time zone
(UTC unless the task says otherwise); a *tick* is a moment it names, an aware datetime
in UTC.
Each tick becomes one job, ``cron:<task>:<tick in UTC>``, enqueued with a once-only key
(``Keys.tick``) that the enqueue script takes with ``SET NX PX`` in the same call: however
many workers run the scheduler, and however late one of them comes, a tick is enqueued
once. The job's own id stops being a duplicate when the job ends; the once-only key lasts
:meth:`Schedule.once_ttl` (twice the gap to the next tick, at least a minute), longer than
any scheduler looks back (only ticks up to the next one are ever enqueued).

The parser is cronsim, not croniter (both on PyPI, both maintained):

- DST. cronsim follows Debian's cron: a daily or coarser job whose local time falls in
  the hour skipped in spring runs when the clock jumps, and one in the hour repeated in
  autumn runs once. croniter 7.0 yields ``30 1 * * *`` twice on such a day (01:30 EDT
  and 01:30 EST), which here would be two ticks, two jobs of a daily task. Jobs that run
  more often than hourly follow real time in both.
- It is typed (``py.typed``; mypy strict needs no stub or ignore), built on ``zoneinfo``,
  requires Python 3.11 like lockgate, and has no dependencies. croniter brings
  python-dateutil and six, has no type hints, and its DST handling has a long record of
  bug reports (taichino/croniter#48, #82, #147; pallets-eco/croniter#25).
- Expressions have five fields, or six with seconds first (``*/10 * * * * *``), plus
  ``L``, ``LW``, ``5L`` and ``MON#2``; ``@daily`` and the like are not accepted.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from types import MappingProxyType
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from lockgate.core.arguments import Schema
from lockgate.core.codec import check_job_id
from lockgate.errors import ConfigError, InvalidArguments, SerializationError

MIN_ONCE_TTL = 60.0  # seconds a tick's once-only key lasts at least (clock skew margin)
NO_NEXT_TTL = 400 * 86400.0  # a tick with no next one within cronsim's 50-year horizon
_PROBE = datetime(2000, 1, 1, tzinfo=UTC)  # any moment: parsing does not depend on it


def stamp(tick: datetime) -> str:
    """A tick as it appears in job ids and keys: UTC, ISO 8601, whole seconds."""
    return tick.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def zone(tz: str | tzinfo, task: str) -> tzinfo:
    """The time zone a schedule is read in: ``"UTC"`` (needs no tz database), an IANA
    name, a ``zoneinfo.ZoneInfo`` or a fixed ``datetime.timezone``.

    Raises:
        ConfigError: an unknown name, or another kind of tzinfo (pytz, dateutil).
    """
    if tz == "UTC":
        return UTC
    if isinstance(tz, ZoneInfo | timezone):
        return tz
    if isinstance(tz, str):
        try:
            return ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    raise ConfigError(f"cron task {task!r}: unknown time zone {tz!r} (an IANA name such as "
                      f"'Europe/Paris', or a zoneinfo.ZoneInfo)")  # fmt: skip


@dataclass(frozen=True)
class Schedule:
    """When a cron task runs: its cron expression read in its time zone.

    Build one with :meth:`parse`, which checks it.

    Attributes:
        task: the task's name.
        expression: the cron expression.
        tz: the time zone the expression is read in.
        args: the positional arguments each tick's job gets.
        kwargs: the keyword arguments each tick's job gets.
    """

    task: str
    expression: str
    tz: tzinfo = field(default=UTC)
    args: tuple[Any, ...] = field(default=(), hash=False)
    kwargs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), hash=False)

    @classmethod
    def parse(
        cls,
        task: str,
        expression: str,
        tz: str | tzinfo = "UTC",
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Schedule:
        """Check a task's schedule (its arguments are checked by :func:`check_arguments`).

        Raises:
            ConfigError: the expression does not parse or never fires, the time zone is
                unknown, or the task's name makes tick job ids too long; each names the
                task.
        """
        if not isinstance(expression, str):
            raise ConfigError(f"cron task {task!r}: the expression must be a string, "
                              f"got {expression!r}")  # fmt: skip
        if not isinstance(args, tuple | list) or not isinstance(kwargs, Mapping | None):
            raise ConfigError(f"cron task {task!r}: args must be a tuple and kwargs a dict, "
                              f"got {args!r} and {kwargs!r}")  # fmt: skip
        fixed = MappingProxyType(dict(kwargs or {}))
        schedule = cls(task, expression, zone(tz, task), tuple(args), fixed)
        try:
            CronSim(expression, _PROBE)
        except CronSimError as e:
            raise ConfigError(f"cron task {task!r}: bad cron expression {expression!r}: {e}") from e
        if schedule.next(_PROBE) is None:
            raise ConfigError(f"cron task {task!r}: {expression!r} never fires")
        try:
            check_job_id(schedule.job_id(_PROBE))
        except SerializationError as e:
            raise ConfigError(f"cron task {task!r}: its name is too long for job ids") from e
        return schedule

    def previous(self, now: datetime) -> datetime | None:
        """The latest tick at or before ``now`` (naive means UTC), in UTC; None when none
        is within 50 years."""
        start = _utc(now).replace(microsecond=0) + timedelta(seconds=1)
        # Reverse iteration yields ticks strictly before its start, a second after now.
        return self._first(start, reverse=True)

    def next(self, now: datetime) -> datetime | None:
        """The first tick after ``now`` (naive means UTC), in UTC; None when none is within
        50 years."""
        return self._first(_utc(now), reverse=False)

    def once_ttl(self, tick: datetime) -> float:
        """Seconds the once-only key of ``tick`` lasts: twice the gap to the next tick, at
        least :data:`MIN_ONCE_TTL`. A scheduler enqueues a tick only until the next one
        comes, so the key outlives every try, with a margin for clocks that disagree."""
        following = self.next(tick)
        if following is None:
            return NO_NEXT_TTL
        return max(MIN_ONCE_TTL, 2 * (following - _utc(tick)).total_seconds())

    def job_id(self, tick: datetime) -> str:
        """The job id of a tick: ``cron:<task>:<tick in UTC>``."""
        return f"cron:{self.task}:{stamp(tick)}"

    def _first(self, start: datetime, *, reverse: bool) -> datetime | None:
        # cronsim reads the fields in the zone of the datetime it is given. Ticks come
        # back in UTC: two datetimes of one ZoneInfo compare and subtract as wall times,
        # fold ignored, so the two 01:30 of an autumn night would be one tick.
        try:
            tick = next(CronSim(self.expression, start.astimezone(self.tz), reverse=reverse))
        except StopIteration:  # cronsim looks 50 years ahead (or back) at most
            return None
        return tick.astimezone(UTC)


def check_arguments(
    fn: Callable[..., object], task: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> None:
    """A scheduler calls a cron task with its schedule's ``args`` and ``kwargs``: refuse
    them, at declaration, when they do not fit the task as an enqueue would.

    Raises:
        ConfigError: they do not bind to ``fn``'s parameters, or a value does not fit its
            parameter's annotation.
        SerializationError: a value would not arrive as it is (see
            :mod:`lockgate.core.arguments`).
    """
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to read (some builtins): trust it
        return
    try:
        Schema(task, fn, signature).check(args, kwargs)
    except InvalidArguments as e:
        given = (
            "no arguments" if not args and not kwargs else f"args={args!r}, kwargs={dict(kwargs)!r}"
        )
        raise ConfigError(
            f"cron task {task!r} is called with {given}, which do not fit it: {e} "
            "(give its arguments with @app.cron(..., args=(...), kwargs={...}))"
        ) from None


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
