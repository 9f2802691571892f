"""The app of the supervisor tests' worker processes, configured by the environment.

``LOCKGATE_REDIS_URL`` picks the server and ``LOCKGATE_TEST_NAMESPACE`` the namespace.
Tasks record which process ran them under the namespace's ``test`` prefix (see
:func:`record_key`), so the test process can watch them and the namespace cleanup
removes them.
"""

from __future__ import annotations

import os
import threading
import time

from lockgate import App, current_job

app = App(namespace=os.environ.get("LOCKGATE_TEST_NAMESPACE", "supervisor-test"))
GATE_WAIT = 60.0  # a held job gives up waiting for its gate after this long


def record_key(name: str) -> str:
    """Where tasks record their progress (inside the namespace's hash tag)."""
    return f"{app.keys.prefix}:test:{name}"


@app.task
def hold() -> None:
    """Record ``job_id:pid`` under ``started``, wait for the ``gate`` key, record it done."""
    client = app.client()
    job_id = current_job().job_id
    client.rpush(record_key("started"), f"{job_id}:{os.getpid()}")
    deadline = time.monotonic() + GATE_WAIT
    while not client.exists(record_key("gate")) and time.monotonic() < deadline:
        time.sleep(0.01)
    client.rpush(record_key("done"), job_id)


@app.task
def block_once() -> None:
    """First run: record its pid under ``victim``, then block until killed. Later: done."""
    client = app.client()
    job_id = current_job().job_id
    if client.incr(record_key(f"runs:{job_id}")) == 1:
        client.set(record_key("victim"), os.getpid())
        threading.Event().wait()
    client.rpush(record_key("done"), job_id)


@app.task
def work() -> None:
    """Count its run under the ``runs`` hash."""
    app.client().hincrby(record_key("runs"), current_job().job_id, 1)
