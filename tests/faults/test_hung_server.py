"""A server that hangs (SIGSTOP: its sockets stay open, it answers nothing) under producers
and a worker: every call returns within a deadline, and what may have landed says so.

Issue 22, defects 3 and 6: the worker's client had no socket timeout (TCP keepalive never
fires against a stopped process), so it ran nothing for as long as the server hung; an
enqueue that timed out said "cannot connect" though it may have landed, without the id a
safe retry needs.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable

import pytest

import lockgate
from conftest import running, worker_for
from faults.support import PrivateRedis, Runs, closed_port, hold, once, settled, wait_serving
from lockgate import App, Task, current_job

BACKENDS = ["streams", "sorted"]
# A loose bound against hangs, not a timing claim: the figures go in the report.
BOUND = 30.0
# How long the worker's server stays stopped (the outage was 40 s).
HANG = 12.0
VISIBILITY = 5.0


def recording_app(
    make_app: Callable[..., App], server: PrivateRedis, backend: str
) -> tuple[App, Task, Runs]:
    """An app on ``server`` with one async task that records its runs."""
    app = make_app(redis_url=server.url, namespace=uuid.uuid4().hex, backend=backend)
    runs = Runs()

    @app.task
    async def job(n: int) -> None:
        runs.record(current_job().job_id)
        await asyncio.sleep(0.01)

    return app, job, runs


@pytest.mark.parametrize("backend", BACKENDS)
async def test_enqueue_to_a_hung_server_raises_outcome_unknown_and_a_retry_runs_it_once(
    private_redis: Callable[..., PrivateRedis], make_app: Callable[..., App], backend: str
) -> None:
    server = private_redis()
    app, job, runs = recording_app(make_app, server, backend)
    first = job.enqueue(0)  # connected, partitions checked: the next call meets the hang
    server.pause()
    try:
        started = time.monotonic()
        with pytest.raises(lockgate.OutcomeUnknown) as caught:
            job.enqueue(1)  # sync facade, a generated id
        took = time.monotonic() - started
    finally:
        server.resume()
    print(f"sync enqueue to a hung server raised after {took:.2f} s")
    assert took < BOUND
    error = caught.value
    assert isinstance(error, lockgate.ConnectionFailed)  # callers catching it still do
    (job_id,) = error.job_ids
    assert job_id != first.job_id
    assert job_id in str(error)
    assert "may have been queued" in str(error)
    # Retried with its id: no second job whether or not the first landed.
    job.enqueue(1, job_id=job_id)
    async with running(worker_for(app, concurrency=4)) as task:
        await settled(task, app, server, runs, [first.job_id, job_id])
    assert runs.counts() == once([first.job_id, job_id])


async def test_enqueue_many_async_to_a_hung_server_carries_every_id(
    private_redis: Callable[..., PrivateRedis], make_app: Callable[..., App]
) -> None:
    server = private_redis()
    app, job, runs = recording_app(make_app, server, "streams")
    await job.enqueue_async(0)
    server.pause()
    messages = [job.message(n) for n in range(1, 4)]
    messages.append(job.message(4, job_id="named-4"))
    try:
        started = time.monotonic()
        with pytest.raises(lockgate.OutcomeUnknown) as caught:
            await app.enqueue_many_async(messages)
        took = time.monotonic() - started
    finally:
        server.resume()
    print(f"enqueue_many_async to a hung server raised after {took:.2f} s")
    assert took < BOUND
    ids = [m.job.id for m in messages]
    assert list(caught.value.job_ids) == ids
    # A retry of the whole batch with the same ids (the messages carry them) is safe.
    await app.enqueue_many_async(messages)
    async with running(worker_for(app, concurrency=4)) as task:
        await settled(task, app, server, runs, ids)
    counts = runs.counts()
    assert {job_id: counts[job_id] for job_id in ids} == once(ids)


async def test_enqueue_to_a_closed_port_is_a_plain_connection_failure(
    make_app: Callable[..., App],
) -> None:
    """Refused before anything was sent: nothing can have landed, so no OutcomeUnknown."""
    app = make_app(redis_url=f"redis://127.0.0.1:{closed_port()}/0", namespace=uuid.uuid4().hex)

    @app.task
    def job() -> None: ...

    with pytest.raises(lockgate.ConnectionFailed) as caught:
        job.enqueue()
    assert not isinstance(caught.value, lockgate.OutcomeUnknown)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_worker_on_a_hung_server_fails_its_calls_in_seconds_and_recovers(
    private_redis: Callable[..., PrivateRedis],
    make_app: Callable[..., App],
    backend: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = private_redis()
    app, job, runs = recording_app(make_app, server, backend)
    before = [r.job_id for r in app.enqueue_many([job.message(n) for n in range(20)])]
    caplog.set_level(logging.WARNING, logger="lockgate")
    # A read whose reply the hang swallowed took its jobs on the server all the same: they
    # come back to this worker once idle past the visibility timeout (as after a lost
    # connection), so it is short here.
    async with running(worker_for(app, concurrency=4, visibility_timeout=VISIBILITY)) as task:
        await settled(task, app, server, runs, before)
        # Jobs that come in while the worker is busy reading and settling.
        during = [r.job_id for r in app.enqueue_many([job.message(n) for n in range(20, 60)])]
        server.pause()
        paused_at = time.monotonic()
        try:
            # While the server still hangs, the worker's calls come back (a timeout,
            # logged) instead of waiting for the server: today they wait for SIGCONT.
            def timed_out() -> bool:
                return any(
                    "imeout" in record.getMessage()
                    for record in caplog.records
                    if record.created >= time.time() - (time.monotonic() - paused_at)
                )

            await wait_serving(task, timed_out, HANG, "a worker call that timed out, logged")
            first_timeout = time.monotonic() - paused_at
            await hold(task, max(0.0, HANG - first_timeout), "the hang")
        finally:
            server.resume()
        resumed_at, ran = time.monotonic(), runs.total()
        await wait_serving(task, lambda: runs.total() > ran, BOUND, "a run after SIGCONT")
        working = time.monotonic() - resumed_at
        await settled(task, app, server, runs, during)
        recovered = time.monotonic() - resumed_at
    print(
        f"{backend}: first worker timeout {first_timeout:.2f} s into the hang; a job ran "
        f"{working:.2f} s and every job settled {recovered:.2f} s after SIGCONT"
    )
    assert runs.counts() == once(before + during)


async def test_a_write_larger_than_the_socket_buffers_to_a_hung_server_times_out(
    private_redis: Callable[..., PrivateRedis], make_app: Callable[..., App]
) -> None:
    """The write itself blocks (the server reads nothing): its deadline holds too."""
    server = private_redis()
    app = make_app(redis_url=server.url, namespace=uuid.uuid4().hex)

    @app.task
    async def big(blob: str) -> None: ...

    await big.enqueue_async("x")
    messages = [big.message("x" * 900_000) for _ in range(64)]  # 57 MB in one call
    server.pause()
    try:
        started = time.monotonic()
        with pytest.raises(lockgate.OutcomeUnknown) as caught:
            await app.enqueue_many_async(messages)
        took = time.monotonic() - started
    finally:
        server.resume()
    print(f"a 57 MB enqueue to a hung server raised after {took:.2f} s: {caught.value.reason}")
    assert took < BOUND
    assert "writing" in caught.value.reason
    assert list(caught.value.job_ids) == [m.job.id for m in messages]
