"""``lockgate job MODULE:APP JOB_ID``: what is known of one job (``App.job``)."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

import click
import msgspec

from lockgate.api.app import App
from lockgate.cli.common import EXIT_USAGE, load_app, reported_errors, run_closing
from lockgate.cli.options import log_level_option, url_option
from lockgate.core.masking import mask_value
from lockgate.core.status import JobInfo
from lockgate.ops.jobs import job_secret, shown_args, stored_job


def job_fields(info: JobInfo, secret: bool = False, arguments: str | None = None) -> dict[str, Any]:
    """A job as ``lockgate job --json`` prints it (pure): id, status, task, queue (while it
    waits or runs), ``arguments`` (their JSON while it waits, is delayed or runs, as
    given: masked for a secret job; null once it ended: they are not kept), attempts,
    times (ISO 8601, UTC; null when not known), reason, key, ``progress`` and
    ``progress_note`` (null when never reported), and, when its task
    keeps them, ``result`` (as JSON, its repr when it has no JSON form; masked when
    ``secret``, see :mod:`lockgate.core.masking`) and ``error`` (type, message,
    traceback: as raised, even when ``secret``)."""
    error = info.error
    result = _json_value(info.result) if info.result_kept and error is None else None
    return {
        "id": info.id,
        "status": info.status,
        "task": info.task or None,
        "queue": info.queue or None,
        "arguments": arguments,
        "attempts": info.attempts,
        "enqueued_at": _iso(info.enqueued_at),
        "started_at": _iso(info.started_at),
        "finished_at": _iso(info.finished_at),
        "reason": info.reason or None,
        "key": info.key,
        "progress": info.progress,
        "progress_note": info.progress_note,
        "result_kept": info.result_kept,
        "result": mask_value(result, secret) if result is not None else None,
        "error": None if error is None else {
            "type": error.type, "message": error.message, "traceback": error.traceback,
        },
    }  # fmt: skip


def job_lines(info: JobInfo, secret: bool = False, arguments: str | None = None) -> list[str]:
    """A job as ``lockgate job`` prints it (pure): one ``name: value`` line per field
    known (``progress: 42% (note)``), the error's traceback last; a ``secret`` job's
    arguments and result masked."""
    fields = job_fields(info, secret, arguments)
    lines = [f"job {info.id}: {info.status}"]
    shown = (
        "task", "queue", "arguments", "attempts", "enqueued_at", "started_at", "finished_at",
        "reason", "key",
    )  # fmt: skip
    lines += [f"{name}: {fields[name]}" for name in shown if fields[name] is not None]
    if info.progress is not None:
        note = f" ({info.progress_note})" if info.progress_note else ""
        lines.append(f"progress: {info.progress:.0%}{note}")
    if fields["result_kept"] and info.error is None:
        lines.append(f"result: {json.dumps(fields['result'])}")
    if info.error is not None:
        lines.append(f"error: {info.error.type}: {info.error.message}")
        if info.error.traceback:
            lines += ["", info.error.traceback.rstrip("\n")]
    return lines


@click.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.argument("job_id", metavar="JOB_ID")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@url_option
@log_level_option
def job(app_spec: str, job_id: str, as_json: bool, url: str | None) -> None:
    """Show job JOB_ID of MODULE:APP: its status (waiting, delayed, running, done, dead,
    cancelled), task, arguments (until it ends), attempts, times, progress, and its
    result or error when its task keeps them (``keep_result``; a ``secret_args`` task's
    arguments and result are masked).

    Exits 2 when the job is unknown (never enqueued, or it ended longer ago than the app
    keeps statuses, ``status_ttl``).
    """
    app = load_app(app_spec, url)
    with reported_errors():
        info, secret, arguments = run_closing(app, lambda: _read(app, job_id))
    if info.status == "unknown":
        click.echo(
            f"error: no job with id {job_id!r} (never enqueued, or it ended longer ago "
            "than the app keeps statuses: status_ttl)",
            err=True,
        )
        sys.exit(EXIT_USAGE)
    if as_json:
        click.echo(json.dumps(job_fields(info, secret, arguments), indent=2))
        return
    click.echo("\n".join(job_lines(info, secret, arguments)))


async def _read(app: App, job_id: str) -> tuple[JobInfo, bool, str | None]:
    """A job's status, whether it is shown masked (its stored job says so while it is
    live; the app's declaration of its task, always), and its arguments as shown (while
    it is live)."""
    info = await app.job_async(job_id)
    job = await stored_job(app, info)
    secret = job_secret(app, info, job)
    return info, secret, None if job is None else shown_args(job, None, secret)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat()


def _json_value(value: Any) -> Any:
    """A result as JSON data: a record (a dataclass, a model) becomes its fields."""
    try:
        return msgspec.to_builtins(value)
    except TypeError:
        return repr(value)
