"""The job a task is running, reachable from inside the task through ``current_job()``."""

from __future__ import annotations

import os
import uuid
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from datetime import timedelta
from types import TracebackType
from typing import Any, Protocol

from lockgate.errors import LockgateError


class StepClaim(Protocol):
    """An idempotency claim, used as ``with`` or ``async with`` (what
    [JobContext.step][lockgate.JobContext.step] returns:
    :class:`lockgate.api.idempotency.Claim`)."""

    def __enter__(self) -> Any: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def __aenter__(self) -> Any: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class StepClaims(Protocol):
    """Makes the claim of one step of a job (:func:`lockgate.api.idempotency.step_claim`
    on the job's App)."""

    def __call__(self, job: JobContext, name: str, ttl: float | timedelta | None) -> StepClaim: ...


@dataclass(frozen=True)
class Holder:
    """The worker process whose runs hold the claims made in them.

    Such a claim is taken from it only once it is known dead (its liveness record lapsed
    while Redis served, see :mod:`lockgate.worker.liveness`), not merely because the claim's
    lease lapsed while Redis was away: its value names the worker and its liveness timing
    (:meth:`token`).

    Attributes:
        consumer: the worker's consumer name (what its liveness beats name).
        quiet_ms: its liveness lease, in ms (beats must come that long after an outage
            before it can be judged dead).
        gap_ms: the longest silence of every worker that is not an outage, in ms.
        pid: the worker's process (a claim made in a child process is not held this way:
            the child may die while the worker lives).
    """

    consumer: str
    quiet_ms: int
    gap_ms: int
    pid: int = field(default_factory=os.getpid)

    def token(self, hold_ms: int) -> str:
        """A new owner token for a claim held by this worker: the claim outlives its lease
        by ``hold_ms`` (see ``lua/_take_claim.lua``)."""
        return f"w{hold_ms}.{self.quiet_ms}.{self.gap_ms}.{uuid.uuid4().hex}.{self.consumer}"

    def here(self) -> bool:
        """Whether the caller runs in the worker's own process."""
        return self.pid == os.getpid()


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
        holder: the worker that holds the claims made in this run (None in eager runs).
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
    app: object = field(default=None, repr=False)  # the App (claims check it is theirs)
    retry_window: float = 0.0
    idempotency_ttl: float = 86_400.0
    claimed_keys: set[str] = field(default_factory=set, repr=False)
    done_markers: list[float] = field(default_factory=list, repr=False)
    holder: Holder | None = field(default=None, repr=False)
    steps: StepClaims | None = field(default=None, repr=False)
    # Set once from the loop, read from the run's thread too: a list, not an Event (an
    # Event costs a Condition and a lock per run, and nothing waits on this).
    _cancel: list[bool] = field(default_factory=list, repr=False)

    @classmethod
    def of_run(
        cls,
        job_id: str,
        task: str,
        queue: str,
        level: str,
        attempt: int,
        enqueued: float,
        *,
        app: object,
        retry_window: float,
        idempotency_ttl: float,
        holder: Holder | None,
        steps: StepClaims | None,
    ) -> JobContext:
        """The context of a worker's run, as the constructor would build it, without a
        frozen dataclass's ``object.__setattr__`` per field (1.8 us a job, against 0.65)."""
        context = object.__new__(cls)
        context.__dict__.update(
            job_id=job_id, task=task, queue=queue, level=level, attempt=attempt,
            enqueued=enqueued, app=app, retry_window=retry_window,
            idempotency_ttl=idempotency_ttl, claimed_keys=set(), done_markers=[],
            holder=holder, steps=steps, _cancel=[],
        )  # fmt: skip
        return context

    @property
    def cancelled(self) -> bool:
        """Whether ``App.cancel`` asked this run to stop (see the class docstring)."""
        return bool(self._cancel)

    def request_cancel(self) -> None:
        """Ask this run to stop (the worker's side of ``App.cancel``)."""
        if not self._cancel:
            self._cancel.append(True)

    def step(self, name: str, *, ttl: float | timedelta | None = None) -> StepClaim:
        """An idempotency claim scoped to this job and one external step of it.

        Its done marker lasts ``ttl``, by default the task's ``idempotency_ttl``.

        Each step has its own key, so a retry reruns exactly the steps that did not
        finish. A finished step raises [StepDone][lockgate.StepDone] (an
        ``AlreadyProcessed``) on entry; write ``with suppress(AlreadyProcessed),
        job.step("email"):`` to skip it and go on with the next step.

        Raises:
            LockgateError: the job does not belong to an App's worker.
        """
        if self.steps is None:
            raise LockgateError("job.step() needs a job run by a lockgate worker")
        return self.steps(self, name, ttl)


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
