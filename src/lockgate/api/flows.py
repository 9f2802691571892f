"""Workflows on an App: ``enqueue_flow``, what a flow is now (``App.flow``), its result,
its cancellation, and what a running job of one asks (``parent_results``, ``run_step``).

The flow itself is a value (:mod:`lockgate.core.flows`); its records and barriers live in
Redis (:mod:`lockgate.backend.flow_store`, ``backend/lua/_flow.lua``), moved by the settle
call of each of its jobs.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

import msgspec

from lockgate.api.task import Task
from lockgate.backend.broker import Outgoing
from lockgate.backend.flow_store import FlowRecord, FlowSummary, StagedJob
from lockgate.backend.keys import Keys
from lockgate.backend.store import Store
from lockgate.core import codec, flows
from lockgate.core.context import JobContext
from lockgate.core.message import Message
from lockgate.core.outcome import ErrorInfo
from lockgate.core.status import JobInfo, Poll, ResultRecord, Status, encode_result, moment
from lockgate.errors import (
    ConfigError,
    JobCancelled,
    JobFailed,
    ResultUnavailable,
    SerializationError,
    StepDone,
)

# A flow's jobs are named <flow id>.<n>, within a job id's limit.
MAX_FLOW_ID_BYTES = codec.MAX_JOB_ID_BYTES - 16
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

    def cancel(self, job_id: str) -> bool: ...

    async def cancel_async(self, job_id: str) -> bool: ...


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

    def _ops(self) -> FlowOps:
        if self.app is None:
            raise ConfigError("this FlowResult was made by hand: it knows no App")
        return self.app

    def info(self) -> FlowInfo:
        """What is known of the flow now (see [App.flow][lockgate.App.flow])."""
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
        return self._ops().result(self.flow_id, timeout)

    async def result_async(self, timeout: float | None = None) -> Any:
        """Async [result][lockgate.FlowResult.result]."""
        return await self._ops().result_async(self.flow_id, timeout)


def returns_of(fn: Callable[..., Any]) -> Any:
    """The type a stored result of ``fn`` decodes to: its return annotation, else Any."""
    try:
        return typing.get_type_hints(fn).get("return", Any)
    except Exception:  # an annotation that does not resolve here: take it as it is
        return Any


def decoded(data: bytes | None, returns: Any) -> Any:
    """A kept result (JSON) as its type says; None when there is none."""
    if data is None:
        return None
    return msgspec.json.decode(data, type=returns, strict=False)


def flow_state(record: FlowRecord | None, running: bool) -> FlowState:
    """A flow's state from its record, and whether a job of it runs (pure)."""
    if record is None:
        return "unknown"
    if record.cancelled:
        return "cancelled"
    if record.dead:
        return "failed"
    if len(record.done) >= record.total:
        return "done"
    return "running" if record.done or running else "waiting"


class FlowOps:
    """The App's flow operations (``App.enqueue_flow``, ``App.flow``, ...)."""

    def __init__(self, app: FlowHost) -> None:
        self._app = app
        # Eager flows (``App.eager``): per flow, its plan and its jobs' ends.
        self.eager: dict[str, tuple[flows.FlowPlan, list[JobInfo | None]]] = {}

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

    def _staged(self, planned: flows.FlowPlan) -> tuple[list[StagedJob], bytes]:
        nodes = planned.nodes
        tasks = [node.message.job.task for node in nodes]
        staged = [
            StagedJob(
                self._app.outgoing(node.message),
                [(p, tasks[p]) for p in node.parents],
                node.children,
            )
            for node in nodes
        ]
        return staged, msgspec.json.encode(tasks)

    def enqueue(self, flow: flows.Step, flow_id: str | None) -> FlowResult:
        """[App.enqueue_flow][lockgate.App.enqueue_flow]."""
        planned = self.plan(flow, flow_id)
        staged, tasks = self._staged(planned)
        store = self._app.store.flows
        calls, commit = store.enqueue_calls(
            planned.flow_id, staged, planned.shape_json(), tasks, self._app.flow_ttl_ms
        )
        created = store.enqueue(planned.flow_id, calls, commit, planned.job_ids)
        return FlowResult(planned.flow_id, created, planned.job_ids, self)

    async def enqueue_async(self, flow: flows.Step, flow_id: str | None) -> FlowResult:
        """Async :meth:`enqueue`."""
        planned = self.plan(flow, flow_id)
        staged, tasks = self._staged(planned)
        store = self._app.store.flows
        calls, commit = store.enqueue_calls(
            planned.flow_id, staged, planned.shape_json(), tasks, self._app.flow_ttl_ms
        )
        created = await store.enqueue_async(planned.flow_id, calls, commit, planned.job_ids)
        return FlowResult(planned.flow_id, created, planned.job_ids, self)

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
        return FlowResult(planned.flow_id, True, planned.job_ids, self)

    # reading

    def info(self, flow_id: str) -> FlowInfo:
        """[App.flow][lockgate.App.flow]."""
        if flow_id in self.eager:
            return self._eager_info(flow_id)
        record = self._app.store.flows.read(flow_id)
        if record is None:
            return FlowInfo(flow_id, "unknown")
        asked = {p: self._app.job(flows.job_id(flow_id, p)).status for p in _queued(record)}
        return _info(flow_id, record, asked)

    async def info_async(self, flow_id: str) -> FlowInfo:
        """Async :meth:`info`."""
        if flow_id in self.eager:
            return self._eager_info(flow_id)
        record = await self._app.store.flows.read_async(flow_id)
        if record is None:
            return FlowInfo(flow_id, "unknown")
        asked = {}
        for p in _queued(record):
            asked[p] = (await self._app.job_async(flows.job_id(flow_id, p))).status
        return _info(flow_id, record, asked)

    def _eager_info(self, flow_id: str) -> FlowInfo:
        _, ends = self.eager[flow_id]
        jobs = tuple(
            FlowJob(flows.job_id(flow_id, p), end.task if end else "",
                    end.status if end else "cancelled")
            for p, end in enumerate(ends)
        )  # fmt: skip
        states = {job.state for job in jobs}
        state: FlowState = "done" if states == {"done"} else "failed"
        return FlowInfo(flow_id, state, jobs)

    def result(self, flow_id: str, timeout: float | None) -> Any:
        """[FlowResult.result][lockgate.FlowResult.result]."""
        if flow_id in self.eager:
            return self._eager_result(flow_id)
        poll = Poll(timeout, flow_id)
        store = self._app.store.flows
        while not _ended(summary := store.summary(flow_id)):
            time.sleep(poll.next_wait())
        record = store.read(flow_id)
        if summary.dead or summary.cancelled or record is None:
            errors = store.results(flow_id, _error_fields(record))
            raise _failure(flow_id, record, _error(errors))
        return self._assemble(record, store.results(flow_id, range(record.total)))

    async def result_async(self, flow_id: str, timeout: float | None) -> Any:
        """Async :meth:`result`."""
        if flow_id in self.eager:
            return self._eager_result(flow_id)
        poll = Poll(timeout, flow_id)
        store = self._app.store.flows
        while not _ended(summary := await store.summary_async(flow_id)):
            await asyncio.sleep(poll.next_wait())
        record = await store.read_async(flow_id)
        if summary.dead or summary.cancelled or record is None:
            errors = await store.results_async(flow_id, _error_fields(record))
            raise _failure(flow_id, record, _error(errors))
        return self._assemble(record, await store.results_async(flow_id, range(record.total)))

    def _assemble(self, record: FlowRecord, results: Sequence[bytes | None]) -> Any:
        values = [
            decoded(data, self.returns(task))
            for data, task in zip(results, record.tasks, strict=False)
        ]
        return flows.assemble(flows.decode_shape(record.shape), values)

    def returns(self, task: str) -> Any:
        registered = self._app.tasks.get(task)
        return registered.returns if registered is not None else Any

    def _eager_result(self, flow_id: str) -> Any:
        planned, ends = self.eager[flow_id]
        for position, end in enumerate(ends):
            if end is None or end.status != "done":
                if end is not None and end.error is not None:
                    raise JobFailed(end.id, end.error.type, end.error.message, end.error.traceback)
                raise JobFailed(flows.job_id(flow_id, position), "Failed", "it did not run")
        return flows.assemble(planned.shape, [end.result if end else None for end in ends])

    # cancelling

    def job_cancelled(self, job_id: str) -> None:
        """A job cancelled while it waited: when it was a job of a live flow, the jobs
        that wait for it can never run, so the flow is cancelled (nothing hangs)."""
        flow_id = _flow_of(job_id)
        if flow_id is None:
            return
        summary = self._app.store.flows.summary(flow_id)
        if summary.total > flows.position_of(job_id, flow_id) and not summary.cancelled:
            self.cancel(flow_id)

    async def job_cancelled_async(self, job_id: str) -> None:
        """Async :meth:`job_cancelled`."""
        flow_id = _flow_of(job_id)
        if flow_id is None:
            return
        summary = await self._app.store.flows.summary_async(flow_id)
        if summary.total > flows.position_of(job_id, flow_id) and not summary.cancelled:
            await self.cancel_async(flow_id)

    def cancel(self, flow_id: str) -> int:
        """[App.cancel_flow][lockgate.App.cancel_flow]."""
        store = self._app.store
        (dropped,) = store.run([store.flows.cancel_call(flow_id)])
        record = store.flows.read(flow_id)
        if int(dropped) < 0 or record is None:
            return 0
        queued = [flows.job_id(flow_id, p) for p in _queued(record)]
        return int(dropped) + sum(self._app.cancel(job_id) for job_id in queued)

    async def cancel_async(self, flow_id: str) -> int:
        """Async :meth:`cancel`."""
        store = self._app.store
        (dropped,) = await store.run_async([store.flows.cancel_call(flow_id)])
        record = await store.flows.read_async(flow_id)
        if int(dropped) < 0 or record is None:
            return 0
        cancelled = 0
        for p in _queued(record):
            cancelled += await self._app.cancel_async(flows.job_id(flow_id, p))
        return int(dropped) + cancelled


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


def _info(flow_id: str, record: FlowRecord, asked: Mapping[int, Status]) -> FlowInfo:
    jobs = []
    for p in range(record.total):
        state: Status
        if p in record.done:
            state = "done"
        elif p in record.dead:
            state = "dead"
        elif p in record.held:
            state = "cancelled" if record.cancelled else "waiting"
        else:
            state = asked.get(p, "unknown")
            if record.cancelled and state == "unknown":  # dropped before it was queued
                state = "cancelled"
        parents = record.parents.get(p, [])
        task = record.tasks[p] if p < len(record.tasks) else ""
        jobs.append(
            FlowJob(flows.job_id(flow_id, p), task, state,
                    tuple(flows.job_id(flow_id, q) for q in parents))
        )  # fmt: skip
    running = any(job.state == "running" for job in jobs)
    return FlowInfo(flow_id, flow_state(record, running), tuple(jobs), moment(record.created))


class FlowServices:
    """What a running job asks of its App: its parents' results, and kept steps
    (:class:`lockgate.core.context.JobServices`)."""

    def __init__(self, app: FlowHost, ops: FlowOps) -> None:
        self._app = app
        self._ops = ops

    def parent_results(self, job: JobContext) -> list[Any]:
        flow_id = job.flow
        if flow_id is None:
            return []
        position = flows.position_of(job.job_id, flow_id)
        if flow_id in self._ops.eager:
            return self._eager_parents(flow_id, position)
        store = self._app.store.flows
        parents = store.parents(flow_id, position)
        data = store.results(flow_id, [p for p, _ in parents])
        returns = [self._ops.returns(task) for _, task in parents]
        return [decoded(d, kind) for d, kind in zip(data, returns, strict=True)]

    def _eager_parents(self, flow_id: str, position: int) -> list[Any]:
        planned, ends = self._ops.eager[flow_id]
        return [_result(ends[p]) for p in planned.nodes[position].parents]

    def run_step(
        self, job: JobContext, name: str, fn: Callable[..., Any], args: Any, kwargs: Any
    ) -> Any:
        claim_name = Keys.step_claim_name(job.task, job.job_id, name)
        store = self._app.store.flows
        returns = returns_of(fn)
        claim = job.step(name)
        try:
            claim.__enter__()
        except StepDone:
            return _kept(store.step_result(job.job_id, claim_name), returns, name)
        try:
            stored = store.step_result(job.job_id, claim_name)
            if stored is not None:
                value = decoded(stored, returns)
            else:
                value = fn(*args, **kwargs)
                ttl = max(1, round(job.idempotency_ttl * 1000))
                store.keep_step_result(job.job_id, claim_name, encode_result(value), ttl)
        except BaseException as e:
            claim.__exit__(type(e), e, e.__traceback__)
            raise
        claim.__exit__(None, None, None)
        return value

    async def run_step_async(
        self, job: JobContext, name: str, fn: Callable[..., Any], args: Any, kwargs: Any
    ) -> Any:
        claim_name = Keys.step_claim_name(job.task, job.job_id, name)
        store = self._app.store.flows
        returns = returns_of(fn)
        claim = job.step(name)
        try:
            await claim.__aenter__()
        except StepDone:
            return _kept(await store.step_result_async(job.job_id, claim_name), returns, name)
        try:
            stored = await store.step_result_async(job.job_id, claim_name)
            if stored is not None:
                value = decoded(stored, returns)
            else:
                if inspect.iscoroutinefunction(fn):
                    value = await fn(*args, **kwargs)
                else:
                    value = await asyncio.to_thread(fn, *args, **kwargs)
                ttl = max(1, round(job.idempotency_ttl * 1000))
                data = encode_result(value)
                await store.keep_step_result_async(job.job_id, claim_name, data, ttl)
        except BaseException as e:
            await claim.__aexit__(type(e), e, e.__traceback__)
            raise
        await claim.__aexit__(None, None, None)
        return value


def _result(end: JobInfo | None) -> Any:
    return end.result if end is not None else None


def _kept(data: bytes | None, returns: Any, name: str) -> Any:
    if data is None:
        raise ResultUnavailable(
            f"step {name!r} is done but its result is gone: it expired, or the step was "
            "run by job.step(), which keeps none"
        )
    return decoded(data, returns)
