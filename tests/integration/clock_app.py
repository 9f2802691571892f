"""The app of the worker-clock test's worker processes (some run under libfaketime),
configured by the environment as ``supervisor_app``.

``LOCKGATE_REDIS_URL`` picks the server and ``LOCKGATE_TEST_NAMESPACE`` the namespace.
Tasks record under the namespace's ``test`` prefix, so the namespace cleanup removes it.
"""

from __future__ import annotations

import os
import time

from lockgate import App

app = App(namespace=os.environ.get("LOCKGATE_TEST_NAMESPACE", "clock-test"))
GATE_WAIT = 60.0  # a held job gives up waiting for its gate after this long


def record_key(name: str) -> str:
    """Where tasks record their progress (inside the namespace's hash tag)."""
    return f"{app.keys.prefix}:test:{name}"


@app.task
def hold() -> None:
    """Record ``pid time.time()`` under ``started`` (the worker's own clock, which
    libfaketime may shift), then wait for the ``gate`` key."""
    client = app.client()
    client.rpush(record_key("started"), f"{os.getpid()} {time.time()}")
    deadline = time.monotonic() + GATE_WAIT
    while not client.exists(record_key("gate")) and time.monotonic() < deadline:
        time.sleep(0.01)


@app.task
def work() -> None:
    """Count its run under ``runs``, by the pid of the process that ran it."""
    app.client().hincrby(record_key("runs"), str(os.getpid()), 1)
