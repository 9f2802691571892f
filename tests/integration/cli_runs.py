"""The CLI run in-process by the tests, what its one-line errors look like, and
``cli_app`` (the CLI's test app) imported afresh in a namespace of the test's."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result

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


def title(result: Result) -> str:
    """The output with whitespace runs made single spaces (a table's title may wrap)."""
    return " ".join(result.stdout.split())
