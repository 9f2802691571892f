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
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from lockgate.app import App
from lockgate.broker import masked
from lockgate.config import REDIS_URL_ENV, Backend, PolicyName, WorkerConfig
from lockgate.context import current_job
from lockgate.embedded import redis_url_or_embedded
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
    """What one run recorded: per level, start times and waits."""

    name: str
    starts: dict[str, list[float]] = field(default_factory=dict)
    waits: dict[str, list[float]] = field(default_factory=dict)
    elapsed: float = 0.0

    def record(self, level: str, start: float, wait: float) -> None:
        self.starts.setdefault(level, []).append(start)
        self.waits.setdefault(level, []).append(wait)

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
    bar = progress.add_task(name, total=total)
    try:
        await app.enqueue_many_async([analytics.message() for _ in range(LOW_JOBS)])
        worker = Worker(app, WorkerConfig(concurrency=CONCURRENCY, policy=policy, idle_wait=0.2))
        started = time.monotonic()
        running = asyncio.create_task(worker.run())
        await _until(lambda: run.done >= 200, progress, bar, run)
        await app.enqueue_many_async([email.message(i) for i in range(NORMAL_JOBS)])
        for burst in range(CRITICAL_JOBS // CRITICAL_BURST):
            messages = [payment.message(burst * CRITICAL_BURST + i) for i in range(CRITICAL_BURST)]
            await app.enqueue_many_async(messages)
            await asyncio.sleep(0.1)  # pacing of the scenario's arrivals, not synchronisation
        await _until(lambda: run.done >= total, progress, bar, run)
        run.elapsed = time.monotonic() - started
        worker.request_stop()
        await running
    finally:
        await _forget(app)
        await app.aclose()
    return run


async def _until(done: Callable[[], bool], progress: Progress, bar: TaskID, run: Run) -> None:
    deadline = time.monotonic() + 60
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("demo run did not finish within 60 s")
        progress.update(bar, completed=run.done)
        await asyncio.sleep(0.05)
    progress.update(bar, completed=run.done)


async def _forget(app: App) -> None:
    """Delete the run's keys, so a demo against a real Redis leaves nothing behind."""
    client, _ = app.async_connection()
    async for key in client.scan_iter(match=f"{app.keys.prefix}:*", count=1000):
        await client.unlink(key)


def report(runs: list[Run], levels: list[str], weights: dict[str, int]) -> Table:
    """The results table."""
    table = Table(title="lockgate demo: 5,000 low + 500 normal + 100 critical, concurrency 8")
    for column in ("run", "level", "done", "p50 wait ms", "p99 wait ms", "share while all busy"):
        table.add_column(column, justify="left" if column in ("run", "level") else "right")
    for run in runs:
        shares = shares_while_all_busy(run.starts, levels)
        for level in levels:
            waits = run.waits.get(level, [])
            table.add_row(
                f"{run.name} ({run.elapsed:.1f}s)" if level == levels[0] else "",
                level,
                str(len(waits)),
                f"{percentile_ms(waits, 50):.1f}",
                f"{percentile_ms(waits, 99):.1f}",
                f"{shares[level]:.1%}",
                end_section=level == levels[-1],
            )
    total = sum(weights.values())
    table.caption = (
        "weights "
        + ":".join(str(w) for w in weights.values())
        + " = "
        + ", ".join(f"{level} {w / total:.1%}" for level, w in weights.items())
    )
    return table


def run_demo(url: str | None) -> None:
    """Play every run and print the table.

    Args:
        url: the Redis to play on; None uses ``$LOCKGATE_REDIS_URL``, else an embedded
            server started for the demo.
    """
    console = Console()
    logging.getLogger("lockgate").setLevel(logging.WARNING)  # keep the progress bars readable
    # Resolved here, not only inside redis_url_or_embedded: the banner must name an
    # external server (set by the environment) as such, and never print its password.
    external = url or os.environ.get(REDIS_URL_ENV)
    with redis_url_or_embedded(external) as server_url:
        where = masked(server_url) if external else f"an embedded server ({server_url})"
        console.print(f"lockgate demo on {where}")
        runs = []
        columns = (TextColumn("{task.description:>14}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn())  # fmt: skip
        with Progress(*columns, console=console) as progress:
            for name, backend, policy in RUNS:
                runs.append(asyncio.run(play(server_url, name, backend, policy, progress)))
        levels = App(redis_url=server_url).levels
        console.print(report(runs, list(levels.names), dict(levels.weights)))
