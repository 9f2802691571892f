"""The app the chaos test's worker processes run (configured through the environment)."""

from __future__ import annotations

import os
import signal

from psycopg_pool import ConnectionPool

from lockgate import App, RetryableError, current_job
from lockgate.postgres import claim

RUN = os.environ.get("CHAOS_RUN", "none")
app = App(namespace=os.environ.get("CHAOS_NAMESPACE", "chaos"))
_pool: ConnectionPool | None = None


def pool() -> ConnectionPool:
    global _pool
    if _pool is None:
        _pool = ConnectionPool(os.environ["CHAOS_DSN"], min_size=1, max_size=4)
    return _pool


@app.task(priority="normal", retries=3, backoff=0.05)
def effect(n: int, flaky: bool = False) -> None:
    """Record the side effect of job n exactly once, through the PostgreSQL claim."""
    if flaky and current_job().attempt == 1:
        raise RetryableError("flaky once")
    with pool().connection() as conn, conn.transaction():
        if claim(conn, f"chaos:{RUN}:{n}"):
            conn.execute("INSERT INTO chaos_effects (run, n) VALUES (%s, %s)", (RUN, n))


@app.task(priority="normal")
def poison(n: int) -> None:
    """A job that kills whichever worker runs it."""
    os.kill(os.getpid(), signal.SIGKILL)


@app.task(priority="critical", idempotent=True)
def pay(n: int) -> None:
    """A payment recorded once: Redis claim first, PostgreSQL row as the source of truth."""
    with pool().connection() as conn, conn.transaction():
        with app.idempotent(f"pay:{RUN}:{n}", conn=conn):
            conn.execute("INSERT INTO chaos_effects (run, n) VALUES (%s, %s)", (RUN, n))
