"""OpenTelemetry tracing (``lockgate.otel``) with the real SDK and its in-memory exporter,
against real workers on Redis: producer spans, consumer spans made current, one trace
across attempts, put-backs, dead-letter replays and flows, and the ids in JSON logs."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind, StatusCode

from conftest import WAIT_TIMEOUT, drain, running, wait_until, worker_for
from lockgate import App, chain, group
from lockgate.backend.flow_store import Flows
from lockgate.core.codec import decode
from lockgate.ops.deadletter import list_dead, replay
from lockgate.otel import LockgateInstrumentor
from lockgate.worker.joblog import JobLog, JsonFormatter


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    LockgateInstrumentor().instrument(tracer_provider=provider)
    try:
        yield provider, exporter
    finally:
        LockgateInstrumentor().uninstrument()
        provider.shutdown()


@pytest.fixture
def exporter(provider: tuple[TracerProvider, InMemorySpanExporter]) -> InMemorySpanExporter:
    return provider[1]


def spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


@contextlib.contextmanager
def json_lines(*loggers: str) -> Iterator[list[dict[str, Any]]]:
    """The lines the named loggers log meanwhile, as ``--log-format json`` writes them
    (the list is filled when the block ends)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    for name in loggers:
        logging.getLogger(name).addHandler(handler)
    lines: list[dict[str, Any]] = []
    try:
        yield lines
    finally:
        for name in loggers:
            logging.getLogger(name).removeHandler(handler)
        lines += [json.loads(line) for line in stream.getvalue().splitlines()]


def ids(span: ReadableSpan | SpanContext) -> tuple[int, int]:
    context = span if isinstance(span, SpanContext) else span.get_span_context()
    assert context is not None
    return context.trace_id, context.span_id


async def test_one_trace_from_the_enqueue_through_every_attempt(
    make_app: Callable[..., App], exporter: InMemorySpanExporter
) -> None:
    app = make_app()
    seen: list[SpanContext] = []

    @app.task(retries=1, backoff=0.01)
    async def charge(card_token: str) -> None:
        seen.append(trace.get_current_span().get_span_context())
        if len(seen) == 1:
            raise RuntimeError("card service down")

    job = charge.enqueue("tok_secret_4242")
    await drain(app)
    (send,) = spans(exporter, "send default")
    runs = sorted(spans(exporter, "process default"), key=lambda s: attrs(s)["lockgate.attempt"])
    assert send.kind is SpanKind.PRODUCER and send.parent is None  # a root: none was active
    assert attrs(send) == {
        "messaging.system": "lockgate",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "default",
        "messaging.message.id": job.job_id,
        "lockgate.task": "charge",
        "lockgate.level": app.default_priority,
    }
    assert [attrs(s)["lockgate.attempt"] for s in runs] == [1, 2]
    assert [attrs(s)["lockgate.outcome"] for s in runs] == ["retried", "done"]
    for run in runs:
        assert run.kind is SpanKind.CONSUMER
        assert parent_of(run) == send.context.span_id
        assert run.context.trace_id == send.context.trace_id
        assert attrs(run)["messaging.message.id"] == job.job_id
        assert attrs(run)["lockgate.wait_ms"] >= 0
        # No argument in any attribute.
        assert "tok_secret_4242" not in json.dumps(attrs(run), default=str)
    failed, succeeded = runs
    assert failed.status.status_code is StatusCode.ERROR
    (event,) = failed.events
    assert event.name == "exception"
    assert (event.attributes or {})["exception.type"] == "RuntimeError"
    assert succeeded.status.status_code is StatusCode.UNSET
    # Current inside the task: the task saw its own attempt's span.
    assert [ids(c) for c in seen] == [ids(r) for r in runs]


async def test_a_producer_span_is_a_child_of_the_active_span_and_one_per_batch(
    make_app: Callable[..., App], provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    tracer_provider, exporter = provider
    app = make_app()

    @app.task
    async def ping(n: int) -> None:
        pass

    with tracer_provider.get_tracer("test").start_as_current_span("request") as request:
        results = await app.enqueue_many_async([ping.message(n) for n in range(3)])
    await drain(app)
    (send,) = spans(exporter, "send default")
    assert parent_of(send) == request.get_span_context().span_id
    assert attrs(send)["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in attrs(send)
    runs = spans(exporter, "process default")
    assert sorted(attrs(r)["messaging.message.id"] for r in runs) == sorted(
        r.job_id for r in results
    )
    assert {parent_of(r) for r in runs} == {send.context.span_id}


async def test_the_span_is_current_inside_a_sync_task(
    make_app: Callable[..., App], exporter: InMemorySpanExporter
) -> None:
    app = make_app()
    seen: list[SpanContext] = []

    @app.task
    def resize(image: str) -> None:  # runs in the worker's thread pool
        seen.append(trace.get_current_span().get_span_context())

    resize.enqueue("a.png")
    await drain(app)
    (run,) = spans(exporter, "process default")
    assert [ids(c) for c in seen] == [ids(run)]


async def test_a_replayed_dead_letter_runs_in_the_trace_of_its_enqueue(
    make_app: Callable[..., App], exporter: InMemorySpanExporter
) -> None:
    app = make_app()
    fixed = False

    @app.task(retries=0)
    def charge(order_id: str) -> None:
        if not fixed:
            raise RuntimeError("card service bug")

    charge.enqueue("A1", job_id="charge-A1")
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.dead == 1)
        fixed = True
        (letter,) = list_dead(app)
        assert decode(letter.job).trace is not None  # kept in the dead letter
        (replayed,) = replay(app, [letter])
        assert replayed.outcome == "enqueued"
        await wait_until(lambda: worker.processed == 1)
    (send,) = spans(exporter, "send default")
    dead, rerun = spans(exporter, "process default")
    assert [attrs(dead)["lockgate.outcome"], attrs(rerun)["lockgate.outcome"]] == ["dead", "done"]
    assert {s.context.trace_id for s in (dead, rerun)} == {send.context.trace_id}
    assert parent_of(rerun) == send.context.span_id


async def test_a_rate_limited_put_back_keeps_the_trace(
    make_app: Callable[..., App], exporter: InMemorySpanExporter
) -> None:
    app = make_app()

    @app.task(rate_limit="600/m")  # one start every 100 ms: the second job is put back
    async def report(day: str) -> None:
        pass

    await report.enqueue_async("d1")
    second = await report.enqueue_async("d2")
    await drain(app)
    runs = [r for r in spans(exporter, "process default") if attrs(r)["messaging.message.id"]
            == second.job_id]  # fmt: skip
    outcomes = [attrs(r)["lockgate.outcome"] for r in runs]
    assert outcomes[-1] == "done" and "put_back" in outcomes
    sends = {s.context.span_id: s for s in spans(exporter, "send default")}
    (send,) = {parent_of(r) for r in runs}
    assert attrs(sends[send])["messaging.message.id"] == second.job_id


async def test_a_flow_callback_is_a_child_of_the_enqueue_flow_span(
    make_app: Callable[..., App], exporter: InMemorySpanExporter
) -> None:
    app = make_app()

    @app.task(keep_result=60)
    async def part(n: int) -> int:
        return n

    @app.task
    async def total() -> None:
        pass

    flow = group(part.message(1), part.message(2)).then(chain(total.message()))
    result = await app.enqueue_flow_async(flow)
    await drain(app)
    (send,) = spans(exporter, "send default")
    assert attrs(send)["lockgate.flow"] == result.flow_id
    assert attrs(send)["messaging.batch.message_count"] == 3
    runs = {attrs(r)["lockgate.task"]: r for r in spans(exporter, "process default")}
    parts = [r for r in spans(exporter, "process default") if attrs(r)["lockgate.task"] == "part"]
    assert len(parts) == 2
    callback = runs["total"]
    assert parent_of(callback) == send.context.span_id
    assert {parent_of(p) for p in parts} == {send.context.span_id}
    assert sorted(link.context.span_id for link in callback.links) == sorted(
        p.context.span_id for p in parts
    )


async def flow_done(app: App, flow_id: str) -> bool:
    return (await app.flow_async(flow_id)).state == "done"


async def test_a_flow_job_whose_trace_cannot_be_kept_runs_once_and_its_flow_goes_on(
    make_app: Callable[..., App],
    exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Keeping a run's trace context is best effort: even an unexpected failure of it
    costs the links only, never the run's ending (lost, it would leave the entry pending
    for the job to run again)."""
    app = make_app()
    runs: list[str] = []

    async def broken(*args: object) -> None:
        raise RuntimeError("the traces hash is gone")

    monkeypatch.setattr(Flows, "record_trace_async", broken)

    @app.task
    async def step(name: str) -> None:
        runs.append(name)

    result = await app.enqueue_flow_async(chain(step.message("first"), step.message("second")))
    async with running(worker_for(app)):
        await wait_until(lambda: flow_done(app, result.flow_id), message="the flow to end")
    assert runs == ["first", "second"]
    attempts = spans(exporter, "process default")
    assert len(attempts) == 2
    assert [list(a.links) for a in attempts] == [[], []]  # nothing kept to link to
    assert "its trace context could not be kept" in caplog.text


async def test_a_stop_during_a_slow_trace_write_cancels_a_run_whose_task_has_not_run(
    make_app: Callable[..., App],
    exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing is awaited between a task's return and the hand-off of its ending: a stop
    that cancels a run held up keeping its trace context finds the task not run yet (its
    entry, left pending, runs it once later), never run and its ending dropped."""
    app = make_app()
    runs: list[str] = []
    writing = asyncio.Event()

    async def slow(*args: object) -> None:
        writing.set()
        await asyncio.Event().wait()  # until cancelled

    monkeypatch.setattr(Flows, "record_trace_async", slow)

    @app.task
    async def step(name: str) -> None:
        runs.append(name)

    await app.enqueue_flow_async(chain(step.message("first"), step.message("second")))
    async with running(worker_for(app, grace_period=0.1)):
        await asyncio.wait_for(writing.wait(), WAIT_TIMEOUT)
    assert runs == []


async def test_json_log_lines_carry_the_trace_and_span_ids(
    make_app: Callable[..., App], exporter: InMemorySpanExporter
) -> None:
    app = make_app()
    task_log = logging.getLogger("tests.otel.task")
    task_log.setLevel(logging.INFO)

    @app.task
    async def work() -> None:
        task_log.info("inside")

    work.enqueue()
    worker = worker_for(app)
    worker.watchers.add(JobLog(app).enable())
    try:
        with json_lines("tests.otel.task", "lockgate.jobs") as lines:
            await asyncio.wait_for(worker.run(burst=True), WAIT_TIMEOUT)
    finally:
        logging.getLogger("lockgate.jobs").setLevel(logging.NOTSET)
    (run,) = spans(exporter, "process default")
    trace_id, span_id = format(run.context.trace_id, "032x"), format(run.context.span_id, "016x")
    inside = [line for line in lines if line["message"] == "inside"]
    ended = [line for line in lines if line["logger"] == "lockgate.jobs"]
    assert len(inside) == 1 and len(ended) == 1
    for line in inside + ended:
        assert (line["trace_id"], line["span_id"]) == (trace_id, span_id)
    # Outside any span: no ids.
    assert "trace_id" not in json.loads(JsonFormatter().format(logging.makeLogRecord({})))


async def test_the_workers_retry_and_dead_letter_lines_carry_their_runs_ids(
    make_app: Callable[..., App], exporter: InMemorySpanExporter
) -> None:
    app = make_app()

    @app.task(retries=1, backoff=0)
    async def flaky() -> None:
        raise RuntimeError("down")

    flaky.enqueue()
    with json_lines("lockgate.worker.loop") as lines:
        await drain(app)
    runs = sorted(spans(exporter, "process default"), key=lambda s: attrs(s)["lockgate.attempt"])
    assert len(runs) == 2
    retry = [line for line in lines if "attempt 1 failed" in line["message"]]
    dead = [line for line in lines if "dead-letter queue" in line["message"]]
    assert len(retry) == 1 and len(dead) == 1, lines
    for line, run in ((retry[0], runs[0]), (dead[0], runs[1])):
        ids = format(run.context.trace_id, "032x"), format(run.context.span_id, "016x")
        assert (line["trace_id"], line["span_id"]) == ids


async def test_uninstrument_stops_tracing(
    make_app: Callable[..., App], exporter: InMemorySpanExporter
) -> None:
    app = make_app()
    seen: list[bool] = []

    @app.task
    async def work() -> None:
        seen.append(trace.get_current_span().get_span_context().is_valid)

    LockgateInstrumentor().uninstrument()
    work.enqueue()
    await drain(app)
    assert seen == [False]
    assert exporter.get_finished_spans() == ()


def test_the_instrumentor_is_found_by_its_entry_point() -> None:
    (found,) = [e for e in entry_points(group="opentelemetry_instrumentor") if e.name == "lockgate"]
    assert found.load() is LockgateInstrumentor


def python(code: str, hidden: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child interpreter, with module ``hidden`` made unimportable."""
    prelude = f"import sys; sys.modules[{hidden!r}] = None\n" if hidden else ""
    return subprocess.run(
        [sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=60
    )


def test_without_the_extra_importing_lockgate_otel_is_one_line_naming_it() -> None:
    code = (
        "from lockgate import MissingExtra\n"
        "try:\n"
        "    import lockgate.otel\n"
        "except MissingExtra as e:\n"
        "    print(e.extra, '|', e)\n"
    )
    done = python(code, hidden="opentelemetry.instrumentation")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "otel | lockgate.otel needs opentelemetry-instrumentation, which is not installed: "
        "pip install 'lockgate[otel]'"
    )


def test_lockgate_loads_no_instrumentation_until_lockgate_otel_is_imported() -> None:
    code = (
        "import lockgate, lockgate.cli, lockgate.worker.loop, sys\n"
        "print(sorted(m for m in ('lockgate.otel', 'lockgate.integrations.otel',"
        " 'opentelemetry.instrumentation') if m in sys.modules))\n"
    )
    done = python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
