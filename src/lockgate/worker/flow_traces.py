"""The links between the runs of a flow's jobs, when traced (``lockgate.otel``).

Each job of a flow carries the context of the ``enqueue_flow`` span, the parent of all of
its runs' spans. A job that ended done keeps its run's span context (its
``traceparent``) in the flow's ``traces`` hash; a job that waited for others reads its
parents' there before its run, and its span links to theirs. Best effort: a failed read
or write costs the links, never the job (two reads and a write per flow job, only when
traced).
"""

from __future__ import annotations

from lockgate.api.app import App
from lockgate.core import flows
from lockgate.core.codec import Job
from lockgate.core.logs import get_logger
from lockgate.errors import BrokerError

log = get_logger(__name__)


async def parent_traces(app: App, job: Job) -> list[dict[str, str]]:
    """The trace contexts of the runs of ``job``'s parents in its flow (none kept: none)."""
    if job.flow is None:
        return []
    store = app.store.flows
    try:
        parents = await store.parents_async(job.flow, flows.position_of(job.id, job.flow))
        found = await store.traces_async(job.flow, [p for p, _ in parents])
    except (BrokerError, ValueError) as e:
        log.warning("job %s: its parents' trace contexts could not be read (%s)", job.id, e)
        return []
    return [{"traceparent": bytes(t).decode()} for t in found if t is not None]


async def record_trace(app: App, job: Job, carrier: dict[str, str] | None) -> None:
    """Keep the trace context of ``job``'s run (its span current) for its flow's children."""
    if job.flow is None or carrier is None or "traceparent" not in carrier:
        return
    try:
        position = flows.position_of(job.id, job.flow)
        await app.store.flows.record_trace_async(
            job.flow, position, carrier["traceparent"], app.flow_ttl_ms
        )
    except (BrokerError, ValueError) as e:
        log.warning("job %s: its trace context could not be kept (%s)", job.id, e)
