"""The app the flow chaos test's worker processes run (configured through the environment).

A chord: ``member`` jobs side by side, then one ``callback`` (see test_flow_chaos.py).

``member`` notes each run's start in ``flow_chaos_starts``, then writes its effect as a
PostgreSQL row keyed by its job id (the primary key of ``flow_chaos_effects``: a second
effect of one job cannot land, it conflicts), and in the same transaction records the
attempt in ``flow_chaos_attempts``: every run that committed, with whether it made the
effect or met the first one's row. ``callback`` records each run that committed in
``flow_chaos_callbacks``: how many member effects were there at that moment, and what
``parent_results()`` gave it. Rows carry the pid of the process that ran the job and of
its worker (the same unless the job ran in a forked child) and when the run started, so
the test can tell a rerun a SIGKILL explains from one it does not.

``CHAOS_BACKEND`` picks the backend, ``CHAOS_NAMESPACE`` the namespace, ``CHAOS_RUN`` the
run the rows belong to, ``CHAOS_DSN`` the database; ``LOCKGATE_REDIS_URL`` the server.
"""

from __future__ import annotations

import atexit
import os
import time

from psycopg_pool import ConnectionPool

from lockgate import App, current_job

RUN = os.environ.get("CHAOS_RUN", "none")
WORKER = os.getpid()  # the worker process; a child forked to run a job inherits it
app = App(
    namespace=os.environ.get("CHAOS_NAMESPACE", "flow-chaos"),
    backend="sorted" if os.environ.get("CHAOS_BACKEND") == "sorted" else "streams",
)


def _new_pool() -> ConnectionPool:
    made = ConnectionPool(os.environ["CHAOS_DSN"], min_size=1, max_size=4, open=True)
    atexit.register(made.close)  # else its __del__ may run in one of its own threads
    return made


_pools = {os.getpid(): _new_pool()}  # made at import: no two threads race to make it


def pool() -> ConnectionPool:
    """This process's pool; a forked child (lockgate runs a redelivered job in one)
    makes its own, and keeps the parent's referenced (see chaos_app.pool)."""
    pid = os.getpid()
    if pid not in _pools:
        _pools[pid] = _new_pool()
    return _pools[pid]


@app.task(retries=3, backoff=0.05)
def member(n: int, work: float) -> int:
    """Work ``work`` seconds, then make the effect of this job once; returns ``n``."""
    started = time.time()
    job = current_job()
    with pool().connection() as conn:  # commits when the block ends
        conn.execute(
            "INSERT INTO flow_chaos_starts (run, job_id, pid, worker, started)"
            " VALUES (%s, %s, %s, %s, %s)",
            (RUN, job.job_id, os.getpid(), WORKER, started),
        )
    time.sleep(work)
    with pool().connection() as conn, conn.transaction():
        made = conn.execute(
            "INSERT INTO flow_chaos_effects (run, job_id) VALUES (%s, %s)"
            " ON CONFLICT DO NOTHING RETURNING 1",
            (RUN, job.job_id),
        ).fetchone()
        conn.execute(
            "INSERT INTO flow_chaos_attempts (run, job_id, pid, worker, attempt, started, made)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (RUN, job.job_id, os.getpid(), WORKER, job.attempt, started, made is not None),
        )
    return n


@app.task(retries=3, backoff=0.05)
def callback(members: int) -> int:
    """Record this run: the member effects there now and the parents' results."""
    started = time.time()
    job = current_job()
    parents = job.parent_results()
    in_order = parents == list(range(members))
    with pool().connection() as conn, conn.transaction():
        row = conn.execute(
            "SELECT count(*) FROM flow_chaos_effects WHERE run = %s", (RUN,)
        ).fetchone()
        seen = row[0] if row is not None else -1
        conn.execute(
            "INSERT INTO flow_chaos_callbacks (run, job_id, pid, worker, attempt, started,"
            " seen, parents, in_order) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (RUN, job.job_id, os.getpid(), WORKER, job.attempt, started, seen, len(parents),
             in_order),
        )  # fmt: skip
    return len(parents)
