"""The job a task is running, reachable from inside the task through ``current_job()``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from datetime import timedelta
from types import TracebackType
from typing import Any, ParamSpec, Protocol, TypeVar, cast

from lockgate.core.progress import ProgressBoard, check_progress
from lockgate.errors import LockgateError

P = ParamSpec("P")
R = TypeVar("R")


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


class JobServices(Protocol):
    """What a running job asks of its App beyond claims: its parents' results in a flow,
    and steps whose results are kept (:class:`lockgate.api.flows.FlowServices`)."""

    def parent_results(self, job: JobContext) -> list[Any]: ...

    def run_step(
        self, job: JobContext, name: str, fn: Callable[..., Any], args: Any, kwargs: Any
    ) -> Any: ...

    async def run_step_async(
        self, job: JobContext, name: str, fn: Callable[..., Any], args: Any, kwargs: Any
    ) -> Any: ...


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
        flow: the id of the flow the job belongs to (``App.enqueue_flow``), else None.
        progress: where :meth:`set_progress` records (the worker's board; None outside
            a worker).
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
    flow: str | None = None
    services: JobServices | None = field(default=None, repr=False)
    progress: ProgressBoard | None = field(default=None, repr=False)
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
        flow: str | None = None,
        services: JobServices | None = None,
        progress: ProgressBoard | None = None,
    ) -> JobContext:
        """The context of a worker's run, as the constructor would build it, without a
        frozen dataclass's ``object.__setattr__`` per field (1.8 us a job, against 0.65)."""
        context = object.__new__(cls)
        context.__dict__.update(
            job_id=job_id, task=task, queue=queue, level=level, attempt=attempt,
            enqueued=enqueued, app=app, retry_window=retry_window,
            idempotency_ttl=idempotency_ttl, claimed_keys=set(), done_markers=[],
            holder=holder, steps=steps, flow=flow, services=services, progress=progress,
            _cancel=[],
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

    def set_progress(self, value: float, note: str | None = None) -> None:
        """Report how far the job is: ``App.job`` (``JobInfo.progress`` and
        ``progress_note``), ``lockgate job`` and the dashboard show it.

        It does not wait for Redis: it records the latest value, and the worker writes
        the last one recorded within 100 ms (one write however often it is called
        meanwhile), so a tight loop may call it on every item. The value is kept after
        the job ends, as long as its status (``App(status_ttl=...)``, ten minutes at
        least); a retry shows the last value of the attempt before until it reports its
        own. Outside a worker (in ``app.eager()``) and in a job run in a child process (a
        job delivered too often) it checks its arguments and records nothing.

        Args:
            value: from 0.0 (started) to 1.0 (finished).
            note: a short text for people (``"row 420 of 1,000"``), cut to 200
                characters.

        Raises:
            ValueError: ``value`` is not a real number from 0.0 to 1.0 (a ``bool`` or
                NaN neither), or ``note`` is not a str.
        """
        checked = check_progress(value, note)
        if self.progress is not None:
            self.progress.record(self.job_id, checked)

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

    def parent_results(self) -> list[Any]:
        """The results of the jobs this job of a flow waited for directly, in declaration
        order, typed by their tasks' return annotations (``[]`` for a job that waited for
        none, or is not in a flow). They are kept for the flow's lifetime, whatever the
        tasks' ``keep_result`` says.

        Raises:
            LockgateError: called outside a job run by a lockgate worker or eager block.
        """
        if self.flow is None:
            return []
        return self._services().parent_results(self)

    def run_step(self, name: str, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run ``fn(*args, **kwargs)`` at most once successfully for this job and step
        name, and return its result: a retry gets the stored result back without calling
        ``fn``; ``fn`` runs again only if an earlier run raised or died before its result
        was stored.

        It shares [step][lockgate.JobContext.step]'s claim (a step finished by
        ``job.step(name)`` has no result to give back: ``ResultUnavailable``), and keeps
        the result, JSON through msgspec, for the task's ``idempotency_ttl``, typed by
        ``fn``'s return annotation when read back.

        Raises:
            ClaimBusy: another run holds the step's claim (the worker puts the job back).
            ResultUnavailable: the step is done but its result is gone.
            SerializationError: the result has no JSON form (the step is not marked done).
        """
        return cast(R, self._services().run_step(self, name, fn, args, kwargs))

    async def run_step_async(
        self, name: str, fn: Callable[P, Any], /, *args: P.args, **kwargs: P.kwargs
    ) -> Any:
        """The async form of [run_step][lockgate.JobContext.run_step]: ``fn`` is awaited
        when it is a coroutine function, else run in a thread (off the event loop)."""
        return await self._services().run_step_async(self, name, fn, args, kwargs)

    def _services(self) -> JobServices:
        if self.services is None:
            raise LockgateError("this needs a job run by a lockgate worker (or app.eager())")
        return self.services


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
