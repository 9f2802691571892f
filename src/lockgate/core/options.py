"""How one job is enqueued, apart from its task's arguments: the options of
[Task.using][lockgate.Task.using] and ``enqueue(job_id=..., priority=..., delay=...,
eta=...)``, when the job may start, and the hints for the keywords other job libraries
use (pure, no I/O).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import NamedTuple

from lockgate.core.config import seconds
from lockgate.errors import ConfigError

# The keywords a plain enqueue takes for itself: a task parameter of one of these names
# cannot be passed to it. (``queue`` is an option of ``using`` only: a plain enqueue
# passes ``queue=`` to the task.)
OPTION_NAMES = ("job_id", "priority", "delay", "eta")

# Keywords of Celery's ``apply_async`` (and its ``delay``'s habits), with what lockgate
# calls them: the hint an enqueue that got one it cannot bind gives.
CELERY_HINTS = {
    "countdown": "lockgate's countdown is delay=SECONDS (or a timedelta)",
    "queue": "a per-call queue is task.using(queue=...).enqueue(...)",
    "args": "pass the task's arguments themselves: task.enqueue(*args, **kwargs)",
    "kwargs": "pass the task's arguments themselves: task.enqueue(*args, **kwargs)",
    "expires": "expiry is a task option: @app.task(expires=SECONDS)",
    "retry": "a job's retries are a task option: @app.task(retries=N)",
    "retry_policy": "a job's retries are task options: @app.task(retries=N, backoff=...)",
    "time_limit": "a run's time limit is a task option: @app.task(timeout=SECONDS)",
    "soft_time_limit": "a run's time limit is a task option: @app.task(timeout=SECONDS)",
    "task_id": "lockgate's task_id is job_id=...",
    "routing_key": "a per-call queue is task.using(queue=...).enqueue(...)",
}

# Celery's ways to send a task, looked up on a Task: what lockgate calls them.
CELERY_METHODS = {
    "delay": "task.enqueue(*args, **kwargs)",
    "apply_async": "task.using(delay=..., eta=..., priority=..., queue=...).enqueue(*args, "
    "**kwargs)",
    "s": "lockgate.chain(task.message(...), ...) with task.message(*args, **kwargs)",
    "si": "lockgate.chain(task.message(...), ...) with task.message(*args, **kwargs)",
    "signature": "task.message(*args, **kwargs)",
}


class EnqueueOptions(NamedTuple):
    """How one job is enqueued (see [Task.using][lockgate.Task.using]); a tuple, cheap
    to make on every enqueue.

    Attributes:
        job_id: its id; None: a random one.
        priority: its level; None: its task's.
        delay: seconds (or a timedelta) before it may run.
        eta: when it may run (a timezone-aware datetime).
        queue: the queue it goes to; None: its task's.
    """

    job_id: str | None = None
    priority: str | None = None
    delay: float | timedelta | None = None
    eta: datetime | None = None
    queue: str | None = None


def start_delay(delay: float | timedelta | None, eta: datetime | None, now: float) -> float:
    """Seconds from ``now`` (a Unix time) until a job may run.

    Raises:
        ConfigError: both given, a negative delay, or an ``eta`` that is no
            timezone-aware datetime (a naive one is refused: it would be read in some
            time zone the caller may not mean).
    """
    if delay is not None and eta is not None:
        raise ConfigError("give delay or eta, not both")
    if eta is not None:
        check_eta(eta)
        return max(0.0, eta.timestamp() - now)
    return seconds(delay, "delay") if delay is not None else 0.0


def check_eta(eta: object) -> None:
    """Refuse an ``eta`` that is not a timezone-aware datetime.

    Raises:
        ConfigError: a number (Celery's habit: lockgate's is ``delay=``), or a naive
            datetime.
    """
    if not isinstance(eta, datetime):
        raise ConfigError(
            f"eta must be a timezone-aware datetime, not {type(eta).__name__} {eta!r}: "
            "for a number of seconds from now, give delay=SECONDS"
        )
    if eta.tzinfo is None or eta.tzinfo.utcoffset(eta) is None:
        raise ConfigError(
            f"eta {eta.isoformat()} has no time zone: give a timezone-aware datetime, "
            "e.g. datetime.now(UTC) + timedelta(minutes=5) or "
            "datetime(2030, 1, 1, 9, 0, tzinfo=ZoneInfo('Europe/Paris'))"
        )


def option_named(parameters: Iterable[inspect.Parameter]) -> list[str]:
    """The parameters of a task named like an enqueue option (which a plain ``enqueue``
    takes for itself: such arguments go through ``task.using().enqueue(...)``)."""
    return [
        p.name
        for p in parameters
        if p.name in OPTION_NAMES
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]


def celery_hints(names: Iterable[str], signature: inspect.Signature) -> list[str]:
    """For keywords an enqueue got that bind to no parameter of the task, what lockgate
    calls those Celery keywords (none when the task takes them, or takes ``**kwargs``)."""
    parameters = signature.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return []
    hints = [
        f"{name}=: {CELERY_HINTS[name]}"
        for name in names
        if name in CELERY_HINTS and name not in parameters
    ]
    return list(dict.fromkeys(hints))
