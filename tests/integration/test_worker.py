"""The worker's run loop: wake-up, queues, sync and async tasks, failures, stopping."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from conftest import finish, job_ended, running, wait_until, worker_for
from lockgate import App, ConnectionFailed, Worker, WorkerConfig, current_job
from lockgate.backend.keys import GROUP
from lockgate.core.codec import decode
from lockgate.ops.deadletter import list_dead

BACKENDS = ["streams", "sorted"]


def named(url: str, name: str) -> str:
    """The URL with a client name, so the worker's connection can be found in CLIENT LIST."""
    return f"{url}{'&' if '?' in url else '?'}client_name={name}"


def every_client(rclient: redis.Redis) -> list[dict[str, str]]:
    """CLIENT LIST of the server, or of every node of the cluster on the cluster run."""
    if isinstance(rclient, redis.RedisCluster):  # it would ask one node, at random
        listed: Any = rclient.client_list(target_nodes=redis.RedisCluster.ALL_NODES)
        return [client for clients in listed.values() for client in clients]
    return list(rclient.client_list())


def blocked_clients(rclient: redis.Redis, name: str) -> list[dict[str, str]]:
    return [
        c
        for c in every_client(rclient)
        if c.get("name") == name
        and "b" in c.get("flags", "")
        and c.get("cmd") in {"xread", "blpop"}
    ]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_idle_worker_wakes_up_when_a_job_arrives(
    make_app: Callable[..., App],
    redis_url: str,
    namespace: str,
    rclient: redis.Redis,
    backend: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A blocked worker is woken by the enqueue itself, not by its idle timeout.

    The idle wait is far longer than the hang bound, so only the wake-up path can run the
    job in time; no connection error may be logged on the way.
    """
    name = f"w-{namespace}"
    worker_app = make_app(backend=backend, redis_url=named(redis_url, name))
    producer_app = make_app(backend=backend)
    ran = asyncio.Event()

    @worker_app.task
    async def job() -> None:
        ran.set()

    producer = producer_app.task(name="job")(lambda: None)
    worker = Worker(worker_app, WorkerConfig(concurrency=2, idle_wait=600))
    async with running(worker):
        await wait_until(lambda: blocked_clients(rclient, name), message="worker blocked")
        producer.enqueue()
        await asyncio.wait_for(ran.wait(), 30)
        await wait_until(lambda: worker.processed == 1)
        # Idle again, and blocked again: the loop went round after the job.
        await wait_until(lambda: blocked_clients(rclient, name), message="worker blocked again")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_idle_worker_waits_quietly(
    make_app: Callable[..., App],
    redis_url: str,
    namespace: str,
    rclient: redis.Redis,
    backend: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Idle waits longer than a few seconds are normal; they are not connection failures.

    The worker's blocking read must survive a full idle wait of 5.5 s on one connection
    (a client socket timeout shorter than the idle wait breaks the read, drops the
    connection and logs a spurious "cannot connect" error).
    """
    name = f"w-{namespace}"
    app = make_app(backend=backend, redis_url=named(redis_url, name))

    @app.task
    async def job() -> None: ...

    worker = Worker(app, WorkerConfig(concurrency=1, idle_wait=5.5))
    async with running(worker):
        first = (await wait_until(lambda: blocked_clients(rclient, name)))[0]

        def outcome() -> str | None:
            if any(r.levelno >= logging.ERROR for r in caplog.records):
                return "error logged"
            clients = [c for c in every_client(rclient) if c.get("name") == name]
            if all(c["id"] != first["id"] for c in clients):
                return "connection dropped"
            return "survived" if int(first["age"]) + time.monotonic() - started > 6.5 else None

        started = time.monotonic()
        result = await wait_until(outcome, message="one full idle wait")
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert result == "survived", errors


@pytest.mark.parametrize("backend", BACKENDS)
async def test_multiple_queues(
    make_app: Callable[..., App], rclient: redis.Redis, backend: str
) -> None:
    app = make_app(backend=backend)
    ran: list[str] = []

    @app.task(queue="a")
    async def on_a(n: int) -> None:
        ran.append(f"a{n}")

    @app.task(queue="b")
    async def on_b(n: int) -> None:
        ran.append(f"b{n}")

    @app.task(queue="c")
    async def on_c(n: int) -> None:
        ran.append(f"c{n}")

    for n in range(3):
        on_a.enqueue(n)
        on_b.enqueue(n)
        on_c.enqueue(n)
    worker = worker_for(app, concurrency=2, queues=("a", "b"))
    async with running(worker):
        await wait_until(lambda: worker.processed == 6)
    assert sorted(ran) == ["a0", "a1", "a2", "b0", "b1", "b2"]
    # Queue c is not served here; its jobs wait for a worker that serves it.
    if backend == "streams":
        assert rclient.xlen(app.keys.stream("c", "normal")) == 3
    else:
        assert rclient.zcard(app.keys.sorted_waiting("c")) == 3
    everything = worker_for(app, concurrency=2)  # no queues given: every queue of the app
    assert everything.queues == ("a", "b", "c")
    async with running(everything):
        await wait_until(lambda: everything.processed == 3)
    assert sorted(ran)[6:] == ["c0", "c1", "c2"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_sync_tasks_run_in_threads_with_their_job(
    make_app: Callable[..., App], backend: str
) -> None:
    app = make_app(backend=backend)
    seen: list[tuple[str, str, str, int, str]] = []

    @app.task(priority="critical", queue="mail")
    def send(to: str) -> None:
        job = current_job()
        seen.append((to, job.job_id, job.level, job.attempt, threading.current_thread().name))

    send.enqueue("a@x", job_id="mail-1")
    send.enqueue("b@x", job_id="mail-2", priority="low")
    worker = worker_for(app, concurrency=2)
    async with running(worker):
        await wait_until(lambda: worker.processed == 2)
    assert sorted(s[:4] for s in seen) == [
        ("a@x", "mail-1", "critical", 1),
        ("b@x", "mail-2", "low", 1),
    ]
    assert all(s[4].startswith("lockgate-task") for s in seen)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_current_job_in_async_tasks(make_app: Callable[..., App], backend: str) -> None:
    app = make_app(backend=backend)
    seen = []

    @app.task(priority="low", queue="q")
    async def job() -> None:
        seen.append(current_job())

    before = time.time()
    job.enqueue(job_id="j-1")
    worker = worker_for(app)
    async with running(worker):
        await wait_until(lambda: worker.processed == 1)
    (context,) = seen
    assert (context.job_id, context.task, context.queue, context.level, context.attempt) == (
        "j-1",
        "job",
        "q",
        "low",
        1,
    )
    assert before - 1 <= context.enqueued <= time.time()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_failing_task_is_logged_and_dead_lettered(
    make_app: Callable[..., App],
    rclient: redis.Redis,
    backend: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A task raising a dead_on error runs once and lands in the dead-letter queue."""
    app = make_app(backend=backend)
    runs: list[str] = []

    @app.task(dead_on=(RuntimeError,))
    def boom() -> None:
        runs.append("boom")
        raise RuntimeError("kaput")

    @app.task
    async def fine() -> None: ...

    boom.enqueue(job_id="boom-1")
    fine.enqueue(job_id="fine-1")
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.processed == 1 and worker.dead == 1)
    assert runs == ["boom"]  # not retried
    assert (worker.retried, worker.failed) == (0, 1)
    failures = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert failures and all("boom-1" in r.getMessage() for r in failures), failures
    # The dead letter's line reports the error; its traceback follows the line, as an
    # exception's does (the record's exc_text: see lockgate.core.logs).
    with_traceback = [r for r in failures if "Traceback" in (r.exc_text or "")]
    assert len(with_traceback) == 1
    assert "RuntimeError: kaput" in with_traceback[0].getMessage()
    assert "RuntimeError: kaput" in (with_traceback[0].exc_text or "")
    assert any("dead-letter queue" in r.getMessage() for r in failures)
    (letter,) = list_dead(app)
    assert (letter.job_id, letter.task, letter.reason) == ("boom-1", "boom", "failed")
    assert (letter.error_type, letter.error) == ("RuntimeError", "kaput")
    assert "RuntimeError: kaput" in letter.traceback
    assert (letter.attempt, letter.deliveries) == (1, 1)
    assert (letter.queue, letter.level) == ("default", "normal")
    assert decode(letter.job).id == "boom-1"
    # Acked and deleted, not pending: both ids are free, nothing is left in flight.
    assert job_ended(rclient, app.keys, "boom-1") and job_ended(rclient, app.keys, "fine-1")
    if backend == "streams":
        stream = app.keys.stream("default", "normal")
        assert letter.origin == stream
        assert rclient.xpending(stream, GROUP)["pending"] == 0
        assert rclient.xlen(stream) == 0
    else:
        assert (letter.origin, letter.entry) == ("default", "boom-1")
        assert rclient.zcard(app.keys.sorted_inflight("default")) == 0
        assert rclient.hlen(app.keys.sorted_payloads("default")) == 0
    # The id is free: the job can be enqueued again (a replay does the same).
    assert boom.enqueue(job_id="boom-1").created


async def test_a_sync_task_returning_an_awaitable_is_an_error(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()

    async def later() -> None: ...

    @app.task
    def wrong() -> object:
        return later()

    wrong.enqueue(job_id="wrong-1")
    worker = worker_for(app)
    async with running(worker):
        await wait_until(lambda: worker.dead == 1)
    assert (worker.processed, worker.retried) == (0, 0)
    assert "wrong-1" in caplog.text and "async def" in caplog.text
    (letter,) = list_dead(app)
    assert (letter.job_id, letter.error_type, letter.reason) == ("wrong-1", "ConfigError", "failed")
    assert "async def" in letter.error


@pytest.mark.parametrize("backend", BACKENDS)
async def test_stop_lets_running_jobs_finish_within_the_grace_period(
    make_app: Callable[..., App], rclient: redis.Redis, backend: str
) -> None:
    app = make_app(backend=backend)
    started = asyncio.Event()
    release = asyncio.Event()
    finished: list[str] = []

    @app.task
    async def slow(n: int) -> None:
        started.set()
        await release.wait()
        finished.append(str(n))

    first = slow.enqueue(1)
    worker = worker_for(app, concurrency=1, grace_period=60)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 30)
    worker.request_stop()
    second = slow.enqueue(2)  # arrives after the stop: not taken
    release.set()
    # Loose bound: the job is done at once; the grace period is not the bound.
    await finish(worker, task, timeout=10)
    assert finished == ["1"]
    assert worker.processed == 1
    # The finished job was acked; the one enqueued after the stop still waits.
    assert job_ended(rclient, app.keys, first.job_id)
    assert not job_ended(rclient, app.keys, second.job_id)
    if backend == "streams":
        stream = app.keys.stream("default", "normal")
        assert rclient.xpending(stream, GROUP)["pending"] == 0
        assert rclient.xlen(stream) == 1
    else:
        assert rclient.zcard(app.keys.sorted_inflight("default")) == 0
        assert rclient.zrange(app.keys.sorted_waiting("default"), 0, -1) == [second.job_id.encode()]


async def test_stop_after_the_grace_period_leaves_the_job_pending(
    make_app: Callable[..., App], rclient: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    started = asyncio.Event()

    @app.task
    async def stuck() -> None:
        started.set()
        await asyncio.Event().wait()

    stuck.enqueue(job_id="stuck-1")
    worker = worker_for(app, concurrency=1, grace_period=0)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 30)
    worker.request_stop()
    await finish(worker, task, timeout=10)
    assert worker.processed == 0
    assert "stuck-1" in caplog.text and "left pending" in caplog.text
    assert rclient.xpending(app.keys.stream("default", "normal"), GROUP)["pending"] == 1
    assert not job_ended(rclient, app.keys, "stuck-1")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_stopping_a_busy_worker_returns(make_app: Callable[..., App], backend: str) -> None:
    """request_stop() on a worker in full flow ends run() promptly, every time.

    Stops land at arbitrary points of the loop (mid-read, mid-ack); each must end the run
    within a loose bound, well above the time the few in-flight no-op jobs need.
    """
    app = make_app(backend=backend)
    count = 0

    @app.task
    async def job() -> None:
        nonlocal count
        count += 1

    app.enqueue_many([job.message() for _ in range(3000)])
    for round_ in range(12):
        worker = worker_for(app, concurrency=4, grace_period=5)
        task = asyncio.create_task(worker.run())
        target = count + 50
        await wait_until(lambda: count >= target)  # noqa: B023
        worker.request_stop()
        try:
            await finish(worker, task, timeout=10)
        except AssertionError as e:
            raise AssertionError(f"round {round_}: {e}") from None


async def test_worker_fails_fast_when_redis_is_unreachable(make_app: Callable[..., App]) -> None:
    app = make_app(redis_url="redis://127.0.0.1:1/0")
    with pytest.raises(ConnectionFailed, match=re.escape("127.0.0.1:1")):
        await asyncio.wait_for(Worker(app, WorkerConfig()).run(), 30)


async def test_heartbeats_keep_a_long_job_from_a_second_worker(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    """Sorted backend: a job running for many leases is extended, never handed out twice."""
    app = make_app(backend="sorted")
    runs: list[int] = []
    release = asyncio.Event()

    @app.task
    async def long() -> None:
        runs.append(1)
        await release.wait()

    long.enqueue(job_id="long-1")
    inflight = app.keys.sorted_inflight("default")
    deadlines: list[float] = []

    def extended_three_times() -> bool:
        score = rclient.zscore(inflight, "long-1")
        if score is not None and (not deadlines or score > deadlines[-1]):
            deadlines.append(score)
        return len(deadlines) >= 4

    first = worker_for(app, concurrency=1, visibility_timeout=0.3)
    second = worker_for(app, concurrency=1, visibility_timeout=0.3)
    async with running(first):
        await wait_until(lambda: runs == [1])
        async with running(second):
            # Three extensions: the lease was renewed well past its first deadline while
            # the second worker kept looking for work.
            await wait_until(extended_three_times, message="lease extended three times")
            release.set()
            await wait_until(lambda: first.processed == 1)
    assert runs == [1]
    assert second.processed == 0
    assert rclient.zcard(inflight) == 0


async def test_a_second_stop_request_cancels_running_jobs(
    make_app: Callable[..., App], rclient: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    started = asyncio.Event()

    @app.task
    async def stuck() -> None:
        started.set()
        await asyncio.Event().wait()

    stuck.enqueue(job_id="stuck-1")
    worker = worker_for(app, concurrency=1, grace_period=600)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 30)
    worker.request_stop()
    worker.request_stop()  # impatient: do not wait out the grace period
    await finish(worker, task, timeout=10)
    assert worker.processed == 0
    assert "second stop request" in caplog.text
    assert rclient.xpending(app.keys.stream("default", "normal"), GROUP)["pending"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_burst_worker_exits_once_its_last_settle_lands(
    make_app: Callable[..., App], backend: str
) -> None:
    """A burst worker does not sleep out its idle wait for its own last settles.

    On the sorted backend a job stays in flight (with a lease) until its settle lands, and
    a read made before that saw "work later" and blocked for the whole idle wait, which is
    far longer than the hang bound here.
    """
    app = make_app(backend=backend)
    done: list[int] = []

    @app.task
    async def job(n: int) -> None:
        done.append(n)

    app.enqueue_many([job.message(n) for n in range(40)])
    worker = worker_for(app, concurrency=4, idle_wait=60.0)
    started = time.monotonic()
    await asyncio.wait_for(worker.run(burst=True), timeout=30)
    # The last settle lands within milliseconds; waiting for a lease or the idle wait
    # took 15 s or more. A loose bound against that hang, not a timing goal.
    assert time.monotonic() - started < 5.0
    assert sorted(done) == list(range(40))
    assert worker.processed == 40


async def test_reads_go_on_when_the_intake_limit_grows_back_under_long_runs(
    make_app: Callable[..., App],
) -> None:
    """A lag spike shrinks the intake limit below the jobs that run for long; once the lag
    is gone and the limit grows back, the worker reads again though none of them ended
    (its fetch loop waited for a run to end: on a loaded machine a worker with long jobs
    stopped taking any new one)."""
    app = make_app()
    release, short_release = asyncio.Event(), asyncio.Event()
    done: list[int] = []

    @app.task
    async def hold(n: int) -> None:
        await release.wait()

    @app.task
    async def short() -> None:
        await short_release.wait()

    @app.task
    async def plain(n: int) -> None:
        done.append(n)

    app.enqueue_many([hold.message(n) for n in range(40)] + [short.message()])
    worker = worker_for(app, concurrency=48)
    async with running(worker):
        await wait_until(lambda: len(worker._running) == 41, message="41 runs")
        for _ in range(20):  # the lag samples of a spike (the sampler sees ~0 from now on)
            worker._intake.observe(1.0)
        assert worker._intake.limit < 40
        short_release.set()  # a run ends: the fetch loop looks, and finds no free slot
        await wait_until(lambda: worker.processed == 1, message="the short run ended")
        await app.enqueue_many_async([plain.message(n) for n in range(10)])
        await wait_until(lambda: len(done) == 10, message="the plain jobs ran")
        release.set()
        await wait_until(lambda: worker.processed == 51)
