"""The job a task is running, reachable from inside the task through ``current_job()``."""

from __future__ import annotations

import threading
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from lockgate.errors import LockgateError
from lockgate.keys import Keys

if TYPE_CHECKING:
    from lockgate.app import App
    from lockgate.idempotency import Claim


@dataclass(frozen=True, eq=False)
class JobContext:
    """What a running task knows about its job.

    Attributes:
        job_id: stable across retries and redeliveries.
        task: task name.
        queue: queue name.
        level: priority level name.
        attempt: 1 for the first run.
        enqueued: when the job was enqueued (Unix seconds, producer clock).
        retry_window: longest span of the task's retry delays, in seconds.
        idempotency_ttl: the task's done-marker TTL, the default of its steps.
        done_markers: expiry times of the done markers this run wrote.
        cancelled: whether ``App.cancel`` asked this run to stop. An async run also gets
            ``CancelledError`` at its next await; a sync one should look now and then:
            raising anything then ends the job cancelled, returning ends it done.
    """

    job_id: str
    task: str
    queue: str
    level: str
    attempt: int
    enqueued: float
    app: App | None = field(default=None, repr=False)
    retry_window: float = 0.0
    idempotency_ttl: float = 86_400.0
    claimed_keys: set[str] = field(default_factory=set, repr=False)
    done_markers: list[float] = field(default_factory=list, repr=False)
    _cancel: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def cancelled(self) -> bool:
        """Whether ``App.cancel`` asked this run to stop (see the class docstring)."""
        return self._cancel.is_set()

    def request_cancel(self) -> None:
        """Ask this run to stop (the worker's side of ``App.cancel``)."""
        self._cancel.set()

    def step(self, name: str, *, ttl: float | timedelta | None = None) -> Claim:
        """An idempotency claim scoped to this job and one external step of it.

        Its done marker lasts ``ttl``, by default the task's ``idempotency_ttl``.

        Each step has its own key, so a retry reruns exactly the steps that did not
        finish. A finished step raises [StepDone][lockgate.StepDone] (an
        ``AlreadyProcessed``) on entry; write ``with suppress(AlreadyProcessed),
        job.step("email"):`` to skip it and go on with the next step.

        Raises:
            LockgateError: the job does not belong to an App's worker.
        """
        from lockgate.idempotency import Claim

        if self.app is None:
            raise LockgateError("job.step() needs a job run by a lockgate worker")
        key = Keys.step_claim_name(self.task, self.job_id, name)
        return Claim(
            self.app, key, ttl=self.idempotency_ttl if ttl is None else ttl, step=name,
            older_key=Keys.older_step_claim_name(self.task, self.job_id, name), legacy_scope=key,
        )  # fmt: skip


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


def running_job() -> JobContext | None:
    """The job being run by the calling task, or None outside one."""
    return _current.get()


def set_current(job: JobContext | None) -> Token[JobContext | None]:
    """Bind the job for the running task (worker use); the token undoes it."""
    return _current.set(job)


def reset_current(token: Token[JobContext | None]) -> None:
    """Undo a :func:`set_current` (eager runs, which run inside the caller's context)."""
    _current.reset(token)
