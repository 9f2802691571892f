"""The app the chaos tests' worker processes run (configured through the environment).

``effect`` records its side effect through the PostgreSQL claim; ``redis_only`` is an
``idempotent=True`` task whose INSERT has no PostgreSQL dedup at all, so only lockgate's
Redis claim of the job id keeps it single. Its rows carry the pids of the process that ran
it and of its worker (the same unless the job ran in a forked child) and the run's start
time, and ``poison`` notes its own death, so the chaos test can tell a duplicate a
SIGKILL explains from one it does not.

``LOCKGATE_TEST_PARTITIONS`` (default 1) is the namespace's partition count: the tests'
cluster runs spread its jobs over several hash tags, and the App must agree.
"""

from __future__ import annotations

import atexit
import os
import signal
import time

from psycopg_pool import ConnectionPool

from lockgate import App, RetryableError, current_job
from lockgate.integrations.postgres import claim

RUN = os.environ.get("CHAOS_RUN", "none")
WORKER = os.getpid()  # the worker process; a child forked to run a job inherits it
app = App(
    namespace=os.environ.get("CHAOS_NAMESPACE", "chaos"),
    partitions=int(os.environ.get("LOCKGATE_TEST_PARTITIONS", "1")),
)


def _new_pool() -> ConnectionPool:
    made = ConnectionPool(os.environ["CHAOS_DSN"], min_size=1, max_size=4, open=True)
    atexit.register(made.close)  # else its __del__ may run in one of its own threads
    return made


_pools = {os.getpid(): _new_pool()}  # made at import: no two threads race to make it


def pool() -> ConnectionPool:
    """This process's pool.

    A forked child (lockgate runs a redelivered job in one) makes its own: the parent's
    connections and threads are not the child's to use. The parent's stays referenced,
    so its finaliser never runs in the child and closes sockets both share.
    """
    pid = os.getpid()
    if pid not in _pools:  # a forked child, which has one thread
        _pools[pid] = _new_pool()
    return _pools[pid]


@app.task(priority="normal", retries=3, backoff=0.05)
def effect(n: int, flaky: bool = False) -> None:
    """Record the side effect of job n exactly once, through the PostgreSQL claim."""
    if flaky and current_job().attempt == 1:
        raise RetryableError("flaky once")
    with pool().connection() as conn, conn.transaction():
        if claim(conn, f"chaos:{RUN}:{n}"):
            conn.execute("INSERT INTO chaos_effects (run, n) VALUES (%s, %s)", (RUN, n))


@app.task(priority="normal", idempotent=True, retries=3, backoff=0.05)
def redis_only(n: int, flaky: bool = False, work: float = 0.0) -> None:
    """Record job n with a plain INSERT: only lockgate's Redis claim keeps it single.

    ``work`` is how long the job runs before its effect, so that some runs are under way
    when Redis dies and try to settle while it is down.
    """
    started = time.time()
    attempt = current_job().attempt
    if flaky and attempt == 1:
        raise RetryableError("flaky once")
    time.sleep(work)
    with pool().connection() as conn:  # commits when the block ends
        conn.execute(
            "INSERT INTO chaos_redis_only (run, n, pid, worker, attempt, started)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (RUN, n, os.getpid(), WORKER, attempt, started),
        )


@app.task(priority="normal")
def poison(n: int) -> None:
    """A job that kills whichever worker runs it (noting the time of death first)."""
    with pool().connection() as conn:
        conn.execute(
            "INSERT INTO chaos_deaths (run, pid, at) VALUES (%s, %s, %s)",
            (RUN, os.getpid(), time.time()),
        )
    os.kill(os.getpid(), signal.SIGKILL)


@app.task(priority="critical", idempotent=True)
def pay(n: int) -> None:
    """A payment recorded once: Redis claim first, PostgreSQL row as the source of truth."""
    with pool().connection() as conn, conn.transaction():
        with app.idempotent(f"pay:{RUN}:{n}", conn=conn):
            conn.execute("INSERT INTO chaos_effects (run, n) VALUES (%s, %s)", (RUN, n))
