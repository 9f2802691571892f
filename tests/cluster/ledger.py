"""What the cluster and Sentinel fault tests share: a PostgreSQL ledger of effects, an app
whose task writes its effect once, and a worker served through one injected fault."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg

from conftest import wait_until
from lockgate import App, Worker, WorkerConfig, current_job
from lockgate.integrations.postgres import claim

DSN = os.environ.get("LOCKGATE_PG_DSN", "host=127.0.0.1 dbname=test user=postgres")
JOBS = 300
log = logging.getLogger(__name__)
# Per namespace, per fairness key: the most runs at once seen (a build with a key limit).
MOST_AT_ONCE: dict[str, dict[str, int]] = {}


def effects(run: str) -> tuple[int, int]:
    """(distinct jobs with an effect, rows) of a run."""
    with psycopg.connect(DSN) as conn:
        row = conn.execute(
            "SELECT count(DISTINCT n), count(*) FROM cluster_effects WHERE run = %s", (run,)
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def build(
    url: str, run: str, partitions: int = 1, key_concurrency: int | None = None
) -> tuple[App, Callable[[], list[int]]]:
    """An app whose task writes its effect once (PostgreSQL claim), and the jobs started.

    With ``key_concurrency``, job n's fairness key is ``t<n % 3>`` and its task runs at
    most that many of a key at once; MOST_AT_ONCE[namespace] counts what this process ran.
    """
    app = App(url, namespace=uuid.uuid4().hex, partitions=partitions)
    started: list[int] = []
    running: dict[str, int] = {}
    most = MOST_AT_ONCE.setdefault(app.namespace, {})
    lock = threading.Lock()
    limits: dict[str, Any] = {}
    if key_concurrency is not None:
        limits = {"key_by": lambda n: f"t{n % 3}", "key_concurrency": key_concurrency}

    @app.task(retries=3, backoff=0.05, **limits)
    def pay(n: int) -> None:
        key = f"t{n % 3}"
        with lock:
            running[key] = running.get(key, 0) + 1
            most[key] = max(most.get(key, 0), running[key])
        try:
            started.append(n)
            time.sleep(0.002)
            with psycopg.connect(DSN) as conn, conn.transaction():
                if claim(conn, f"cluster:{run}:{n}"):
                    conn.execute("INSERT INTO cluster_effects VALUES (%s, %s)", (run, n))
            log.debug("job %s ran (attempt %d)", n, current_job().attempt)
        finally:
            with lock:
                running[key] -= 1

    return app, lambda: started


async def serve_through(
    app: App, run: str, fault: Callable[[], None], *, after: int
) -> tuple[int, int, float]:
    """Run a worker over JOBS jobs, inject ``fault`` once ``after`` have started, wait for
    every effect; (jobs with an effect, rows, longest gap between effects in s)."""
    worker = Worker(app, WorkerConfig(concurrency=8, visibility_timeout=5.0))
    serving = asyncio.create_task(worker.run())
    longest, last, seen = 0.0, time.monotonic(), 0

    def progress() -> bool:
        nonlocal longest, last, seen
        assert not serving.done(), f"the worker exited: {serving}"
        done, _ = effects(run)
        now = time.monotonic()
        if done > seen:
            longest, last, seen = max(longest, now - last), now, done
        return done >= JOBS

    try:
        await wait_until(lambda: effects(run)[0] >= after, message="jobs before the fault")
        await asyncio.to_thread(fault)
        await wait_until(progress, timeout=120, message="every job's effect")
        assert not serving.done()
    finally:
        worker.request_stop()
        await asyncio.wait_for(serving, 60)
        await app.aclose()
        app.close()
    done, rows = effects(run)
    return done, rows, longest


def enqueue_jobs(app: App) -> None:
    """The JOBS jobs of :func:`build`'s task, ids p0, p1, ..."""
    app.enqueue_many([app.tasks["pay"].message(n, job_id=f"p{n}") for n in range(JOBS)])


def check(fault: str, served: tuple[int, int, float], started: Callable[[], list[int]]) -> None:
    """Print the figures of a run through ``fault`` and require none lost, none doubled."""
    done, rows, longest = served
    print(f"{fault}: {JOBS} jobs, {JOBS - done} lost, {rows - done} doubled, "
          f"longest stall {longest:.2f} s, {len(started()) - JOBS} runs again")  # fmt: skip
    assert (done, rows) == (JOBS, JOBS)
