"""The app of the outbox chaos tests (configured by the environment), and their producer.

``LOCKGATE_REDIS_URL`` picks the server, ``LOCKGATE_TEST_NAMESPACE`` the namespace (its
rows of the default outbox table are its own), and ``OUTBOX_TEST_EFFECTS`` the tables the
task writes: ``<name>_runs`` gets a row per run, ``<name>`` a row per job under a unique
constraint (a second run of a job fails there, and shows in the runs). The App has the
outbox unless ``OUTBOX_TEST_APP_OUTBOX=0``: the worker gets it from ``lockgate worker
--outbox DSN`` then.

As a script, the producer: ``python outbox_app.py FIRST COMMITS [UNCOMMITTED_EVERY]``
forks a child per job, numbered from FIRST (the parent imports everything once, so a
child starts in a millisecond). The child opens a transaction, enqueues job ``n`` on
commit, commits, and SIGKILLs itself right after the commit returns: nothing it could do
after the commit is done. Every ``UNCOMMITTED_EVERY``-th child (0: none) kills itself
before its commit instead: its job must never run. It goes on until COMMITS children
committed. The parent checks that each child died of SIGKILL, and prints a line per
child: ``committed N`` or ``uncommitted N``.
"""

from __future__ import annotations

import os
import signal
import sys

import psycopg
from psycopg import sql

from lockgate import App

DSN = os.environ.get("LOCKGATE_PG_DSN", "host=127.0.0.1 dbname=test user=postgres")
EFFECTS = os.environ.get("OUTBOX_TEST_EFFECTS", "outbox_chaos_effects")

app = App(
    namespace=os.environ.get("LOCKGATE_TEST_NAMESPACE", "outbox-chaos"),
    outbox=DSN if os.environ.get("OUTBOX_TEST_APP_OUTBOX") != "0" else None,
)


@app.task(retries=0)
def effect(n: int) -> None:
    """Count the run, then record the job's effect once (a unique constraint)."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL("INSERT INTO {} (n) VALUES (%s)").format(sql.Identifier(f"{EFFECTS}_runs")),
            (n,),
        )
        conn.execute(
            sql.SQL("INSERT INTO {} (n) VALUES (%s)").format(sql.Identifier(EFFECTS)), (n,)
        )


def produce_one(n: int, commit: bool) -> None:
    """In a forked child: enqueue job ``n`` in a transaction, then die by SIGKILL right
    after the commit (or right before it)."""
    conn = psycopg.connect(DSN)
    conn.execute("SELECT 1")  # a transaction is open
    effect.enqueue_on_commit(conn, n)
    if commit:
        conn.commit()
    os.kill(os.getpid(), signal.SIGKILL)


def main(first: int, commits: int, uncommitted_every: int) -> None:
    committed, n = 0, first
    while committed < commits:
        commit = not (uncommitted_every and n % uncommitted_every == uncommitted_every - 1)
        pid = os.fork()
        if pid == 0:
            try:
                produce_one(n, commit)
            finally:
                os._exit(3)  # not reached: the child kills itself
        _, status = os.waitpid(pid, 0)
        if not os.WIFSIGNALED(status) or os.WTERMSIG(status) != signal.SIGKILL:
            sys.exit(f"producer child {n} did not die of SIGKILL (status {status})")
        print(f"{'committed' if commit else 'uncommitted'} {n}", flush=True)
        committed += commit
        n += 1


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 0)
