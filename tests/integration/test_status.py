"""A job's status from enqueue to end, its kept result or error, and cancellation, on both
backends against a real Redis: ``r.status()``, ``r.result()``, ``app.job()``,
``app.cancel()``."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import UTC, date, datetime

import msgspec
import pytest

from conftest import job_ended, running, wait_until, worker_for
from lockgate import App, CancelOutcome, ConfigError, Message, RetryableError, current_job
from lockgate.errors import JobCancelled, JobFailed, ResultUnavailable
from lockgate.ops.deadletter import list_dead

BACKENDS = ["streams", "sorted"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_job_reads_waiting_running_then_done_with_its_times(
    make_app: Callable[..., App], backend: str
) -> None:
    app = make_app(backend=backend)
    started, release = asyncio.Event(), asyncio.Event()

    @app.task
    async def charge(order: str) -> None:
        started.set()
        await release.wait()

    before = datetime.now(UTC)
    r = await charge.enqueue_async("A1", job_id="pay:A1")
    assert r.status() == "waiting"
    info = app.job("pay:A1")
    assert (info.status, info.task, info.attempts) == ("waiting", "charge", 0)
    assert info.enqueued_at is not None and info.enqueued_at >= before.replace(microsecond=0)
    assert app.job("never-enqueued").status == "unknown"

    worker = worker_for(app)
    async with running(worker):
        await asyncio.wait_for(started.wait(), 30)
        assert (await app.job_async("pay:A1")).status == "running"
        assert (await app.job_async("pay:A1")).attempts == 1
        release.set()
        await wait_until(lambda: r.status() == "done", message="done")
    info = app.job("pay:A1")
    assert (info.status, info.attempts, info.reason) == ("done", 1, "")
    assert info.started_at is not None and info.finished_at is not None
    assert info.enqueued_at is not None
    assert info.enqueued_at <= info.started_at <= info.finished_at
    # Ended: the id is free again, and a new job under it starts over.
    assert job_ended(app.client(), app.keys, "pay:A1")
    again = await charge.enqueue_async("A1", job_id="pay:A1")
    assert again.created and again.status() == "waiting"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_delayed_then_retried_jobs_read_delayed_and_count_attempts(
    make_app: Callable[..., App], backend: str
) -> None:
    app = make_app(backend=backend)
    runs: list[int] = []

    @app.task(retries=2, keep_result=60)
    def flaky() -> int:
        attempt = current_job().attempt
        runs.append(attempt)
        if attempt == 1:
            raise RetryableError("not yet", delay=0.3)
        return attempt

    later = flaky.enqueue(job_id="later", delay=3600)
    assert later.status() == "delayed"
    assert app.cancel("later")
    r = flaky.enqueue(job_id="flaky-1")
    worker = worker_for(app)
    async with running(worker):
        # Between its attempts the job waits in the delayed set, one attempt spent.
        info = await wait_until(lambda: (i := app.job("flaky-1")).status == "delayed" and i)
        assert info.attempts == 1
        assert await r.result_async(timeout=30) == 2
    assert runs == [1, 2]
    assert app.job("flaky-1").attempts == 2


@pytest.mark.parametrize("backend", BACKENDS)
async def test_results_are_kept_typed_and_errors_raise_job_failed(
    make_app: Callable[..., App], backend: str
) -> None:
    app = make_app(backend=backend)

    @app.task(keep_result=60)
    def total(order: str, amounts: list[int]) -> dict[str, int]:
        return {order: sum(amounts)}

    @app.task(keep_result=60)
    async def due(days: int) -> date:
        return date(2024, 1, days)

    @app.task(keep_result=60, retries=0)
    def boom() -> None:
        raise ValueError("card declined")

    @app.task
    def forgotten() -> int:
        return 1

    a = total.enqueue("A1", [100, 250])
    b = due.enqueue(31)
    c = boom.enqueue(job_id="boom-1")
    d = forgotten.enqueue()
    # A task that keeps nothing: a clear error at once, not a hang.
    with pytest.raises(ConfigError, match="keeps no result"):
        d.result(timeout=5)
    # Nothing runs yet: the wait ends at its timeout.
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        a.result(timeout=0.2)
    assert time.monotonic() - t0 < 10
    async with running(worker_for(app)):
        assert await a.result_async(timeout=30) == {"A1": 350}
        assert await asyncio.to_thread(b.result, 30) == date(2024, 1, 31)  # typed
        with pytest.raises(JobFailed) as failed:
            await c.result_async(timeout=30)
    assert failed.value.type_name == "ValueError"
    assert failed.value.message == "card declined"
    assert "card declined" in failed.value.traceback and "boom" in failed.value.traceback
    info = app.job("boom-1")
    assert info.status == "dead" and info.error is not None
    assert info.error.type == "ValueError"
    assert [letter.job_id for letter in list_dead(app)] == ["boom-1"]
    with pytest.raises(ResultUnavailable):
        app.wait_result("never-enqueued", timeout=1)


async def test_a_final_status_is_kept_status_ttl_then_reads_unknown(
    make_app: Callable[..., App],
) -> None:
    app = make_app(status_ttl=0.3)

    @app.task
    def noop() -> None:
        pass

    r = noop.enqueue()
    async with running(worker_for(app)):
        await wait_until(lambda: r.status() == "done", message="done")
    await wait_until(lambda: r.status() == "unknown", timeout=30, message="status expired")
    client = app.client()
    assert client.exists(app.keys.job(r.job_id), app.keys.status(r.job_id)) == 0  # no trace
    # The window's hash and the index expire with the record (ttl + an eighth at most).
    await wait_until(
        lambda: not list(client.scan_iter(match=app.keys.statuses() + "*")),
        message="the records' hash and index expired",
    )


async def test_without_status_ttl_an_ended_job_leaves_no_key(
    make_app: Callable[..., App],
) -> None:
    app = make_app(status_ttl=None)

    @app.task
    def noop() -> None:
        pass

    r = noop.enqueue()
    await worker_for(app).run(burst=True)
    assert r.status() == "unknown"
    client = app.client()
    assert client.exists(app.keys.job(r.job_id), app.keys.status(r.job_id)) == 0
    assert not list(client.scan_iter(match=app.keys.statuses() + "*"))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_cancel_removes_waiting_and_delayed_jobs_and_frees_their_ids(
    make_app: Callable[..., App], backend: str
) -> None:
    app = make_app(backend=backend)
    ran: list[str] = []

    @app.task
    def send(what: str) -> None:
        ran.append(what)

    send.enqueue("waiting", job_id="w")
    send.enqueue("delayed", job_id="d", delay=3600)
    send.enqueue("kept", job_id="k")
    assert app.cancel("w") is CancelOutcome.CANCELLED
    assert app.cancel("d") is CancelOutcome.CANCELLED
    assert app.cancel("w") is CancelOutcome.ENDED  # already cancelled
    assert app.cancel("nobody") is CancelOutcome.UNKNOWN
    assert not app.cancel("nobody")
    assert app.cancel("w") == "ended"  # a str
    assert (app.job("w").status, app.job("d").status) == ("cancelled", "cancelled")
    cancelled = app.job("w")  # what it was is kept with it
    assert (cancelled.task, cancelled.attempts, cancelled.reason) == ("send", 0, "cancelled")
    assert cancelled.enqueued_at is not None and cancelled.finished_at is not None
    with pytest.raises(JobCancelled):
        app.wait_result("w", timeout=1)
    await worker_for(app).run(burst=True)
    assert ran == ["kept"]
    assert await app.cancel_async("k") is CancelOutcome.ENDED  # nothing to cancel
    assert not CancelOutcome.ENDED
    # The ids are free again.
    assert send.enqueue("again", job_id="w").created
    await worker_for(app).run(burst=True)
    assert ran == ["kept", "again"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_running_async_job_is_cancelled_not_retried_nor_dead_lettered(
    make_app: Callable[..., App], backend: str
) -> None:
    app = make_app(backend=backend)
    started, stopped = asyncio.Event(), asyncio.Event()

    @app.task(retries=3, keep_result=60)
    async def report() -> str:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            stopped.set()
            raise
        return "finished"

    r = await report.enqueue_async(job_id="report-1")
    worker = worker_for(app)
    async with running(worker):
        await asyncio.wait_for(started.wait(), 30)
        outcome = await app.cancel_async("report-1")  # running: told, not removed
        assert outcome is CancelOutcome.CANCELLING and outcome
        await asyncio.wait_for(stopped.wait(), 30)
        with pytest.raises(JobCancelled):
            await r.result_async(timeout=30)
    assert r.status() == "cancelled"
    assert (worker.retried, worker.failed) == (0, 0)
    assert list_dead(app) == []
    assert job_ended(app.client(), app.keys, "report-1")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_running_sync_job_sees_cancelled_become_true(
    make_app: Callable[..., App], backend: str
) -> None:
    app = make_app(backend=backend)
    started = threading.Event()
    seen: list[bool] = []

    @app.task
    def export() -> None:
        job = current_job()
        started.set()
        deadline = time.monotonic() + 30
        while not job.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(job.cancelled)
        raise asyncio.CancelledError

    r = export.enqueue()
    worker = worker_for(app)
    async with running(worker):
        assert await asyncio.to_thread(started.wait, 30)
        assert r.cancel() is CancelOutcome.CANCELLING
        await wait_until(lambda: r.status() == "cancelled", message="cancelled")
    assert seen == [True]
    assert (worker.retried, worker.failed) == (0, 0)
    assert list_dead(app) == []


async def test_a_kept_result_outlives_a_shorter_status_ttl(
    make_app: Callable[..., App],
) -> None:
    app = make_app(status_ttl=0.2)

    @app.task(keep_result=60)
    def total() -> int:
        return 42

    r = total.enqueue()
    await worker_for(app).run(burst=True)
    status_key = app.keys.status(r.job_id)
    await wait_until(lambda: not app.client().exists(status_key), message="status expired")
    assert r.status() == "done"
    assert r.result(timeout=5) == 42


async def test_an_expired_job_reads_cancelled_with_no_attempt_spent(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    @app.task(expires=60)
    def send_otp() -> None: ...

    message = send_otp.message(job_id="otp")
    late = msgspec.structs.replace(message.job, enqueued=time.time() - 61)
    await app.enqueue_many_async([Message(late)])
    await worker_for(app).run(burst=True)
    info = app.job("otp")
    assert (info.status, info.attempts) == ("cancelled", 0)
    assert info.reason.startswith("expired")
    with pytest.raises(JobCancelled, match="was cancelled: expired"):
        app.wait_result("otp", timeout=1)
