"""An app whose startup hook fails when ``LOCKGATE_TEST_FAIL_STARTUP`` is set, for the CLI
tests of hooks (``lockgate worker hooks_app:app``)."""

from __future__ import annotations

import os

from lockgate import App

app = App(namespace=os.environ.get("LOCKGATE_TEST_NAMESPACE", "hooks-test"))


@app.on_startup
def open_pool() -> None:
    if os.environ.get("LOCKGATE_TEST_FAIL_STARTUP"):
        raise ConnectionRefusedError("database at 127.0.0.1:1 refused the connection")


@app.task
def noop() -> None:
    pass
