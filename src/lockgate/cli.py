"""The ``lockgate`` command: worker, enqueue, stats, demo."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import sys
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from lockgate.app import App
from lockgate.broker import masked
from lockgate.config import REDIS_URL_ENV, WorkerConfig
from lockgate.errors import ConfigError, ConnectionFailed, InvalidArguments, LockgateError
from lockgate.inspect import queue_stats
from lockgate.worker import Worker

T = TypeVar("T")
EXIT_USAGE = 2


def load_app(spec: str) -> App:
    """Import ``MODULE:ATTRIBUTE`` and return the App it names.

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
    return app


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop when it is installed, else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


@contextlib.contextmanager
def reported_errors() -> Iterator[None]:
    """Turn lockgate's errors into one line on stderr and exit code 2, not a traceback."""
    try:
        yield
    except (ConnectionFailed, ConfigError, InvalidArguments) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_USAGE)
    except LockgateError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)


def _use_url(app: App, url: str | None) -> None:
    if url:
        app.redis_url = url


@click.group()
@click.option("--log-level", default="INFO", show_default=True, help="Logging level.")
def main(log_level: str) -> None:
    """lockgate: background jobs on Redis Streams with priorities and idempotency."""
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


url_option = click.option(
    "--url", default=None, help=f"Redis URL (overrides the app's and ${REDIS_URL_ENV})."
)


@main.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option("--policy", type=click.Choice(["weighted", "strict"]), default="weighted",
              show_default=True, help="How levels share the worker.")  # fmt: skip
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--queues", default="", help="Comma-separated queues (default: all the app's).")
@click.option("--grace-period", type=float, default=30.0, show_default=True,
              help="Seconds running jobs get to finish on SIGTERM/SIGINT.")  # fmt: skip
@click.option("--embedded", is_flag=True, help="Run a private Redis-compatible server.")
@url_option
def worker(
    app_spec: str,
    policy: str,
    concurrency: int,
    queues: str,
    grace_period: float,
    embedded: bool,
    url: str | None,
) -> None:
    """Run a worker for MODULE:APP until SIGTERM or SIGINT."""
    app = load_app(app_spec)
    _use_url(app, url)
    with reported_errors(), contextlib.ExitStack() as stack:
        if embedded:
            from lockgate.embedded import EmbeddedServer

            server = stack.enter_context(EmbeddedServer())
            app.redis_url = server.url
            click.echo(f"embedded server at {server.url}", err=True)
        config = WorkerConfig(
            concurrency=concurrency,
            policy="strict" if policy == "strict" else "weighted",
            queues=tuple(q for q in queues.split(",") if q),
            grace_period=grace_period,
        )
        run_async(Worker(app, config).run(install_signal_handlers=True))


@main.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.argument("task_name", metavar="TASK")
@click.option("--args", "args_json", default="[]", help="Positional arguments, a JSON list.")
@click.option("--kwargs", "kwargs_json", default="{}", help="Keyword arguments, a JSON object.")
@click.option("--priority", default=None, help="Level for this job (default: the task's).")
@click.option("--job-id", default=None, help="Stable job id (a duplicate is not enqueued).")
@url_option
def enqueue(
    app_spec: str,
    task_name: str,
    args_json: str,
    kwargs_json: str,
    priority: str | None,
    job_id: str | None,
    url: str | None,
) -> None:
    """Enqueue one run of TASK."""
    app = load_app(app_spec)
    _use_url(app, url)
    task = app.tasks.get(task_name)
    if task is None:
        known = ", ".join(sorted(app.tasks)) or "none"
        raise click.BadParameter(f"unknown task {task_name!r} (known: {known})", param_hint="TASK")
    args = _json_arg(args_json, list, "--args")
    kwargs = _json_arg(kwargs_json, dict, "--kwargs")
    with reported_errors():
        result = task.enqueue(*args, job_id=job_id, priority=priority, **kwargs)
    state = "enqueued" if result.created else "already queued or running (not enqueued)"
    click.echo(f"{result.job_id} {state}")


def _json_arg(value: str, kind: type, option: str) -> Any:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f"not JSON: {e}", param_hint=option) from e
    if not isinstance(parsed, kind):
        raise click.BadParameter(f"must be a JSON {kind.__name__}", param_hint=option)
    return parsed


@main.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@url_option
def stats(app_spec: str, as_json: bool, url: str | None) -> None:
    """Per queue and level: waiting, pending, consumers, oldest wait."""
    app = load_app(app_spec)
    _use_url(app, url)

    async def collect() -> list[Any]:
        try:
            return await queue_stats(app)
        finally:
            await app.aclose()

    with reported_errors():
        rows = run_async(collect())
    if as_json:
        click.echo(json.dumps([row.as_dict() for row in rows], indent=2))
        return
    table = Table(title=f"lockgate {app.namespace} @ {masked(app.redis_url)}")
    for column in ("queue", "level", "waiting", "pending", "consumers", "oldest wait ms"):
        table.add_column(column, justify="left" if column in ("queue", "level") else "right")
    for row in rows:
        table.add_row(
            row.queue, row.level, str(row.waiting), str(row.pending),
            _dash(row.consumers), _dash(row.oldest_wait_ms),
        )  # fmt: skip
    Console().print(table)


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)


@main.command()
@click.option("--url", default=None,
              help=f"Redis URL (default: ${REDIS_URL_ENV}, else an embedded server).")  # fmt: skip
def demo(url: str | None) -> None:
    """The lesson's scenario: a low-priority flood with e-mails and payments arriving."""
    from lockgate.demo import run_demo

    with reported_errors():
        run_demo(url or os.environ.get(REDIS_URL_ENV))
