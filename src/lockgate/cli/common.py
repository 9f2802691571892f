"""What the commands share: loading the App, running its coroutines, errors as exit codes.

Every command module imports from here (and from :mod:`lockgate.cli.options`), never
from :mod:`lockgate.cli.main`, which imports them.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import shutil
import sys
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import click

from lockgate.api.app import App
from lockgate.errors import ConfigError, ConnectionFailed, InvalidArguments, LockgateError

T = TypeVar("T")
EXIT_USAGE = 2


def load_app(spec: str, url: str | None = None) -> App:
    """Import ``MODULE:ATTRIBUTE`` and return the App it names.

    Args:
        spec: ``MODULE:ATTRIBUTE``; the current directory is on the import path.
        url: the Redis URL the App uses instead of its own (``--url``), when given.

    Raises:
        click.BadParameter: the module or attribute is missing, or is not an App.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(f"expected MODULE:APP, got {spec!r}", param_hint="APP")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise click.BadParameter(f"cannot import {module_name!r}: {e}", param_hint="APP") from e
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise click.BadParameter(f"{spec!r} is not a lockgate App", param_hint="APP")
    if url:
        app.redis_url = url
    return app


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop when it is installed, else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def run_closing(app: App, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``work`` on a fresh event loop, and close the app's client of that loop."""

    async def closing() -> T:
        try:
            return await work()
        finally:
            await app.aclose()

    return run_async(closing())


@contextlib.contextmanager
def reported_errors(*usage: type[LockgateError]) -> Iterator[None]:
    """Turn lockgate's errors into one line on stderr and an exit code, not a traceback.

    Exit code 2 for what the user can fix (unreachable server, bad configuration, a
    missing extra, bad arguments, and the ``usage`` errors), 1 for the others.

    Args:
        usage: more error classes that count as the user's to fix here.
    """
    fixable: tuple[type[Exception], ...] = (
        ConnectionFailed, ConfigError, InvalidArguments, *usage,
    )  # fmt: skip
    try:
        yield
    except fixable as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_USAGE)
    except LockgateError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)


def consent(yes: bool, action: str) -> None:
    """Refuse ``action`` (one line, exit 2) when nobody is at a terminal to confirm it and
    ``--yes`` was not given: a script must say it means it, not get it by default."""
    if not yes and not sys.stdin.isatty():
        click.echo(
            f"error: not {action} without confirmation (stdin is not a terminal); pass --yes",
            err=True,
        )
        sys.exit(EXIT_USAGE)


def terminal_width() -> int:
    """Columns of the terminal; $COLUMNS when set, 80 when unknown (not a terminal)."""
    return shutil.get_terminal_size((80, 24)).columns
