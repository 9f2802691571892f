"""Workflows on an App: ``enqueue_flow``, what a flow is now (``App.flow``), its result,
its cancellation, and what a running job of one asks (``parent_results``, ``run_step``).

The flow itself is a value (:mod:`lockgate.core.flows`); its records and barriers live in
Redis (:mod:`lockgate.backend.flow_store`, ``backend/lua/_flow.lua``), moved by the settle
call of each of its jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, TypeAlias

import msgspec

from lockgate.api.task import Task
from lockgate.backend.broker import Outgoing
from lockgate.backend.flow_store import FlowRecord, FlowSummary, StagedJob
from lockgate.backend.lua import ScriptCall
from lockgate.backend.store import Store
from lockgate.core import codec, flows, tracing
from lockgate.core.flows import decode_result
from lockgate.core.message import Message
from lockgate.core.outcome import ErrorInfo
from lockgate.core.sansio import drive, drive_async
from lockgate.core.status import (
    CancelOutcome,
    FinalRecord,
    JobInfo,
    Poll,
    ResultRecord,
    Status,
    cancel_outcome,
    moment,
)
from lockgate.errors import (
    ConfigError,
    JobCancelled,
    JobFailed,
    OutcomeUnknown,
    ResultUnavailable,
    SerializationError,
)

# A flow's jobs are named <flow id>.<n>, within a job id's limit.
MAX_FLOW_ID_BYTES = codec.MAX_JOB_ID_BYTES - 16
# An eager flow (``App.eager``): its plan, and each job's end (None: it did not run).
EagerFlow: TypeAlias = tuple[flows.FlowPlan, list[JobInfo | None]]
FlowState = Literal["waiting", "running", "done", "failed", "cancelled", "unknown"]


class FlowHost(Protocol):
    """What flows use of their App (:class:`lockgate.api.app.App`)."""

    @property
    def store(self) -> Store: ...

    @property
    def tasks(self) -> Mapping[str, Task[Any, Any]]: ...

    @property
    def partitions(self) -> int: ...

    @property
    def flow_ttl_ms(self) -> int: ...

    def outgoing(self, message: Message) -> Outgoing: ...

    def job(self, job_id: str) -> JobInfo: ...

    async def job_async(self, job_id: str) -> JobInfo: ...

    @property
    def status_ttl_ms(self) -> int: ...


@dataclass(frozen=True, slots=True)
class FlowJob:
    """One job of a flow (:class:`FlowInfo`).

    Attributes:
        id: its id (``<flow id>.<position>``).
        task: its task.
        state: waiting (for its parents, or in its queue), delayed, running, done, dead,
            cancelled or unknown, as [App.job][lockgate.App.job] says.
        waits_on: the ids of the jobs it waits for, in declaration order.
    """

    id: str
    task: str
    state: Status
    waits_on: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FlowInfo:
    """What is known of a flow ([App.flow][lockgate.App.flow]).

    Attributes:
        flow_id: its id.
        state: ``waiting`` (no job started), ``running``, ``done`` (every job
            succeeded), ``failed`` (a job was dead-lettered: replaying its dead letter
            resumes the flow), ``cancelled``, or ``unknown`` (never enqueued, or ended
            longer ago than ``App(flow_ttl=...)``).
        jobs: its jobs, in declaration order.
        created_at: when it was enqueued (the server's clock).
    """

    flow_id: str
    state: FlowState
    jobs: tuple[FlowJob, ...] = ()
    created_at: datetime | None = None

    @property
    def waits_on(self) -> dict[str, tuple[str, ...]]:
        """Which jobs wait on which: each job's id -> the ids of the jobs it waits for."""
        return {job.id: job.waits_on for job in self.jobs}


@dataclass(frozen=True, slots=True)
class FlowResult:
    """What ``enqueue_flow`` did, and a handle on the flow.

    Attributes:
        flow_id: the flow's id (generated when the caller gave none).
        created: False when a flow with this id existed (nothing was enqueued again).
        job_ids: every job of the flow, in declaration order.
    """

    flow_id: str
    created: bool
    job_ids: list[str]
    app: FlowOps | None = field(default=None, repr=False, compare=False)
    # An eager run's plan and jobs' ends (``App.eager``): the handle answers from them, in
    # or out of the block.
    ran: EagerFlow | None = field(default=None, repr=False, compare=False)

    def _ops(self) -> FlowOps:
        if self.app is None:
            raise ConfigError("this FlowResult was made by hand: it knows no App")
        return self.app

    def info(self) -> FlowInfo:
        """What is known of the flow now (see [App.flow][lockgate.App.flow])."""
        if self.ran is not None:
            return _eager_info(self.flow_id, self.ran)
        return self._ops().info(self.flow_id)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the flow to end and return its final result: a chain's last step's, a
        group's list of its steps' results, a ``then`` step's own.

        Raises:
            JobFailed: a job of it was dead-lettered (the error is that job's).
            JobCancelled: it was cancelled.
            TimeoutError: it did not end within ``timeout`` seconds.
            ResultUnavailable: the flow is unknown (or expired).
        """
        if self.ran is not None:
            return _eager_result(self.flow_id, self.ran)
        return self._ops().result(self.flow_id, timeout)

    async def result_async(self, timeout: float | None = None) -> Any:
        """Async [result][lockgate.FlowResult.result]."""
        if self.ran is not None:
            return _eager_result(self.flow_id, self.ran)
        return await self._ops().result_async(self.flow_id, timeout)


def flow_state(record: FlowRecord | None, started: bool) -> FlowState:
    """A flow's state from its record, and whether a job of it ran or runs (pure)."""
    if record is None:
        return "unknown"
    if record.cancelled:
        return "cancelled"
    if record.dead:
        return "failed"
    if len(record.done) >= record.total:
        return "done"
    return "running" if record.done or started else "waiting"


class FlowOps:
    """The App's flow operations (``App.enqueue_flow``, ``App.flow``, ...)."""

    def __init__(self, app: FlowHost) -> None:
        self._app = app
        # Eager flows (``App.eager``): per flow, its plan and its jobs' ends.
        self.eager: dict[str, EagerFlow] = {}
        self._cancelling: set[str] = set()  # flows whose queued jobs cancel() cancels now

    # enqueue

    def plan(self, flow: flows.Step, flow_id: str | None) -> flows.FlowPlan:
        """The flow's jobs under its id (generated when None), checked.

        Raises:
            ConfigError: see :func:`lockgate.core.flows.plan`; or a task with a per-key
                limit in a flow of a partitioned namespace.
        """
        name = os.urandom(16).hex() if flow_id is None else codec.check_job_id(flow_id)
        if len(name.encode()) > MAX_FLOW_ID_BYTES:  # its jobs' ids add ".<n>"
            raise SerializationError(
                f"flow_id {name[:40]!r}... is longer than {MAX_FLOW_ID_BYTES} bytes"
            )
        planned = flows.plan(flow, name)
        if self._app.partitions > 1:
            for node in planned.nodes:
                task = self._app.tasks.get(node.message.job.task)
                if task is not None and (task.key_concurrency or task.key_rate):
                    raise ConfigError(
                        f"task {task.name!r} has a key_concurrency or key_rate_limit: its "
                        "jobs live in their key's partition, a flow's in the flow's, so it "
                        "cannot be in a flow with App(partitions > 1)"
                    )
        return planned

    def _staged(
        self, planned: flows.FlowPlan, messages: Sequence[Message] | None = None
    ) -> tuple[list[StagedJob], bytes]:
        """The flow's jobs staged: its nodes' ``messages`` (default: the nodes' own)."""
        nodes = planned.nodes
        if messages is None:
            messages = [node.message for node in nodes]
        tasks = [node.message.job.task for node in nodes]
        staged = [
            StagedJob(
                self._app.outgoing(message),
                [(p, tasks[p]) for p in node.parents],
                node.children,
            )
            for node, message in zip(nodes, messages, strict=True)
        ]
        return staged, msgspec.json.encode(tasks)

    def enqueue(self, flow: flows.Step, flow_id: str | None) -> FlowResult:
        """[App.enqueue_flow][lockgate.App.enqueue_flow]."""
        with self._calls(flow, flow_id) as (planned, calls, commit), _naming(planned.flow_id):
            created = self._app.store.flows.enqueue(
                planned.flow_id, calls, commit, planned.job_ids, _first_queues(planned)
            )
        return FlowResult(planned.flow_id, created, planned.job_ids, self)

    async def enqueue_async(self, flow: flows.Step, flow_id: str | None) -> FlowResult:
        """Async :meth:`enqueue`."""
        with self._calls(flow, flow_id) as (planned, calls, commit), _naming(planned.flow_id):
            created = await self._app.store.flows.enqueue_async(
                planned.flow_id, calls, commit, planned.job_ids, _first_queues(planned)
            )
        return FlowResult(planned.flow_id, created, planned.job_ids, self)

    @contextlib.contextmanager
    def _calls(
        self, flow: flows.Step, flow_id: str | None
    ) -> Iterator[tuple[flows.FlowPlan, list[ScriptCall], ScriptCall]]:
        """The flow planned, and the calls that stage and commit it, inside the span of
        its enqueue when traced (each job carries that span's context)."""
        planned = self.plan(flow, flow_id)
        with tracing.sending([n.message for n in planned.nodes], planned.flow_id) as messages:
            staged, tasks = self._staged(planned, messages)
            calls, commit = self._app.store.flows.enqueue_calls(
                planned.flow_id, staged, planned.shape_json(), tasks, self._app.flow_ttl_ms
            )
            yield planned, calls, commit

    def ran_eagerly(
        self, planned: flows.FlowPlan, run: Callable[[codec.Job], JobInfo]
    ) -> FlowResult:
        """Run a flow's jobs inline in declaration order (``App.eager``): a job runs once
        each job it waits for ended done; the others never run."""
        ends: list[JobInfo | None] = [None] * len(planned.nodes)
        self.eager[planned.flow_id] = (planned, ends)
        for position, node in enumerate(planned.nodes):
            if all(_done(ends[p]) for p in node.parents):
                ends[position] = run(node.message.job)
        return FlowResult(planned.flow_id, True, planned.job_ids, self, (planned, ends))

    # reading

    def info(self, flow_id: str) -> FlowInfo:
        """[App.flow][lockgate.App.flow]."""
        return drive(self._info_steps(flow_id), _do)

    async def info_async(self, flow_id: str) -> FlowInfo:
        """Async :meth:`info`."""
        return await drive_async(self._info_steps(flow_id), _do_async)

    def _info_steps(self, flow_id: str) -> Generator[_Ask, Any, FlowInfo]:
        if flow_id in self.eager:
            return _eager_info(flow_id, self.eager[flow_id])
        record = yield _Ask(self._app.store.flows, "read", flow_id)
        if record is None:
            return FlowInfo(flow_id, "unknown")
        asked = {}
        for p in _queued(record):
            asked[p] = yield _Ask(self._app, "job", flows.job_id(flow_id, p))
        return _info(flow_id, record, asked)

    def result(self, flow_id: str, timeout: float | None) -> Any:
        """[FlowResult.result][lockgate.FlowResult.result]."""
        return drive(self._result_steps(flow_id, timeout), _do)

    async def result_async(self, flow_id: str, timeout: float | None) -> Any:
        """Async :meth:`result`."""
        return await drive_async(self._result_steps(flow_id, timeout), _do_async)

    def _result_steps(self, flow_id: str, timeout: float | None) -> Generator[_Ask, Any, Any]:
        if flow_id in self.eager:
            return _eager_result(flow_id, self.eager[flow_id])
        poll = Poll(timeout, flow_id)
        store = self._app.store.flows
        while not _ended(summary := (yield _Ask(store, "summary", flow_id))):
            yield _Ask(_CLOCK, "sleep", poll.next_wait())
        record = yield _Ask(store, "read", flow_id)
        if summary.dead or summary.cancelled or record is None:
            errors = yield _Ask(store, "results", flow_id, _error_fields(record))
            raise _failure(flow_id, record, _error(errors))
        return self._assemble(record, (yield _Ask(store, "results", flow_id, range(record.total))))

    def _assemble(self, record: FlowRecord, results: Sequence[bytes | None]) -> Any:
        values = [
            decode_result(data, self.returns(task))
            for data, task in zip(results, record.tasks, strict=False)
        ]
        return flows.assemble(flows.decode_shape(record.shape), values)

    def returns(self, task: str) -> Any:
        registered = self._app.tasks.get(task)
        return registered.returns if registered is not None else Any

    # cancelling

    def cancel_job(self, job_id: str) -> CancelOutcome:
        """[App.cancel][lockgate.App.cancel]."""
        return drive(self._cancel_job_steps(job_id), _do)

    async def cancel_job_async(self, job_id: str) -> CancelOutcome:
        """Async :meth:`cancel_job`."""
        return await drive_async(self._cancel_job_steps(job_id), _do_async)

    def _cancel_job_steps(self, job_id: str) -> Generator[_Ask, Any, CancelOutcome]:
        record = FinalRecord(status="cancelled", finished_at=time.time(), reason="cancelled")
        encoded, ttl_ms = msgspec.json.encode(record), self._app.status_ttl_ms
        answer = yield _Ask(self._app.store.jobs, "cancel", job_id, encoded, ttl_ms)
        if answer == "cancelled":
            # A flow job's dependents will not run then: when it was a job of a flow,
            # the cancel call cancelled the flow too (``cancel_job.lua``), so the flow's
            # other queued jobs are cancelled now (they would run for nothing).
            yield from self._job_cancelled_steps(job_id)
        # Nothing to cancel: whether it ended or never was, its status tells.
        info = (yield _Ask(self._app, "job", job_id)) if answer == "gone" else None
        return cancel_outcome(answer, info)

    def _job_cancelled_steps(self, job_id: str) -> Generator[_Ask, Any, None]:
        flow_id = _flow_of(job_id)
        if flow_id is None or flow_id in self._cancelling:
            return
        if (yield _Ask(self._app.store.flows, "summary", flow_id)).cancelled:
            yield from self._cancel_steps(flow_id)

    def cancel(self, flow_id: str) -> int:
        """[App.cancel_flow][lockgate.App.cancel_flow]."""
        return drive(self._cancel_steps(flow_id), _do)

    async def cancel_async(self, flow_id: str) -> int:
        """Async :meth:`cancel`."""
        return await drive_async(self._cancel_steps(flow_id), _do_async)

    def _cancel_steps(self, flow_id: str) -> Generator[_Ask, Any, int]:
        store = self._app.store
        record = yield _Ask(store.flows, "read", flow_id)  # before the cancel drops held jobs
        (dropped,) = yield _Ask(store, "run", [store.flows.cancel_call(flow_id)])
        if int(dropped) < 0 or record is None:
            return 0
        cancelled = int(dropped)
        self._cancelling.add(flow_id)  # these cancels need not cancel the flow again
        try:
            for p in _queued(record):
                outcome = yield from self._cancel_job_steps(flows.job_id(flow_id, p))
                cancelled += outcome is CancelOutcome.CANCELLED
        finally:
            self._cancelling.discard(flow_id)
        return cancelled


@dataclass(frozen=True, slots=True, init=False)
class _Ask:
    """A call an operation's steps ask for: ``target.method(*args)`` from the sync API,
    ``await target.method_async(*args)`` from the async one (the store's and the App's
    methods come in such pairs)."""

    target: Any
    method: str
    args: tuple[Any, ...]

    def __init__(self, target: Any, method: str, *args: Any) -> None:
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "method", method)
        object.__setattr__(self, "args", args)


def _do(ask: _Ask) -> Any:
    return getattr(ask.target, ask.method)(*ask.args)


async def _do_async(ask: _Ask) -> Any:
    return await getattr(ask.target, ask.method + "_async")(*ask.args)


class _Clock:
    """The waits of a poll, as :class:`_Ask` calls them."""

    sleep = staticmethod(time.sleep)
    sleep_async = staticmethod(asyncio.sleep)


_CLOCK = _Clock()


def _eager_info(flow_id: str, ran: EagerFlow) -> FlowInfo:
    """What an eager run of a flow left (``App.eager``)."""
    _, ends = ran
    jobs = tuple(
        FlowJob(flows.job_id(flow_id, p), end.task if end else "",
                end.status if end else "cancelled")
        for p, end in enumerate(ends)
    )  # fmt: skip
    states = {job.state for job in jobs}
    state: FlowState = "done" if states == {"done"} else "failed"
    return FlowInfo(flow_id, state, jobs)


def _eager_result(flow_id: str, ran: EagerFlow) -> Any:
    """An eager flow's result, or the error of its first job that did not end done."""
    planned, ends = ran
    for position, end in enumerate(ends):
        if end is None or end.status != "done":
            if end is not None and end.error is not None:
                raise JobFailed(end.id, end.error.type, end.error.message, end.error.traceback)
            raise JobFailed(flows.job_id(flow_id, position), "Failed", "it did not run")
    return flows.assemble(planned.shape, [end.result if end else None for end in ends])


def _first_queues(planned: flows.FlowPlan) -> dict[str, int]:
    """Per queue, how many of the flow's first jobs go to it (whom to wake)."""
    counts: dict[str, int] = {}
    for position in planned.roots:
        queue = planned.nodes[position].message.job.queue
        counts[queue] = counts.get(queue, 0) + 1
    return counts


@contextlib.contextmanager
def _naming(flow_id: str) -> Iterator[None]:
    """An ``OutcomeUnknown`` raised inside names the flow to enqueue again."""
    try:
        yield
    except OutcomeUnknown as e:
        raise OutcomeUnknown(e.url, e.reason, e.job_ids, flow_id) from e.__cause__


def _flow_of(job_id: str) -> str | None:
    """The flow a job's id names (``<flow>.<n>``), if it names one."""
    flow_id, dot, position = job_id.rpartition(flows.SEPARATOR)
    return flow_id if dot and flow_id and position.isdigit() else None


def _done(end: JobInfo | None) -> bool:
    return end is not None and end.status == "done"


def _first_dead(flow_id: str, record: FlowRecord | None) -> str:
    """The id of the flow's first dead job, "" when none."""
    if record is None or not record.dead:
        return ""
    return flows.job_id(flow_id, min(record.dead))


def _error_fields(record: FlowRecord | None) -> list[int | str]:
    """Where the first dead job's error is kept (none when no job is dead)."""
    return [f"e{min(record.dead)}"] if record is not None and record.dead else []


def _error(errors: Sequence[bytes | None]) -> ErrorInfo | None:
    """The error of a kept result record, if one was read."""
    if not errors or errors[0] is None:
        return None
    return msgspec.json.decode(errors[0], type=ResultRecord).error


def _failure(flow_id: str, record: FlowRecord | None, error: ErrorInfo | None) -> Exception:
    """Why a flow has no result: unknown, a dead job (its ``error``), or cancelled."""
    if record is None:
        return ResultUnavailable(
            f"flow {flow_id!r} is unknown: never enqueued, or it ended longer ago than "
            "App(flow_ttl=...) keeps it"
        )
    if record.dead:
        job_id = _first_dead(flow_id, record)
        if error is not None:
            return JobFailed(job_id, error.type, error.message, error.traceback)
        return JobFailed(job_id, "Failed", f"a job of flow {flow_id!r} was dead-lettered")
    return JobCancelled(flow_id, "Cancelled", f"flow {flow_id!r} was cancelled")


def _ended(summary: FlowSummary) -> bool:
    return (
        summary.total == 0 or summary.cancelled or summary.dead > 0
        or summary.done >= summary.total
    )  # fmt: skip


def _queued(record: FlowRecord) -> list[int]:
    """The jobs of a flow that were queued and have not ended in it."""
    return [
        p for p in range(record.total)
        if p not in record.done and p not in record.dead and p not in record.held
    ]  # fmt: skip


def _info(flow_id: str, record: FlowRecord, asked: Mapping[int, JobInfo]) -> FlowInfo:
    jobs = []
    started = False  # a job ran, or runs: the flow is under way
    for p in range(record.total):
        state: Status
        if p in record.done:
            state = "done"
        elif p in record.dead:
            state = "dead"
        elif p in record.held:
            state = "cancelled" if record.cancelled else "waiting"
        else:
            info = asked.get(p)
            state = info.status if info is not None else "unknown"
            started = started or (info is not None and (info.attempts > 0 or state == "running"))
            if record.cancelled and state == "unknown":  # dropped before it was queued
                state = "cancelled"
        parents = record.parents.get(p, [])
        task = record.tasks[p] if p < len(record.tasks) else ""
        jobs.append(
            FlowJob(flows.job_id(flow_id, p), task, state,
                    tuple(flows.job_id(flow_id, q) for q in parents))
        )  # fmt: skip
    return FlowInfo(flow_id, flow_state(record, started), tuple(jobs), moment(record.created))
