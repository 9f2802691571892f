"""The job a task is running, reachable from inside the task through ``current_job()``."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

from lockgate.errors import LockgateError


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a running task knows about its job.

    Attributes:
        job_id: stable across retries and redeliveries.
        task: task name.
        queue: queue name.
        level: priority level name.
        attempt: 1 for the first run.
        enqueued: when the job was enqueued (Unix seconds, producer clock).
    """

    job_id: str
    task: str
    queue: str
    level: str
    attempt: int
    enqueued: float


_current: ContextVar[JobContext | None] = ContextVar("lockgate_current_job", default=None)


def current_job() -> JobContext:
    """The job being run by the calling task.

    Raises:
        LockgateError: called outside a task run by a lockgate worker.
    """
    job = _current.get()
    if job is None:
        raise LockgateError("current_job() is only available inside a running lockgate task")
    return job


def set_current(job: JobContext | None) -> None:
    """Bind the job for the running task (worker use)."""
    _current.set(job)
