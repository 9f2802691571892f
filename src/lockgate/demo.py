"""``lockgate demo``: the lesson's scenario, run for real, with the numbers it produced.

5,000 low analytics jobs flood the queue; 500 normal e-mails arrive as a burst during the
flood, and 100 critical payments arrive in bursts of 10. The same scenario runs under the
strict policy, the weighted policy and the sorted backend, one after another, each in its
own namespace; the table shows, per run and level, jobs done, p50/p99 wait (enqueue to
start), and each level's share of the jobs started while every level still had jobs to
come (where starvation shows: strict gives low nothing there). Critical payments arrive
slower than the worker runs them, so their share is their arrival rate, and what matters
for them is the wait.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from lockgate.addresses import masked
from lockgate.app import App
from lockgate.config import REDIS_URL_ENV, Backend, PolicyName, WorkerConfig
from lockgate.context import current_job
from lockgate.embedded import redis_url_or_embedded
from lockgate.tables import Column, display_width, fit, render, wrap
from lockgate.worker import Worker

LOW_JOBS, NORMAL_JOBS, CRITICAL_JOBS = 5_000, 500, 100
CRITICAL_BURST = 10
JOB_SECONDS = 0.001
CONCURRENCY = 8
RUNS: tuple[tuple[str, Backend, PolicyName], ...] = (
    ("strict", "streams", "strict"),
    ("weighted", "streams", "weighted"),
    ("sorted+aging", "sorted", "weighted"),
)
SORTED_AGING_SECONDS = 1.0


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


async def play(
    url: str, name: str, backend: Backend, policy: PolicyName, progress: Progress
) -> Run:
    """Run the scenario once; return what it recorded."""
    run = Run(name)
    app = App(
        redis_url=url,
        namespace=f"demo-{uuid.uuid4().hex[:8]}",
        backend=backend,
        aging=SORTED_AGING_SECONDS,
    )

    async def work() -> None:
        job = current_job()
        now = time.time()
        run.record(job.level, now, max(0.0, now - job.enqueued))
        await asyncio.sleep(JOB_SECONDS)

    @app.task(priority="low")
    async def analytics() -> None:
        await work()

    @app.task(priority="normal")
    async def email(i: int) -> None:
        await work()

    @app.task(priority="critical")
    async def payment(i: int) -> None:
        await work()

    total = LOW_JOBS + NORMAL_JOBS + CRITICAL_JOBS

    def show() -> None:
        progress.update(name, run.done, total)

    try:
        await app.enqueue_many_async([analytics.message() for _ in range(LOW_JOBS)])
        worker = Worker(app, WorkerConfig(concurrency=CONCURRENCY, policy=policy, idle_wait=0.2))
        started = time.monotonic()
        run.began = time.time()  # the clock of the jobs' starts and enqueue times
        running = asyncio.create_task(worker.run())
        await _until(lambda: run.done >= 200, show)
        await app.enqueue_many_async([email.message(i) for i in range(NORMAL_JOBS)])
        for burst in range(CRITICAL_JOBS // CRITICAL_BURST):
            messages = [payment.message(burst * CRITICAL_BURST + i) for i in range(CRITICAL_BURST)]
            await app.enqueue_many_async(messages)
            await asyncio.sleep(0.1)  # pacing of the scenario's arrivals, not synchronisation
        await _until(lambda: run.done >= total, show)
        run.elapsed = time.monotonic() - started
        worker.request_stop()
        await running
    finally:
        await _forget(app)
        await app.aclose()
    progress.finished(run)
    return run


async def _until(done: Callable[[], bool], show: Callable[[], None]) -> None:
    deadline = time.monotonic() + 60
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("demo run did not finish within 60 s")
        show()
        await asyncio.sleep(0.05)
    show()


async def _forget(app: App) -> None:
    """Delete the run's keys, so a demo against a real Redis leaves nothing behind."""
    # This runs on the way out of a run that failed too: the store's errors are lockgate's
    # one-line errors, never a raw redis-py error that would replace the one the run raised.
    await app.store.forget_namespace()


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


def run_demo(url: str | None, *, quiet: bool = True, plot: Path | None = None) -> None:
    """Play every run and print the table.

    Args:
        url: the Redis to play on; None uses ``$LOCKGATE_REDIS_URL``, else an embedded
            server started for the demo.
        quiet: lower lockgate's own logging to warnings while the runs play (their
            workers' start and stop lines would bury the progress).
        plot: also draw the runs into this PNG file (:mod:`lockgate.plot`).

    Raises:
        ConfigError: no URL, and no embedded server can be had; the plot's file cannot
            be written.
        MissingExtra: ``plot`` is given and matplotlib (the plot extra) is not installed.
        ConnectionFailed: the server cannot be reached.
    """
    if plot is not None:
        # Before anything runs: a missing extra or directory fails now, not after the runs.
        from lockgate.plot import check_target, write_png

        check_target(plot)
    if quiet:
        logging.getLogger("lockgate").setLevel(logging.WARNING)
    width = shutil.get_terminal_size((80, 24)).columns  # honours $COLUMNS
    progress = Progress(sys.stdout, sys.stderr, live=sys.stderr.isatty(), width=width)
    # Resolved here, not only inside redis_url_or_embedded: the banner must name an
    # external server (set by the environment) as such, and never print its password.
    external = url or os.environ.get(REDIS_URL_ENV)
    with redis_url_or_embedded(external) as server_url:
        where = masked(server_url) if external else f"an embedded server ({server_url})"
        print(f"lockgate demo on {where}", flush=True)
        try:
            runs = [
                asyncio.run(play(server_url, name, backend, policy, progress))
                for name, backend, policy in RUNS
            ]
        finally:
            progress.clear()
        levels = App(redis_url=server_url).levels
        lines = report(runs, list(levels.names), dict(levels.weights), width)
        print("", *lines, sep="\n", flush=True)
        if plot is not None:
            write_png(runs, list(levels.names), plot)
            print(f"plot written to {plot}", flush=True)
