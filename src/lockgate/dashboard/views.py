"""What the overview shows, gathered from the read-only queries and shaped for the page.

Each panel has one source: the counts :func:`lockgate.inspect.queue_stats`, throughput and
wait times :func:`lockgate.inspect.activity`, workers :func:`lockgate.inspect.live_workers`,
paused queues :func:`lockgate.queues.paused`, dead letters :mod:`lockgate.deadletter`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

from markupsafe import Markup
from starlette.concurrency import run_in_threadpool

from lockgate.api.app import App
from lockgate.backend.broker import LevelStats
from lockgate.core.activity import LevelActivity
from lockgate.dashboard.charts import COMPACT, Series, legend, line_chart
from lockgate.ops import deadletter, queues
from lockgate.ops.inspect import (
    Activity,
    KeyStats,
    WorkerInfo,
    activity,
    busiest_keys,
    live_workers,
    queue_stats,
)
from lockgate.ops.jobs import known_queues

MINUTES = 15  # the activity window of the overview's rates and charts
# Dead letters read to count them per queue and level; past that the page says so.
DEAD_SCAN = 1000


def duration(seconds: float | None) -> str:
    """``850 ms``, ``12 s``, ``4 min 3 s``, ``2 h 5 min``, ``3 d 4 h``; ``-`` for None."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    whole = int(seconds)
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "min", 60),
                                      ("min", 60, "s", 1)):  # fmt: skip
        if whole >= size:
            rest = (whole % size) // sub_size
            return f"{whole // size} {unit} {rest} {sub}" if rest else f"{whole // size} {unit}"
    return f"{whole} s"  # pragma: no cover - the loop always returns for >= 60


def rate(per_second: float | None) -> str:
    """A rate with about two significant digits: ``0``, ``0.0067``, ``0.42``, ``12.5``."""
    if per_second is None:
        return "-"
    if per_second == 0:
        return "0"
    if per_second < 0.1:
        return f"{per_second:.2g}"
    return f"{per_second:.2f}" if per_second < 10 else f"{per_second:.1f}"


def when(moment: float | datetime | None) -> str:
    """A Unix time or datetime as ``YYYY-MM-DD HH:MM:SS`` UTC; ``-`` for None."""
    if moment is None:
        return "-"
    if isinstance(moment, int | float):
        moment = datetime.fromtimestamp(moment, UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True, slots=True)
class LevelRow:
    """One queue and level."""

    level: str
    waiting: int
    running: int
    delayed: int
    dead: int
    oldest_wait: float | None
    done_rate: float
    failed_rate: float
    wait_chart: Markup
    wait_p50: float | None
    wait_p99: float | None


@dataclass(slots=True)
class QueueRow:
    """One queue: its levels, and whether it is paused (None: not known)."""

    name: str
    paused: bool | None
    levels: list[LevelRow] = field(default_factory=list)

    @property
    def waiting(self) -> int:
        """Jobs waiting on every level."""
        return sum(row.waiting for row in self.levels)


@dataclass(slots=True)
class Overview:
    """Everything the overview shows."""

    queues: list[QueueRow]
    dead_letters: int
    dead_counted: int
    delayed: int
    workers: list[WorkerInfo]
    minutes: int
    throughput_chart: Markup
    throughput_legend: list[tuple[str, str]]
    wait_legend: list[tuple[str, str]]
    now: float
    keys: list[KeyStats] = field(default_factory=list)


async def overview(app: App) -> Overview:
    """Gather the overview of ``app``.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    paused = await queues.paused(app)
    workers = await live_workers(app)
    recent = await activity(app, minutes=MINUTES)
    # Read again for every overview: a queue shows once a producer or worker of it
    # called Redis, a worker serves it, it is paused, or a job ran in it, without a
    # restart of the dashboard.
    names = await known_queues(
        app, (q for w in workers for q in w.queues), paused, (q for q, _ in recent.levels)
    )
    stats = await queue_stats(app, names)
    keys = await busiest_keys(app)
    letters = await run_in_threadpool(deadletter.list_dead, app, DEAD_SCAN)
    dead_by = Counter((letter.queue, letter.level) for letter in letters)
    rows = {name: QueueRow(name, name in paused) for name in names}
    for row in stats.levels:
        if row.level == "*":  # the sorted backend: one row per queue, every level
            flow = recent.combined(row.queue)
            dead = sum(n for (queue, _), n in dead_by.items() if queue == row.queue)
        else:
            flow = recent.of(row.queue, row.level)
            dead = dead_by[(row.queue, row.level)]
        rows.setdefault(row.queue, QueueRow(row.queue, row.queue in paused)).levels.append(
            _level_row(row, dead, flow)
        )
    everything = recent.combined()
    totals = [
        Series("done/s", _per_second([m.done for m in everything.minutes], recent)),
        Series("failed/s", _per_second([m.dead for m in everything.minutes], recent)),
    ]
    chart = line_chart(totals, unit="/s", span=f"-{MINUTES} min", label="jobs per second")
    return Overview(
        queues=list(rows.values()),
        dead_letters=stats.dead_letters,
        dead_counted=len(letters),
        delayed=sum(row.delayed for row in stats.levels),
        workers=workers,
        minutes=MINUTES,
        throughput_chart=Markup(chart),
        throughput_legend=legend(totals),
        wait_legend=legend([Series("p50", []), Series("p99", [])]),
        now=recent.end.timestamp(),  # the server's clock, as the workers' times
        keys=keys,
    )


def _level_row(row: LevelStats, dead: int, flow: LevelActivity) -> LevelRow:
    p50 = [minute.wait_p50 for minute in flow.minutes]
    p99 = [minute.wait_p99 for minute in flow.minutes]
    waits = [Series("p50", p50), Series("p99", p99)]
    label = f"wait p50 and p99 of {row.queue}/{row.level}"
    chart = line_chart(waits, unit=" s", label=label, frame=COMPACT)
    return LevelRow(
        level=row.level,
        waiting=row.waiting,
        running=row.pending,
        delayed=row.delayed,
        dead=dead,
        oldest_wait=None if row.oldest_wait_ms is None else row.oldest_wait_ms / 1000,
        done_rate=flow.totals.done_per_second,
        failed_rate=flow.totals.failed_per_second,
        wait_chart=Markup(chart) if any(v is not None for v in p99) else Markup(""),
        wait_p50=flow.totals.wait_p50,
        wait_p99=flow.totals.wait_p99,
    )


def _per_second(counts: list[int], recent: Activity) -> list[float | None]:
    """Per-minute counts as rates; the last minute is partial: divided by its seconds."""
    rates: list[float | None] = [n / 60 for n in counts]
    if counts:
        elapsed = recent.end.timestamp() - recent.start.timestamp() - 60 * (len(counts) - 1)
        rates[-1] = counts[-1] / min(max(elapsed, 1.0), 60.0)
    return rates
