"""Activity counts: what the workers of a namespace did, per queue, level and minute.

Each worker counts the runs it ends and the waits of the jobs it starts
(:class:`lockgate.worker.activity.ActivityRecorder`, a job watcher); its registry loop
(:mod:`lockgate.worker.registry`) adds the counts to Redis every couple of seconds, one key per
minute (:meth:`lockgate.backend.keys.Keys.activity`), and :func:`lockgate.inspect.activity` reads
a window of minutes back as an :class:`Activity`.

What is counted, per queue and level:

- ``done``: a run that succeeded;
- ``retried``: an attempt failed and the job will run again. A job put back unrun (another
  worker holds its claim, or it is rate limited) spent no attempt and is not counted;
- ``dead``: a final failure: the job went to the dead-letter queue;
- ``cancelled``: ended by ``App.cancel``, or expired before it started;
- the wait of each job's first attempt, from its enqueue to its start, in a histogram of
  fixed log-spaced buckets (:data:`BOUNDS`). A retry's wait includes its backoff, so it is
  not counted (the same rule as the ``lockgate_job_wait_seconds`` metric).

A duplicate acknowledged without running is not counted, nor is a zombie's settle (it
changed nothing). A count goes to the minute the run ended in on the server's clock, not
the worker's: a worker's clock may be minutes off, and its counts would then land outside
every reader's window. The worker keeps its counts by its own minute, and sends each
minute's with its age, how long before the send the minute's last run could have ended
(:func:`batches`, a duration on the worker's clock, so its error drops out); the registry
script places them at the server's time less that age. A count lands at most a heartbeat
period (2 s) late, a minute late for counts held back while Redis was down. The activity
keys a script touches must be in its KEYS, so each batch brings the keys of
:data:`CANDIDATES` minutes around the worker's guess of the server's minute, and the
script picks one; a batch whose minute is none of them (the guess was off, once) is sent
again with a better one. Pure: counting, buckets, percentiles and summaries; no I/O.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

Stat = Literal["done", "retried", "dead", "cancelled"]
STATS: tuple[Stat, ...] = ("done", "retried", "dead", "cancelled")
WAIT = "w"  # a wait's counter is named ``w<bucket>``

MINUTE = 60
# Minutes a minute's counts are kept in Redis; a worker that cannot reach Redis holds its
# counts back that long at most (older ones would land in a key that is already gone).
KEEP_MINUTES = 120
BUCKETS_PER_DECADE = 10  # neighbouring bounds differ by 26%: a percentile is that close
# Upper bounds of the wait buckets, in seconds: 1 ms to 100,000 s (27.8 h), log-spaced.
# Bucket i holds the waits in (BOUNDS[i - 1], BOUNDS[i]]; bucket len(BOUNDS) those above.
BOUNDS: tuple[float, ...] = tuple(
    0.001 * 10 ** (i / BUCKETS_PER_DECADE) for i in range(8 * BUCKETS_PER_DECADE + 1)
)

# Per minute (Unix time // 60), counter name -> amount.
Counts = dict[int, dict[str, int]]
# Activity keys a batch of counts brings: its guessed minute on the server's clock, and
# the minutes before and after it (see lua/_activity.lua).
CANDIDATES = 3


@dataclass(frozen=True, slots=True)
class Batch:
    """The counts of one of a worker's minutes, on their way to the server's minute.

    Attributes:
        minute: the worker's minute (its clock) they were counted in.
        age_ms: how long before the send the minute's last count could have been made
            (the worker's clock: a duration).
        first: the first of the :data:`CANDIDATES` server minutes offered to the script.
        counters: counter name -> amount.
    """

    minute: int
    age_ms: int
    first: int
    counters: Mapping[str, int]


def batches(counts: Mapping[int, Mapping[str, int]], now: float, offset: float) -> list[Batch]:
    """The batches of ``counts`` sent at Unix time ``now`` (the worker's clock), oldest
    first, each with its candidate minutes around the server's minute guessed with
    ``offset`` (the server's clock less the worker's, in seconds, as last seen).

    A minute's counts are placed at the latest time any of them could have been made
    (the minute's end, or ``now`` for the current one): most were counted since the last
    heartbeat, a couple of seconds before.
    """
    found = []
    for minute, counters in sorted(counts.items()):
        if not counters:
            continue
        latest = min((minute + 1) * MINUTE - 0.001, now)
        age = max(0.0, now - latest)
        guess = minute_of(now + offset - age)
        found.append(Batch(minute, round(age * 1000), guess - 1, dict(counters)))
    return found


def minute_of(unix: float) -> int:
    """The minute (Unix time // 60) that Unix time ``unix`` falls in."""
    return math.floor(unix / MINUTE)


def bucket_of(seconds: float) -> int:
    """The wait bucket of ``seconds``: i with ``BOUNDS[i - 1] < seconds <= BOUNDS[i]``
    (0 for a wait of at most 1 ms, ``len(BOUNDS)`` above the last bound)."""
    return bisect.bisect_left(BOUNDS, seconds)


def percentile(histogram: Mapping[int, int], q: float) -> float | None:
    """The ``q`` quantile (0 to 1) of the waits counted in ``histogram``, in seconds.

    Within the bucket that holds it, the value is interpolated on a log scale (linearly
    in the first bucket, which starts at 0); above the last bound, the last bound is all
    that is known and is returned.

    Args:
        histogram: bucket index (see :func:`bucket_of`) -> how many waits fell in it.
        q: 0.5 for the median, 0.99 for p99.

    Returns:
        Seconds, or None when the histogram is empty.
    """
    filled = sorted((index, n) for index, n in histogram.items() if n > 0)
    total = sum(n for _, n in filled)
    if not total:
        return None
    rank = min(max(q, 0.0), 1.0) * total
    seen = 0
    for index, n in filled:
        if seen + n >= rank:
            return _within(index, (rank - seen) / n)
        seen += n
    return _within(filled[-1][0], 1.0)  # pragma: no cover - float rounding only


def _within(index: int, fraction: float) -> float:
    if index >= len(BOUNDS):
        return BOUNDS[-1]
    upper = BOUNDS[index]
    if index == 0:
        return upper * fraction
    lower = BOUNDS[index - 1]
    return float(lower * (upper / lower) ** fraction)


def counter_name(stat: str, queue: str, level: str) -> str:
    """The name of one counter: ``stat:level:queue`` (level and queue names hold no
    colon; ``stat`` is one of :data:`STATS` or ``w<bucket>``)."""
    return f"{stat}:{level}:{queue}"


def parse_counter(name: str) -> tuple[str, str, str] | None:
    """``(stat, queue, level)`` of a counter name, None when it is not one."""
    parts = name.split(":", 2)
    if len(parts) != 3 or not all(parts):
        return None
    stat, level, queue = parts
    return stat, queue, level


@dataclass(frozen=True, slots=True, kw_only=True)
class Counted:
    """What was counted over a span: a minute (:class:`Minute`) or a window (:class:`Totals`).

    Attributes:
        done: runs that succeeded.
        retried: attempts that failed and will run again.
        dead: final failures (dead-lettered).
        cancelled: jobs cancelled or expired.
        waits: the wait histogram, bucket index -> jobs (see :data:`BOUNDS`).
    """

    done: int = 0
    retried: int = 0
    dead: int = 0
    cancelled: int = 0
    waits: Mapping[int, int] = field(default_factory=dict)

    @property
    def wait_p50(self) -> float | None:
        """Median wait of the jobs started in the span, seconds (None: none started)."""
        return percentile(self.waits, 0.5)

    @property
    def wait_p99(self) -> float | None:
        """99th percentile of the waits, seconds (None: none started)."""
        return percentile(self.waits, 0.99)

    def _counts(self) -> dict[str, Any]:
        return {
            "done": self.done, "retried": self.retried, "dead": self.dead,
            "cancelled": self.cancelled, "wait_p50": self.wait_p50, "wait_p99": self.wait_p99,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class Minute(Counted):
    """One minute of a queue and level (or of several, combined): its counts (see
    :class:`Counted`) and its start (UTC)."""

    start: datetime

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the histogram left out)."""
        return {"start": self.start.isoformat(), **self._counts()}


@dataclass(frozen=True, slots=True)
class Totals(Counted):
    """A queue and level's counts over a whole window (see :class:`Counted`), and the
    window's length in seconds: from its first minute's start to when it was read."""

    seconds: float

    @property
    def done_per_second(self) -> float:
        """Runs that succeeded, per second of the window."""
        return self.done / self.seconds

    @property
    def failed_per_second(self) -> float:
        """Final failures (dead-lettered), per second of the window."""
        return self.dead / self.seconds

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the histogram left out)."""
        return {
            "seconds": self.seconds, **self._counts(),
            "done_per_second": self.done_per_second,
            "failed_per_second": self.failed_per_second,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class LevelActivity:
    """One queue and level over a window: a row per minute, oldest first, and totals.

    ``queue`` and ``level`` are ``*`` when the activity of several is combined.
    """

    queue: str
    level: str
    minutes: tuple[Minute, ...]
    totals: Totals

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "queue": self.queue, "level": self.level, "totals": self.totals.as_dict(),
            "minutes": [minute.as_dict() for minute in self.minutes],
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class Activity:
    """What the workers of a namespace did over the last minutes, per queue and level.

    Attributes:
        minutes: the window's length in minutes; the current minute (partial) is its last.
        start: the start of its first minute (UTC).
        end: when it was read (UTC).
        levels: per (queue, level) that counted anything in the window.
    """

    minutes: int
    start: datetime
    end: datetime
    levels: Mapping[tuple[str, str], LevelActivity]

    @property
    def seconds(self) -> float:
        """The window's length in seconds, up to when it was read (at least 1)."""
        return max((self.end - self.start).total_seconds(), 1.0)

    def of(self, queue: str, level: str) -> LevelActivity:
        """One queue and level (all zeros when it counted nothing)."""
        found = self.levels.get((queue, level))
        return found if found is not None else self._combine(queue, level, [])

    def combined(self, queue: str | None = None) -> LevelActivity:
        """Every level of ``queue`` (of every queue when None) added up: level ``*``."""
        parts = [row for (q, _), row in self.levels.items() if queue is None or q == queue]
        return self._combine(queue or "*", "*", parts)

    def _combine(self, queue: str, level: str, parts: list[LevelActivity]) -> LevelActivity:
        starts = [self._minute_start(i) for i in range(self.minutes)]
        rows = tuple(
            _added(start, [part.minutes[i] for part in parts]) for i, start in enumerate(starts)
        )
        return LevelActivity(queue, level, rows, _totals(self.seconds, rows))

    def _minute_start(self, index: int) -> datetime:
        return datetime.fromtimestamp(self.start.timestamp() + index * MINUTE, UTC)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "minutes": self.minutes, "start": self.start.isoformat(),
            "end": self.end.isoformat(), "seconds": self.seconds,
            "levels": [row.as_dict() for row in self.levels.values()],
        }  # fmt: skip


def _added(start: datetime, rows: Iterable[Minute]) -> Minute:
    done = retried = dead = cancelled = 0
    waits: dict[int, int] = {}
    for row in rows:
        done, retried = done + row.done, retried + row.retried
        dead, cancelled = dead + row.dead, cancelled + row.cancelled
        for index, n in row.waits.items():
            waits[index] = waits.get(index, 0) + n
    return Minute(
        start=start, done=done, retried=retried, dead=dead, cancelled=cancelled, waits=waits
    )


def _totals(seconds: float, rows: Sequence[Minute]) -> Totals:
    whole = _added(datetime.fromtimestamp(0, UTC), rows)
    return Totals(
        seconds=seconds, done=whole.done, retried=whole.retried, dead=whole.dead,
        cancelled=whole.cancelled, waits=whole.waits,
    )  # fmt: skip


def _minute(start: datetime, counters: Mapping[str, int]) -> Minute:
    stats = {stat: counters.get(stat, 0) for stat in STATS}
    waits: dict[int, int] = {}
    for stat, n in counters.items():
        if stat.startswith(WAIT) and stat[len(WAIT) :].isdigit():
            waits[int(stat[len(WAIT) :])] = n
    return Minute(start=start, waits=waits, **stats)


def summarize(counts: Mapping[int, Mapping[str, int]], *, minutes: int, now: float) -> Activity:
    """The activity of the ``minutes`` minutes up to Unix time ``now`` (its minute is
    the last, partial one) from the counts of each minute, as the registry loops wrote
    them; counts outside the window and counters of unknown names are left out.

    Args:
        counts: minute (Unix time // 60) -> counter name -> amount.
        minutes: the window's length, at least 1.
        now: the end of the window (Unix time).
    """
    last = minute_of(now)
    first = last - minutes + 1
    found: dict[tuple[str, str], dict[int, dict[str, int]]] = {}
    for minute, counters in counts.items():
        if not first <= minute <= last:
            continue
        for name, amount in counters.items():
            parsed = parse_counter(name)
            if parsed is None or not amount:
                continue
            stat, queue, level = parsed
            by_stat = found.setdefault((queue, level), {}).setdefault(minute, {})
            by_stat[stat] = by_stat.get(stat, 0) + amount
    start = datetime.fromtimestamp(first * MINUTE, UTC)
    end = datetime.fromtimestamp(now, UTC)
    seconds = max(now - first * MINUTE, 1.0)
    levels: dict[tuple[str, str], LevelActivity] = {}
    for (queue, level), by_minute in sorted(found.items()):
        rows = tuple(
            _minute(datetime.fromtimestamp(m * MINUTE, UTC), by_minute.get(m, {}))
            for m in range(first, last + 1)
        )
        levels[(queue, level)] = LevelActivity(queue, level, rows, _totals(seconds, rows))
    return Activity(minutes, start, end, levels)
