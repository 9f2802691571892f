"""The body of ``lockgate demo``: the lesson's scenario, run for real, with the numbers it
produced.

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
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from lockgate.api.app import App
from lockgate.backend.addresses import masked
from lockgate.cli.common import terminal_width
from lockgate.cli.demo.report import Progress, Run, report
from lockgate.core.config import REDIS_URL_ENV, Backend, PolicyName, WorkerConfig
from lockgate.core.context import current_job
from lockgate.integrations.embedded import redis_url_or_embedded
from lockgate.worker.loop import Worker

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


def run_demo(url: str | None, *, quiet: bool = True, plot: Path | None = None) -> None:
    """Play every run and print the table.

    Args:
        url: the Redis to play on; None uses ``$LOCKGATE_REDIS_URL``, else an embedded
            server started for the demo.
        quiet: lower lockgate's own logging to warnings while the runs play (their
            workers' start and stop lines would bury the progress).
        plot: also draw the runs into this PNG file (:mod:`lockgate.cli.demo.plot`).

    Raises:
        ConfigError: no URL, and no embedded server can be had; the plot's file cannot
            be written.
        MissingExtra: ``plot`` is given and matplotlib (the plot extra) is not installed.
        ConnectionFailed: the server cannot be reached.
    """
    if plot is not None:
        # Before anything runs: a missing extra or directory fails now, not after the runs.
        from lockgate.cli.demo.plot import check_target, write_png

        check_target(plot)
    if quiet:
        logging.getLogger("lockgate").setLevel(logging.WARNING)
    width = terminal_width()
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
