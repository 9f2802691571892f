"""Logs for machines: JSON lines (``worker --log-format json``) and one line per finished
job (``worker --log-jobs``).

Job lines go to the ``lockgate.jobs`` logger at INFO, whatever ``--log-level`` says: that
level also lets redis-py's and asyncio's DEBUG lines through, and a user who wants a line
per job wants none of those. With JSON logs, a job line carries its fields at the top
level::

    {"time": "2025-01-31T12:00:00.123+00:00", "severity": "INFO", "logger": "lockgate.jobs",
     "message": "job 8f3c... (charge, default/critical) succeeded: attempt 1, 0.012s",
     "job_id": "8f3c...", "task": "charge", "queue": "default", "level": "critical",
     "attempt": 1, "outcome": "succeeded", "duration": 0.012}

When tracing is on (``lockgate.otel``), a line logged while a span is current carries
its ``trace_id`` and ``span_id`` (hex), and a job line those of the job's run.

``severity`` is the record's logging level (``level`` is the job's priority level);
``duration`` is the run's seconds, null when the job ended without running (a duplicate
skipped, a put-back, a job dead-lettered before its run). Any other ``extra=`` fields of a
record become top-level keys too.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from lockgate.core import tracing
from lockgate.core.logs import get_logger, traceback_extra
from lockgate.core.outcome import ALREADY_PROCESSED

if TYPE_CHECKING:
    from lockgate.api.app import App
    from lockgate.backend.broker import Delivery
    from lockgate.worker.runner import Ending

JOBS_LOGGER = "lockgate.jobs"
UNKNOWN_TASK = "?"  # an entry that could not be decoded names no task

Ended = Literal["succeeded", "retried", "dead_lettered", "cancelled", "skipped", "put_back"]

# What every LogRecord has; the rest of a record's attributes came with ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}


def ended_as(ending: Ending) -> Ended | None:
    """How a settled run ended, in the words of the metrics and the job lines (pure).

    Returns:
        ``succeeded``; ``retried`` (the attempt failed, another will run);
        ``dead_lettered`` (a final failure); ``cancelled`` (``App.cancel``, or expired);
        ``skipped`` (a duplicate of work already done, acknowledged without running);
        ``put_back`` (not run now and no attempt spent: another worker holds its claim,
        or it is rate limited); None for a run abandoned at a stop (left pending, it
        runs again).
    """
    outcome = ending.outcome
    if outcome.kind == "done":
        if outcome.cancelled:
            return "cancelled"
        return "skipped" if outcome.reason == ALREADY_PROCESSED else "succeeded"
    if outcome.kind == "dead":
        return "dead_lettered"
    if outcome.kind == "retry":
        return "retried" if outcome.error is not None else "put_back"
    return None


def level_name(app: App, delivery: Delivery) -> str:
    """The name of a delivery's level (its index when the app does not declare it)."""
    names = app.levels.names
    return names[delivery.level] if 0 <= delivery.level < len(names) else str(delivery.level)


def line_extra(ending: Ending, traceback: bool = False) -> dict[str, str]:
    """The ``extra`` of a line the worker logs about an ending: its run's trace ids (the
    run's span is no longer current there) and, with ``traceback``, its error's
    traceback, printed after the line (see :mod:`lockgate.core.logs`)."""
    error = ending.outcome.error
    extra = traceback_extra(error.traceback if traceback and error is not None else None)
    if ending.trace_ids is not None:
        extra["trace_id"], extra["span_id"] = ending.trace_ids
    return extra


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, severity, logger, message, the record's ``extra``
    fields, and ``exception`` (the traceback's text) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "severity": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in line:
                line[key] = value
        if tracing.hooks is not None and "trace_id" not in line:
            ids = tracing.hooks.current_ids()
            if ids is not None:
                line["trace_id"], line["span_id"] = ids
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def use_json(logger: logging.Logger | None = None) -> None:
    """Format every handler of ``logger`` (the root logger by default) as JSON lines."""
    for handler in (logger or logging.getLogger()).handlers:
        handler.setFormatter(JsonFormatter())


class JobLog:
    """A job watcher (see :mod:`lockgate.worker.events`) that logs one line per finished job on
    ``lockgate.jobs`` at INFO, with the fields job_id, task, queue, level, attempt,
    outcome (see :func:`ended_as`), duration, and error or reason when there is one.

    Args:
        app: the worker's app (for its level names).
    """

    def __init__(self, app: App) -> None:
        self._app = app
        self._log = get_logger(JOBS_LOGGER)

    def enable(self) -> JobLog:
        """Let the job lines through whatever the root logger's level (``--log-jobs``)."""
        self._log.setLevel(logging.INFO)
        return self

    def started(self, delivery: Delivery, now: float) -> None:
        """Nothing: a line is written when the job ends."""

    def settled(self, ending: Ending, owned: bool) -> None:
        """Log the ending (not a zombie's, which changed nothing)."""
        outcome = ended_as(ending)
        if not owned or outcome is None or not self._log.isEnabledFor(logging.INFO):
            return
        delivery, job = ending.delivery, ending.delivery.job
        duration = round(ending.finished - ending.started, 6) if ending.started else None
        fields: dict[str, Any] = {
            "job_id": delivery.job_id,
            "task": job.task if job is not None else UNKNOWN_TASK,
            "queue": delivery.queue,
            "level": level_name(self._app, delivery),
            "attempt": job.attempt if job is not None else 0,
            "outcome": outcome,
            "duration": duration,
        }
        if ending.trace_ids is not None:  # the run's span, no longer current here
            fields["trace_id"], fields["span_id"] = ending.trace_ids
        error = ending.outcome.error
        if error is not None:
            fields["error"] = f"{error.type}: {error.message}"
        elif ending.outcome.reason and outcome != "skipped":
            fields["reason"] = ending.outcome.reason
        took = "" if duration is None else f", {duration:.3f}s"
        self._log.info(
            "job %s (%s, %s/%s) %s: attempt %d%s",
            fields["job_id"], fields["task"], fields["queue"], fields["level"], outcome,
            fields["attempt"], took, extra=fields,
        )  # fmt: skip
