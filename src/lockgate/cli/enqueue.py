"""``lockgate enqueue``: enqueue one run of a task from the command line."""

from __future__ import annotations

import json
from typing import Any

import click

from lockgate.cli.common import load_app, reported_errors
from lockgate.cli.options import log_level_option, url_option


@click.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.argument("task_name", metavar="TASK")
@click.option("--args", "args_json", default="[]", help="Positional arguments, a JSON list.")
@click.option("--kwargs", "kwargs_json", default="{}", help="Keyword arguments, a JSON object.")
@click.option("--priority", default=None, help="Level for this job (default: the task's).")
@click.option("--job-id", default=None, help="Stable job id (a duplicate is not enqueued).")
@click.option("--delay", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Seconds before the job may run.")  # fmt: skip
@url_option
@log_level_option
def enqueue(
    app_spec: str,
    task_name: str,
    args_json: str,
    kwargs_json: str,
    priority: str | None,
    job_id: str | None,
    delay: float | None,
    url: str | None,
) -> None:
    """Enqueue one run of TASK."""
    app = load_app(app_spec, url)
    task = app.tasks.get(task_name)
    if task is None:
        known = ", ".join(sorted(app.tasks)) or "none"
        raise click.BadParameter(f"unknown task {task_name!r} (known: {known})", param_hint="TASK")
    args = _json_arg(args_json, list, "--args")
    kwargs = _json_arg(kwargs_json, dict, "--kwargs")
    with reported_errors():
        args, kwargs = task.prepare(args, kwargs)  # JSON text to the annotated types
        result = task.enqueue(*args, job_id=job_id, priority=priority, delay=delay, **kwargs)
    state = "enqueued" if result.created else "already queued or running (not enqueued)"
    if result.created and delay:
        state += f", due in {delay:g} s"
    click.echo(f"{result.job_id} {state}")


def _json_arg(value: str, kind: type, option: str) -> Any:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f"not JSON: {e}", param_hint=option) from e
    if not isinstance(parsed, kind):
        raise click.BadParameter(f"must be a JSON {kind.__name__}", param_hint=option)
    return parsed
