"""The seam of tracing: what the enqueue paths and the job runner call, only when traced.

``hooks`` is None until ``lockgate.otel.LockgateInstrumentor().instrument()`` installs an
implementation (:mod:`lockgate.integrations.otel`); each call site reads it once and
checks for None, which is all tracing costs when it is off. Nothing here imports
OpenTelemetry: the hooks speak of lockgate's own values (messages, jobs, outcomes), and
the trace context travels in ``Job.trace``, a plain carrier of W3C ``traceparent`` and
``tracestate`` strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Protocol

import msgspec

from lockgate.core.codec import Job
from lockgate.core.message import Message
from lockgate.core.outcome import Outcome

# Hex trace id and span id of a span, as log lines show them.
SpanIds = tuple[str, str]


class Attempt(Protocol):
    """The span of one run of a job (a CONSUMER span, current while the task runs)."""

    @property
    def ids(self) -> SpanIds | None:
        """The span's trace and span ids (None when it records nothing)."""

    def end(self, outcome: Outcome) -> None:
        """Say how the run ended: its outcome as an attribute, an error recorded."""


class TraceHooks(Protocol):
    """What lockgate asks of a tracer (:class:`lockgate.integrations.otel.OtelHooks`)."""

    def send(
        self, messages: Sequence[Message], flow: str | None = None
    ) -> AbstractContextManager[Sequence[Message]]:
        """A PRODUCER span around the enqueue of ``messages`` (one span for them all),
        current inside the block, which gets the messages carrying the span's context
        (those that carried one already keep theirs, and make no span of their own).

        Args:
            messages: the jobs to enqueue.
            flow: the id of the flow they are (``App.enqueue_flow``), else None.
        """

    def process(
        self, job: Job, queue: str, started: float, links: Sequence[dict[str, str]] = ()
    ) -> AbstractContextManager[Attempt]:
        """A CONSUMER span around one run of ``job`` from ``queue``, current inside the
        block, child of the span context its ``trace`` carries.

        Args:
            job: the job delivered.
            queue: the queue it came from.
            started: when its run starts (Unix time).
            links: trace contexts of the runs this one follows (a flow job's parents').
        """

    def carrier(self) -> dict[str, str] | None:
        """The current span's context as a W3C carrier, None when there is none."""

    def current_ids(self) -> SpanIds | None:
        """The trace and span ids of the current span, None when there is none."""


hooks: TraceHooks | None = None


def install(tracer: TraceHooks | None) -> None:
    """Trace enqueues and runs with ``tracer`` from now on (None: stop tracing)."""
    global hooks
    hooks = tracer


def sending(
    messages: Sequence[Message], flow: str | None = None
) -> AbstractContextManager[Sequence[Message]]:
    """``hooks.send(messages, flow)`` when traced, else the messages as they are (for the
    enqueue paths off the hot one; a hot path checks ``hooks`` itself).

    Args:
        messages: the jobs to enqueue.
        flow: the id of the flow they are, else None.
    """
    return hooks.send(messages, flow) if hooks is not None else nullcontext(messages)


def carrying(messages: Sequence[Message], carrier: dict[str, str]) -> list[Message]:
    """``messages``, each job carrying the trace context ``carrier`` unless it carries one
    already (a job sent again keeps the trace it was first sent in).

    Args:
        messages: jobs about to be enqueued.
        carrier: the W3C trace context to carry (``traceparent`` and ``tracestate``).
    """
    return [
        m
        if m.job.trace is not None
        else replace(m, job=msgspec.structs.replace(m.job, trace=carrier))
        for m in messages
    ]
