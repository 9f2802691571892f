"""The app of the rolling-deploy test: run by lockgate 0.1 and by this version alike.

It uses only what both versions have (``App``, the task options ``idempotent``,
``retries`` and ``backoff``, ``current_job``, ``RetryableError``, ``Task.message`` and
``App.enqueue_many``), so old and new workers and producers load the same module; only this
version's App gets ``legacy_markers=True`` (``ROLLING_ROLE=new``), so that its workers mirror
claims and write done markers where 0.1 workers read them. Every run INSERTs a row into the
run's own PostgreSQL table with no dedup at all: a job that runs twice shows as two rows.
Configured through the environment; run as a script, it is a producer: ``python
rolling_app.py FIRST COUNT`` enqueues jobs FIRST..FIRST+COUNT-1 and prints the path of the
lockgate package it used.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import psycopg
from psycopg import sql

import lockgate
from lockgate import App, RetryableError, current_job

DSN = os.environ.get("ROLLING_DSN", "host=127.0.0.1 dbname=test user=postgres")
TABLE = sql.Identifier(os.environ.get("ROLLING_TABLE", "rolling_effects"))
ROLE = os.environ.get("ROLLING_ROLE", "?")  # which worker generation ran it: old or new
WORK = float(os.environ.get("ROLLING_WORK", "0.1"))
LEVELS = ("critical", "normal", "low")
INSERT = sql.SQL(
    "INSERT INTO {} (job_id, n, task, pid, role, attempt) VALUES (%s, %s, %s, %s, %s, %s)"
)

# This version's option; 0.1's App has none.
LEGACY_MARKERS: dict[str, Any] = {"legacy_markers": True} if ROLE == "new" else {}

app = App(
    namespace=os.environ.get("ROLLING_NAMESPACE", "rolling"),
    backend="sorted" if os.environ.get("ROLLING_BACKEND") == "sorted" else "streams",
    **LEGACY_MARKERS,
)


def _row(n: int, task: str) -> tuple[Any, ...]:
    job = current_job()
    return (job.job_id, n, task, os.getpid(), ROLE, job.attempt)


@app.task(retries=3, backoff=0.05)
def plain(n: int, flaky: bool = False) -> None:
    """A sync task with no idempotency: only the queue keeps it single."""
    if flaky and current_job().attempt == 1:
        raise RetryableError("flaky once")
    time.sleep(WORK)  # the job's work: long enough that a deploy finds some running
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(INSERT.format(TABLE), _row(n, "plain"))


@app.task(idempotent=True, retries=3, backoff=0.05)
def once(n: int, flaky: bool = False) -> None:
    """A sync ``idempotent=True`` task (its job claim's key changed in this version)."""
    if flaky and current_job().attempt == 1:
        raise RetryableError("flaky once")
    time.sleep(WORK)
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(INSERT.format(TABLE), _row(n, "once"))


@app.task(idempotent=True, retries=3, backoff=0.05)
async def once_async(n: int, flaky: bool = False) -> None:
    """An async ``idempotent=True`` task."""
    if flaky and current_job().attempt == 1:
        raise RetryableError("flaky once")
    await asyncio.sleep(WORK)
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        await conn.execute(INSERT.format(TABLE), _row(n, "once_async"))


TASKS = (plain, once, once_async)


def produce(first: int, count: int) -> None:
    """Enqueue jobs ``first`` .. ``first + count - 1``: every task, level and a few delays;
    one in ten fails its first attempt."""
    messages = []
    for n in range(first, first + count):
        task = TASKS[n % len(TASKS)]
        delay = 0.2 + (n % 5) / 10 if n % 8 == 5 else None
        messages.append(
            task.message(
                n, flaky=n % 10 == 7, job_id=f"job-{n}", priority=LEVELS[n // 3 % 3], delay=delay
            )
        )
    created = sum(result.created for result in app.enqueue_many(messages))
    if created != count:
        raise SystemExit(f"only {created} of {count} jobs were enqueued")


if __name__ == "__main__":
    produce(int(sys.argv[1]), int(sys.argv[2]))
    print(lockgate.__file__)
