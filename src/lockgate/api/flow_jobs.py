"""What a running job of a flow, or any job, asks of its App: its parents' results
(``current_job().parent_results()``) and steps whose results are kept
(``current_job().run_step``): :class:`lockgate.core.context.JobServices`."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Generator
from types import TracebackType
from typing import Any

from lockgate.api.flows import FlowHost, FlowOps
from lockgate.backend.keys import Keys
from lockgate.core import flows
from lockgate.core.context import JobContext
from lockgate.core.flows import decode_result, returns_of
from lockgate.core.sansio import drive, drive_async
from lockgate.core.status import JobInfo, encode_result
from lockgate.errors import ResultUnavailable, StepDone


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
        return [decode_result(d, kind) for d, kind in zip(data, returns, strict=True)]

    def _eager_parents(self, flow_id: str, position: int) -> list[Any]:
        planned, ends = self._ops.eager[flow_id]
        return [_result(ends[p]) for p in planned.nodes[position].parents]

    def run_step(
        self, job: JobContext, name: str, fn: Callable[..., Any], args: Any, kwargs: Any
    ) -> Any:
        step = _Step(self._app, job, name, fn, args, kwargs)
        return drive(step.steps(), step.do)

    async def run_step_async(
        self, job: JobContext, name: str, fn: Callable[..., Any], args: Any, kwargs: Any
    ) -> Any:
        step = _Step(self._app, job, name, fn, args, kwargs)
        return await drive_async(step.steps(), step.do_async)


# What run_step asks for, one at a time: to enter the step's claim, to read the stored
# result, to call fn, to store its result (data, TTL ms), to leave the claim (the error
# that ended the step, or None).
_Enter = ("enter",)
_Get = ("get",)
_Call = ("call",)


class _Step:
    """One ``run_step``: its operation (:meth:`steps`, sans I/O, written once) and the
    sync and async ways of doing what it asks for."""

    def __init__(
        self,
        app: FlowHost,
        job: JobContext,
        name: str,
        fn: Callable[..., Any],
        args: Any,
        kwargs: Any,
    ) -> None:
        self.name, self.fn, self.args, self.kwargs = name, fn, args, kwargs
        self.job_id = job.job_id
        self.claim_name = Keys.step_claim_name(job.task, job.job_id, name)
        self.claim = job.step(name)
        self.store = app.store.flows
        self.ttl = max(1, round(job.idempotency_ttl * 1000))

    def steps(self) -> Generator[tuple[Any, ...], Any, Any]:
        """At most one successful run of fn recorded for the job and step: a finished
        step gives back its stored result; a stored result (an earlier run stored it and
        died before its claim was marked done) is returned without calling fn; fn's
        result is stored unless another run stored one first."""
        returns = returns_of(self.fn)
        try:
            yield _Enter
        except StepDone:
            return _kept((yield _Get), returns, self.name)
        try:
            stored = yield _Get
            if stored is not None:
                value = decode_result(stored, returns)
            else:
                value = yield _Call
                kept = yield ("keep", encode_result(value))
                if kept is not None:  # another run's, stored first: the one that counts
                    value = decode_result(kept, returns)
        except BaseException as e:
            yield ("exit", e)
            raise
        yield ("exit", None)
        return value

    def do(self, todo: tuple[Any, ...]) -> Any:
        kind = todo[0]
        if kind == "enter":
            return self.claim.__enter__()
        if kind == "get":
            return self.store.step_result(self.job_id, self.claim_name)
        if kind == "call":
            return self.fn(*self.args, **self.kwargs)
        if kind == "keep":
            return self.store.keep_step_result(self.job_id, self.claim_name, todo[1], self.ttl)
        error = todo[1]
        return self.claim.__exit__(type(error) if error else None, error, _tb(error))

    async def do_async(self, todo: tuple[Any, ...]) -> Any:
        kind = todo[0]
        if kind == "enter":
            return await self.claim.__aenter__()
        if kind == "get":
            return await self.store.step_result_async(self.job_id, self.claim_name)
        if kind == "call":
            if inspect.iscoroutinefunction(self.fn):
                return await self.fn(*self.args, **self.kwargs)
            return await asyncio.to_thread(self.fn, *self.args, **self.kwargs)
        if kind == "keep":
            return await self.store.keep_step_result_async(
                self.job_id, self.claim_name, todo[1], self.ttl
            )
        error = todo[1]
        return await self.claim.__aexit__(type(error) if error else None, error, _tb(error))


def _tb(error: BaseException | None) -> TracebackType | None:
    return error.__traceback__ if error is not None else None


def _result(end: JobInfo | None) -> Any:
    return end.result if end is not None else None


def _kept(data: bytes | None, returns: Any, name: str) -> Any:
    if data is None:
        raise ResultUnavailable(
            f"step {name!r} is done but its result is gone: it expired, or the step was "
            "run by job.step(), which keeps none"
        )
    return decode_result(data, returns)
