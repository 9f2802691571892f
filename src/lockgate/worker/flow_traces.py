"""The links between the runs of a flow's jobs, when traced (``lockgate.otel``).

Each job of a flow carries the context of the ``enqueue_flow`` span, the parent of all of
its runs' spans. Each run of a flow job keeps its span context (its ``traceparent``) in
the flow's traces hash (:meth:`lockgate.backend.keys.Keys.flow_traces`) when its span
starts, before its task runs: nothing may be awaited between a task's return and the
hand-off of its ending. The one kept last is the run that ended done, since a job that
waits for others runs only once they are all done; it reads its parents' there before
its run, and its span links to theirs. Best effort: a read or write that fails, however,
costs the links, never the job (two reads and a write per flow job, only when traced).
"""

from __future__ import annotations

from lockgate.api.app import App
from lockgate.core import flows
from lockgate.core.codec import Job
from lockgate.core.logs import get_logger

log = get_logger(__name__)


async def parent_traces(app: App, job: Job) -> list[dict[str, str]]:
    """The trace contexts of the runs of ``job``'s parents in its flow (none kept: none)."""
    if job.flow is None:
        return []
    store = app.store.flows
    try:
        parents = await store.parents_async(job.flow, flows.position_of(job.id, job.flow))
        found = await store.traces_async(job.flow, [p for p, _ in parents])
    except Exception as e:  # best effort: whatever it is, the run goes on without links
        log.warning("job %s: its parents' trace contexts could not be read (%r)", job.id, e)
        return []
    return [{"traceparent": bytes(t).decode()} for t in found if t is not None]


async def record_trace(app: App, job: Job, carrier: dict[str, str] | None) -> None:
    """Keep the trace context of ``job``'s run (its span current, its task not started)
    for its flow's children."""
    if job.flow is None or carrier is None or "traceparent" not in carrier:
        return
    try:
        position = flows.position_of(job.id, job.flow)
        await app.store.flows.record_trace_async(
            job.flow, position, carrier["traceparent"], app.flow_ttl_ms
        )
    except Exception as e:  # best effort: whatever it is, the run goes on
        log.warning("job %s: its trace context could not be kept (%r)", job.id, e)
