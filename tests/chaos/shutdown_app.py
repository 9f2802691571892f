"""The app of the shutdown tests' worker processes (configured by the environment).

``LOCKGATE_REDIS_URL`` picks the server and ``LOCKGATE_TEST_NAMESPACE`` the namespace.
The task records its runs under the namespace's ``test`` prefix and blocks until the test
sets the ``release`` key, so the test decides when the side effect finishes.
"""

from __future__ import annotations

import os
import time

from lockgate import App, current_job

app = App(namespace=os.environ.get("LOCKGATE_TEST_NAMESPACE", "shutdown-test"))


def record_key(name: str) -> str:
    """Where the task records its progress (inside the namespace's hash tag)."""
    return f"{app.keys.prefix}:test:{name}"


@app.task(idempotent=True, retries=0)
def pay(order_id: str) -> None:
    """A sync payment that runs until released; records its start and its end."""
    client = app.client()
    client.rpush(record_key("started"), f"{current_job().job_id}:{os.getpid()}")
    while not client.exists(record_key("release")):
        time.sleep(0.01)  # a sync side effect in progress; it cannot be interrupted
    client.rpush(record_key("paid"), f"{current_job().job_id}:{os.getpid()}")


@app.task(timeout=0.5, retries=0)
def stuck(n: int) -> None:
    """A sync task that outlives its timeout: its thread cannot be stopped."""
    client = app.client()
    client.rpush(record_key("stuck"), os.getpid())
    while not client.exists(record_key("release")):
        time.sleep(0.01)
