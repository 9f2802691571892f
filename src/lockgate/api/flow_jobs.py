"""What a running job of a flow, or any job, asks of its App: its parents' results
(``current_job().parent_results()``) and steps whose results are kept
(``current_job().run_step``): :class:`lockgate.core.context.JobServices`."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from lockgate.api.flows import FlowHost, FlowOps
from lockgate.backend.keys import Keys
from lockgate.core import flows
from lockgate.core.context import JobContext
from lockgate.core.flows import decode_result, returns_of
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
                value = decode_result(stored, returns)
            else:
                value = fn(*args, **kwargs)
                ttl = max(1, round(job.idempotency_ttl * 1000))
                kept = store.keep_step_result(job.job_id, claim_name, encode_result(value), ttl)
                if kept is not None:  # another run's, stored first: the one that counts
                    value = decode_result(kept, returns)
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
                value = decode_result(stored, returns)
            else:
                if inspect.iscoroutinefunction(fn):
                    value = await fn(*args, **kwargs)
                else:
                    value = await asyncio.to_thread(fn, *args, **kwargs)
                ttl = max(1, round(job.idempotency_ttl * 1000))
                data = encode_result(value)
                kept = await store.keep_step_result_async(job.job_id, claim_name, data, ttl)
                if kept is not None:  # another run's, stored first: the one that counts
                    value = decode_result(kept, returns)
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
    return decode_result(data, returns)
