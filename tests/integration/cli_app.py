"""The app of the CLI tests and of their worker subprocesses, configured by the environment.

``LOCKGATE_REDIS_URL`` picks the server and ``LOCKGATE_TEST_NAMESPACE`` the namespace.
Tasks record what they did under the namespace's ``test`` prefix (see :func:`record_key`),
so the test process can watch them and the namespace cleanup removes them.

Importing it logs one DEBUG line, :data:`IMPORTED`: the CLI imports the app after it has
set the log level, so the line shows which level a command ended up with.
"""

from __future__ import annotations

import logging
import os

from lockgate import App, current_job

IMPORTED = "cli_app imported"

app = App(namespace=os.environ.get("LOCKGATE_TEST_NAMESPACE", "cli-test"))
logging.getLogger(__name__).debug("%s (namespace %s)", IMPORTED, app.namespace)


def record_key(name: str) -> str:
    """Where tasks record their progress (inside the namespace's hash tag)."""
    return f"{app.keys.prefix}:test:{name}"


def fixed() -> bool:
    """Whether the test has "deployed the fix" the failing tasks wait for."""
    return bool(app.client().exists(record_key("fixed")))


@app.task(retries=0, dead_on=(ValueError,))
def charge(order_id: str) -> None:
    """Fails until the fix is deployed; then records its job id."""
    if not fixed():
        raise ValueError(f"card declined for {order_id}")
    app.client().rpush(record_key("charged"), current_job().job_id)


@app.task(retries=0, dead_on=(LookupError,), priority="low", queue="mail")
def email(to: str) -> None:
    """Fails until the fix is deployed; then records its job id."""
    if not fixed():
        raise LookupError(f"no mailbox {to}")
    app.client().rpush(record_key("emailed"), current_job().job_id)


@app.task
def later(n: int) -> None:
    """Records that it ran."""
    app.client().rpush(record_key("later"), n)


@app.task(timeout=30)
async def exit_async(code: int) -> None:
    """An async task (with a timeout) that raises SystemExit."""
    raise SystemExit(code)


@app.task(timeout=30)
async def interrupt_async() -> None:
    """An async task (with a timeout) that raises KeyboardInterrupt."""
    raise KeyboardInterrupt


@app.task
async def ping(n: int) -> None:
    """Records that it ran."""
    app.client().rpush(record_key("pinged"), n)


@app.task(keep_result=60, retries=0)
def divide(a: float, b: float) -> float:
    """Its result (or its error: a ZeroDivisionError) is kept, for ``lockgate job``."""
    return a / b
