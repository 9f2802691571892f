"""The app of the claim crash tests' worker processes (configured by the environment).

``LOCKGATE_REDIS_URL`` picks the server and ``LOCKGATE_TEST_NAMESPACE`` the namespace.
Tasks record their progress under the namespace's ``test`` prefix (see :func:`record_key`),
so the test process can watch them and the namespace cleanup removes them.
"""

from __future__ import annotations

import os
import threading
import time

from lockgate import App, current_job

app = App(namespace=os.environ.get("LOCKGATE_TEST_NAMESPACE", "claims-crash"))


def record_key(name: str) -> str:
    """Where tasks record their progress (inside the namespace's hash tag)."""
    return f"{app.keys.prefix}:test:{name}"


@app.task(idempotent=True, retries=0)
def complete_order(order_id: str) -> None:
    """The first run says it started and blocks until its worker is killed; later runs
    complete. Idempotent: a run after a completed one must never happen."""
    client = app.client()
    job_id = current_job().job_id
    # A redelivered job runs in a child process of its worker: record both pids.
    client.rpush(record_key(f"started:{job_id}"), f"{os.getpid()}:{os.getppid()}")
    if client.incr(record_key(f"runs:{job_id}")) == 1:
        threading.Event().wait()
    client.rpush(record_key("completed"), job_id)


@app.task(retries=0)
def hold_key(key: str) -> None:
    """Holds a claim on ``key`` (a one-second lease) and blocks until its worker is
    killed, recording its worker's pid first."""
    client = app.client()
    with app.idempotent(key, lease=1.0):
        client.rpush(record_key("holding"), os.getpid())
        threading.Event().wait()


@app.task(retries=0)
def hold_until_go(key: str) -> None:
    """Holds a claim on ``key`` (a one-second lease) until the test sets ``go``, then
    leaves it as done, recording its worker's pid on the way in and out."""
    client = app.client()
    with app.idempotent(key, lease=1.0):
        client.rpush(record_key("holding"), os.getpid())
        while not client.exists(record_key("go")):
            time.sleep(0.02)
    client.rpush(record_key("left"), os.getpid())
