"""The worker process of the zombie test: ``python zombie_app.py VISIBILITY_TIMEOUT``.

``LOCKGATE_REDIS_URL`` picks the server, ``LOCKGATE_TEST_NAMESPACE`` the namespace and
``LOCKGATE_TEST_BACKEND`` the backend (streams unless it says sorted).
The task records which process runs it under the namespace's ``test`` prefix (see
:func:`record_key`) and waits until the test releases that process, so the test decides
when each run ends; the namespace cleanup removes the records.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys

from lockgate import App, Worker, WorkerConfig

app = App(
    namespace=os.environ.get("LOCKGATE_TEST_NAMESPACE", "zombie"),
    backend=os.environ.get("LOCKGATE_TEST_BACKEND", "streams"),  # type: ignore[arg-type]
)


def record_key(name: str) -> str:
    """Where the task records its progress (inside the namespace's hash tag)."""
    return f"{app.keys.prefix}:test:{name}"


@app.task(retries=0)
def slow(tag: str) -> None:
    """Record this process's pid, wait for ``release:<pid>``, record the pid as finished.

    A first delivery runs in a thread of the worker process, a redelivery in a child
    process of it: the pid tells the runs apart.
    """
    client = app.client()
    me = str(os.getpid())
    client.rpush(record_key("started"), me)
    while not client.blpop([record_key(f"release:{me}")], timeout=1):
        pass
    client.rpush(record_key("finished"), me)


@app.task(retries=0, key_by="tenant", key_concurrency=1)
def limited(tenant: str, tag: str) -> None:
    """As ``slow``, one at a time per tenant; also logs "start <tag> <pid>" and "finish
    <tag> <pid>" in order under ``events``."""
    client = app.client()
    me = str(os.getpid())
    client.rpush(record_key("events"), f"start {tag} {me}")  # first: the test waits on started
    client.rpush(record_key("started"), me)
    while not client.blpop([record_key(f"release:{me}")], timeout=1):
        pass
    client.rpush(record_key("events"), f"finish {tag} {me}")
    client.rpush(record_key("finished"), me)


@app.task(retries=0)
def after(tag: str) -> None:
    """The second step of the zombie flow test: records this process's pid under
    ``after`` (it must run once, after the first step's owner settled it)."""
    app.client().rpush(record_key("after"), str(os.getpid()))


# Catastrophic backtracking: re holds the GIL all along (about 5 s on a quiet machine
# here, more on a busy one), so no other thread of the process runs meanwhile.
GREEDY = re.compile(r"(a+)+$")


@app.task(retries=0)
def greedy(tag: str) -> None:
    """Record this process's pid, hold the GIL in C past the visibility timeout (the first
    run only: a redelivery runs at once), record the pid as finished."""
    client = app.client()
    me = str(os.getpid())
    first = client.rpush(record_key("started"), me) == 1
    if first:
        GREEDY.match("a" * 27 + "b")
    client.rpush(record_key("finished"), me)


async def main(visibility: float) -> None:
    config = WorkerConfig(
        concurrency=2, visibility_timeout=visibility, grace_period=5.0, idle_wait=1.0
    )
    await Worker(app, config).run(install_signal_handlers=True)
    app.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(main(float(sys.argv[1])))
