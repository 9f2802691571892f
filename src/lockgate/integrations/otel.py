"""OpenTelemetry tracing of enqueues and runs: the body of :mod:`lockgate.otel`.

Needs the ``otel`` extra (opentelemetry-api, opentelemetry-instrumentation).
:class:`LockgateInstrumentor` installs :class:`OtelHooks` as the tracing hooks of
:mod:`lockgate.core.tracing`, process-wide, and ``uninstrument()`` removes them:

- every enqueue makes a PRODUCER span ``send <queue>`` (one for a batch or a flow), and
  its context goes into each job's ``trace`` through the global propagator (W3C
  ``traceparent`` and ``tracestate`` by default);
- the worker runs each attempt in a CONSUMER span ``process <queue>``, current while the
  task runs, child of the context its job carries. A retry, a put-back, a reclaim and a
  dead-letter replay re-send the same job, ``trace`` included, so every attempt of a job
  is in the trace of its enqueue;
- a flow's jobs all carry the ``enqueue_flow`` span's context; a job that waited for
  others records its consumer span's context with its result, and a job that waits for
  them links its consumer span to theirs.

No attribute holds a job's arguments or result.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from importlib.metadata import version
from typing import Any

from lockgate.core import tracing
from lockgate.core.codec import Job
from lockgate.core.message import Message
from lockgate.core.outcome import ALREADY_PROCESSED, Outcome
from lockgate.errors import MissingExtra

try:
    from opentelemetry import propagate, trace
    from opentelemetry.context import Context
    from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
        BaseInstrumentor,
    )
    from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
except ImportError as e:  # pragma: no cover - the extra is installed in the tests
    raise MissingExtra("lockgate.otel", "otel", "opentelemetry-instrumentation") from e

SYSTEM = "lockgate"
# The messaging semantic conventions' names (opentelemetry-semantic-conventions keeps
# them in an incubating module, whose paths change between releases).
_SYSTEM = "messaging.system"
_DESTINATION = "messaging.destination.name"
_MESSAGE_ID = "messaging.message.id"
_OPERATION_TYPE = "messaging.operation.type"
_OPERATION_NAME = "messaging.operation.name"
_BATCH_COUNT = "messaging.batch.message_count"


def _span_ids(span: Span) -> tracing.SpanIds | None:
    context = span.get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


def ended(outcome: Outcome) -> str:
    """The ``lockgate.outcome`` attribute of a run's span (pure): done, cancelled,
    skipped (a duplicate of work done, acknowledged unrun), retried, put_back (no attempt
    spent), dead or abandoned (left pending at a stop)."""
    if outcome.kind == "done":
        if outcome.cancelled:
            return "cancelled"
        return "skipped" if outcome.reason == ALREADY_PROCESSED else "done"
    if outcome.kind == "retry":
        return "retried" if outcome.error is not None else "put_back"
    return outcome.kind


class OtelAttempt:
    """The CONSUMER span of one run (:class:`lockgate.core.tracing.Attempt`)."""

    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span = span

    @property
    def ids(self) -> tracing.SpanIds | None:
        """The span's hex trace and span ids."""
        return _span_ids(self._span)

    def end(self, outcome: Outcome) -> None:
        """Set ``lockgate.outcome``; a failure records its exception and sets ERROR."""
        span = self._span
        span.set_attribute("lockgate.outcome", ended(outcome))
        error = outcome.error
        if error is not None:
            span.set_attribute("error.type", error.type)
            span.add_event(
                "exception",
                {
                    "exception.type": error.type,
                    "exception.message": error.message,
                    "exception.stacktrace": error.traceback,
                },
            )
            span.set_status(Status(StatusCode.ERROR, f"{error.type}: {error.message}"))
        elif outcome.kind == "dead":
            span.set_status(Status(StatusCode.ERROR, outcome.reason))


class OtelHooks:
    """Tracing hooks (:class:`lockgate.core.tracing.TraceHooks`) on an OpenTelemetry
    tracer.

    Args:
        tracer: the tracer the spans come from.
    """

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    @contextmanager
    def send(
        self, messages: Sequence[Message], flow: str | None = None
    ) -> Iterator[Sequence[Message]]:
        """A PRODUCER span around an enqueue (see
        :meth:`lockgate.core.tracing.TraceHooks.send`)."""
        fresh = [m.job for m in messages if m.job.trace is None]
        if not fresh:
            yield messages
            return
        first = fresh[0]
        queue = first.queue if all(j.queue == first.queue for j in fresh) else None
        attributes: dict[str, Any] = {
            _SYSTEM: SYSTEM,
            _OPERATION_TYPE: "send",
            _OPERATION_NAME: "send",
        }
        if queue is not None:
            attributes[_DESTINATION] = queue
        if flow is None and len(fresh) == 1:
            attributes[_MESSAGE_ID] = first.id
        else:
            attributes[_BATCH_COUNT] = len(fresh)
        if flow is not None:
            attributes["lockgate.flow"] = flow
        if all(j.task == first.task for j in fresh):
            attributes["lockgate.task"] = first.task
        if all(j.level == first.level for j in fresh):
            attributes["lockgate.level"] = first.level
        name = f"send {queue}" if queue is not None else "send"
        with self._tracer.start_as_current_span(
            name, kind=SpanKind.PRODUCER, attributes=attributes
        ):
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            yield tracing.carrying(messages, carrier) if carrier else messages

    @contextmanager
    def process(
        self, job: Job, queue: str, started: float, links: Sequence[dict[str, str]] = ()
    ) -> Iterator[OtelAttempt]:
        """A CONSUMER span around one run (see
        :meth:`lockgate.core.tracing.TraceHooks.process`); ``links``: the trace contexts
        of the runs it follows (a flow job's parents)."""
        # Only its strings: a producer of another version or language may carry more.
        carrier = {k: v for k, v in job.trace.items() if isinstance(v, str)} if job.trace else {}
        parent = propagate.extract(carrier, context=Context()) if carrier else Context()
        attributes: dict[str, Any] = {
            _SYSTEM: SYSTEM,
            _OPERATION_TYPE: "process",
            _OPERATION_NAME: "process",
            _DESTINATION: queue,
            _MESSAGE_ID: job.id,
            "lockgate.task": job.task,
            "lockgate.level": job.level,
            "lockgate.attempt": job.attempt,
            "lockgate.wait_ms": round(max(0.0, started - job.enqueued) * 1000, 3),
        }
        if job.flow is not None:
            attributes["lockgate.flow"] = job.flow
        span = self._tracer.start_span(
            f"process {queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=_links(links),
        )
        # The outcome says how the run failed: a task's exception never gets here.
        with trace.use_span(span, end_on_exit=True):
            yield OtelAttempt(span)

    def carrier(self) -> dict[str, str] | None:
        """The current span's context as a W3C carrier, None when there is none."""
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        return carrier or None

    def current_ids(self) -> tracing.SpanIds | None:
        """The hex trace and span ids of the current span."""
        return _span_ids(trace.get_current_span())


def _links(carriers: Sequence[dict[str, str]]) -> list[Link]:
    links = []
    for carrier in carriers:
        context = trace.get_current_span(propagate.extract(carrier, context=Context()))
        span_context = context.get_span_context()
        if span_context.is_valid:
            links.append(Link(span_context))
    return links


class LockgateInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Traces lockgate's enqueues and runs with OpenTelemetry, process-wide.

    ``LockgateInstrumentor().instrument(tracer_provider=None)`` starts (the global
    tracer provider when None), ``uninstrument()`` stops; also found by
    ``opentelemetry-instrument`` through the ``opentelemetry_instrumentor`` entry point.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        """None: the instrumentation ships with lockgate itself."""
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        tracer = trace.get_tracer(
            "lockgate", version("lockgate"), tracer_provider=kwargs.get("tracer_provider")
        )
        tracing.install(OtelHooks(tracer))

    def _uninstrument(self, **kwargs: Any) -> None:
        tracing.install(None)
