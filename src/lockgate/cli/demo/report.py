"""What ``lockgate demo`` records and shows: the runs' numbers, the live progress line,
and the results table (pure, but for :class:`Progress`, which writes to the streams it
is given).

The scenario (:mod:`lockgate.cli.demo.scenario`) fills a :class:`Run` per run; the table
here and the figure (:mod:`lockgate.cli.demo.plot`) both read it, and neither imports
the scenario.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TextIO

from lockgate.cli.tables import Column, display_width, fit, render, wrap


@dataclass
class Run:
    """What one run recorded: per level, start times (epoch seconds) and waits (seconds),
    the i-th wait belonging to the i-th start; ``began`` is when its worker started."""

    name: str
    starts: dict[str, list[float]] = field(default_factory=dict)
    waits: dict[str, list[float]] = field(default_factory=dict)
    elapsed: float = 0.0
    began: float = 0.0

    def record(self, level: str, start: float, wait: float) -> None:
        self.starts.setdefault(level, []).append(start)
        self.waits.setdefault(level, []).append(wait)

    def since_began(self, level: str) -> list[float]:
        """The level's start times, in seconds since the run's worker started."""
        return [start - self.began for start in self.starts.get(level, [])]

    @property
    def done(self) -> int:
        return sum(len(s) for s in self.starts.values())


def shares_while_all_busy(starts: dict[str, list[float]], levels: list[str]) -> dict[str, float]:
    """Each level's share of the jobs started while every level had work.

    The window opens when the last level to arrive starts its first job and closes when
    the first level to finish starts its last one.
    """
    if any(not starts.get(level) for level in levels):
        return {level: 0.0 for level in levels}
    begin = max(min(starts[level]) for level in levels)
    end = min(max(starts[level]) for level in levels)
    counts = {level: sum(1 for t in starts[level] if begin <= t <= end) for level in levels}
    total = sum(counts.values()) or 1
    return {level: counts[level] / total for level in levels}


def percentile_ms(values: list[float], q: int) -> float:
    """The q-th percentile of seconds, in milliseconds."""
    if len(values) < 2:
        return values[0] * 1000 if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1000


class Progress:
    """Shows how far the runs are.

    A line per finished run goes to ``out``. While a run plays, one line on ``err`` is
    rewritten in place (``\\r``), only when ``live``: on a terminal; in a log file or a
    pipe those rewrites would be noise.

    Args:
        out: where the finished runs' lines go.
        err: where the live line goes.
        live: whether to show the live line (``err`` is a terminal).
        width: the terminal's width; the live line stays narrower, so it never wraps.
    """

    def __init__(self, out: TextIO, err: TextIO, *, live: bool, width: int) -> None:
        self.out = out
        self.err = err
        self.live = live
        self.width = width
        self._shown = 0  # cells of the live line on screen

    def update(self, name: str, done: int, total: int) -> None:
        """Show that run ``name`` has done ``done`` of ``total`` jobs."""
        if not self.live:
            return
        line = fit(progress_line(name, done, total, self.width - 1), self.width - 1)
        shown = display_width(line)
        # Spaces over what a longer previous line left behind.
        self.err.write("\r" + line + " " * max(self._shown - shown, 0))
        self.err.flush()
        self._shown = shown

    def clear(self) -> None:
        """Wipe the live line (before anything else is written, an error included)."""
        if self._shown:
            self.err.write("\r" + " " * self._shown + "\r")
            self.err.flush()
            self._shown = 0

    def finished(self, run: Run) -> None:
        """Replace the live line with the run's one-line summary."""
        self.clear()
        self.out.write(finished_line(run) + "\n")
        self.out.flush()


def progress_line(name: str, done: int, total: int, width: int = 80) -> str:
    """The live line: the run's name, a bar and the jobs done, the bar (at most 30
    wide) narrowed to keep the line within ``width`` (pure)."""
    head, tail = f"{name:>14} [", f"] {done}/{total}"
    bar = max(min(30, width - len(head) - len(tail)), 0)
    filled = bar * min(done, total) // max(total, 1)
    return f"{head}{'#' * filled}{'.' * (bar - filled)}{tail}"


def finished_line(run: Run) -> str:
    """The line a finished run leaves (pure)."""
    return f"{run.name:>14}  {run.done} jobs in {run.elapsed:.1f}s"


TITLE = "lockgate demo: 5,000 low + 500 normal + 100 critical, concurrency 8"
# On a narrow terminal the long headers of the numbers wrap first (down to the width of
# the numbers), then the names are cut.
COLUMNS = (
    Column("run", shrink="truncate", min_width=6, priority=1),
    Column("level", shrink="truncate", min_width=4, priority=1),
    Column("done", align="right"),
    Column("p50 wait ms", align="right", shrink="wrap", min_width=7),
    Column("p99 wait ms", align="right", shrink="wrap", min_width=7),
    Column("share while all busy", align="right", shrink="wrap", min_width=6),
)


def report(
    runs: list[Run], levels: list[str], weights: dict[str, int], width: int | None = None
) -> list[str]:
    """The results table, its title and its caption, as lines (pure).

    Args:
        runs: what each run recorded.
        levels: the app's levels, highest first.
        weights: each level's weight.
        width: the most cells a line may take; None for no limit.

    Returns:
        The lines, without line ends.
    """
    rows = []
    for run in runs:
        shares = shares_while_all_busy(run.starts, levels)
        for level in levels:
            waits = run.waits.get(level, [])
            rows.append(
                (
                    run.name if level == levels[0] else "",
                    level,
                    str(len(waits)),
                    f"{percentile_ms(waits, 50):.1f}",
                    f"{percentile_ms(waits, 99):.1f}",
                    f"{shares[level]:.1%}",
                )
            )
    total = sum(weights.values())
    caption = (
        "weights "
        + ":".join(str(w) for w in weights.values())
        + " = "
        + ", ".join(f"{level} {w / total:.1%}" for level, w in weights.items())
    )
    if width is None:
        return [TITLE, *render(COLUMNS, rows), caption]
    return [*wrap(TITLE, width), *render(COLUMNS, rows, width), *wrap(caption, width)]
