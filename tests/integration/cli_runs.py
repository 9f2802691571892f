"""The CLI run in-process by the tests, what its one-line errors look like, and
``cli_app`` (the CLI's test app) imported afresh in a namespace of the test's."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest
from click.testing import CliRunner, Result

from lockgate import App, Worker, WorkerConfig
from lockgate.cli import main


def invoke(*args: str, columns: int = 400) -> Result:
    """Run the CLI in-process; stdin is no terminal. Tables get ``columns`` (by default
    wide enough that nothing the tests look for is cut)."""
    env = {"COLUMNS": str(columns)}
    return CliRunner().invoke(main, list(args), catch_exceptions=False, env=env)


def one_error_line(result: Result) -> str:
    """The one ``error: ...`` line a failed command printed (and no traceback)."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


@contextlib.contextmanager
def cli_app_in(namespace: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``cli_app`` to be imported afresh by the CLI, in ``namespace``; its client closed
    at the end."""
    monkeypatch.setenv("LOCKGATE_TEST_NAMESPACE", namespace)
    sys.modules.pop("cli_app", None)
    try:
        yield namespace
    finally:
        module = sys.modules.pop("cli_app", None)
        if module is not None:
            module.app.close()


@contextlib.contextmanager
def cli_app_module(
    redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch, name: str = "cli_app"
) -> Iterator[ModuleType]:
    """``cli_app`` (or the test app module ``name``) imported for a test's Redis and
    namespace; its client closed after."""
    monkeypatch.setenv("LOCKGATE_REDIS_URL", redis_url)
    monkeypatch.setenv("LOCKGATE_TEST_NAMESPACE", namespace)
    sys.modules.pop(name, None)
    module = importlib.import_module(name)
    try:
        yield module
    finally:
        module.app.close()
        sys.modules.pop(name, None)


def work_off(app: App, concurrency: int = 2) -> None:
    """Run a worker until nothing is queued, delayed or running."""

    async def run() -> None:
        try:
            await Worker(app, WorkerConfig(concurrency=concurrency, idle_wait=1.0)).run(burst=True)
        finally:
            await app.aclose()

    asyncio.run(asyncio.wait_for(run(), 60))


def title(result: Result) -> str:
    """The output with whitespace runs made single spaces (a table's title may wrap)."""
    return " ".join(result.stdout.split())
