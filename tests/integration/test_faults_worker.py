"""The worker under the faults of issue 8: defects 2, 3, 8, 9, 10, 16 and 20.

Each test failed on the worker before the settle rewrite (one owner-checked settle call,
reclaim by ``XPENDING IDLE``, redelivered jobs in child processes, the wake stream) and
passes now. Bounds are loose; the measured times are printed (run pytest with ``-s``).

A redelivered job runs in a child process: such tasks record through Redis, under the
test namespace's ``test`` prefix, never through the test's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis

from conftest import (
    finish,
    inspection_client,
    job_ended,
    running,
    unacked_reads,
    wait_until,
    worker_for,
)
from faults.support import PrivateRedis, hold, leftovers, wait_serving
from lockgate import App, ConfigError, Message, RetryableError, current_job
from lockgate.backend.connections import async_client
from lockgate.backend.keys import GROUP
from lockgate.backend.sorted_broker import SortedConsumer
from lockgate.backend.stream_consumer import StreamConsumer
from lockgate.ops.deadletter import list_dead


def record_key(app: App, name: str) -> str:
    """Where tasks record what they did (inside the namespace, deleted at teardown)."""
    return f"{app.keys.prefix}:test:{name}"


def pending_owner(rclient: redis.Redis, stream: str) -> list[tuple[str, int]]:
    """(consumer, times delivered) of each pending entry of ``stream``, oldest first."""
    rows = rclient.xpending_range(stream, GROUP, "-", "+", 100)
    return [(row["consumer"].decode(), int(row["times_delivered"])) for row in rows]


class IdleWaits:
    """Counts the workers blocked in their idle wait right now (a spy on ``cls``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, cls: Any) -> None:
        self.active = 0
        original = cls.wait_for_work

        async def spy(consumer: Any, timeout: float) -> None:
            self.active += 1
            try:
                await original(consumer, timeout)
            finally:
                self.active -= 1

        monkeypatch.setattr(cls, "wait_for_work", spy)


# Defect 2: a dead worker's job behind 1,000 live pending entries.


@contextlib.asynccontextmanager
async def kept_fresh(url: str, stream: str, consumer: str, ids: list[bytes]) -> AsyncIterator[None]:
    """Heartbeat ``ids`` for ``consumer`` every 100 ms, as a live worker would."""
    client = async_client(url)  # a cluster client on the cluster run

    async def beat() -> None:
        while True:
            await client.xclaim(stream, GROUP, consumer, 0, ids, justid=True)
            await asyncio.sleep(0.1)

    beating = asyncio.create_task(beat())
    try:
        yield
    finally:
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating
        await client.aclose()


async def test_a_dead_workers_job_is_reclaimed_behind_1000_live_pending_entries(
    make_app: Callable[..., App], rclient: redis.Redis, redis_url: str
) -> None:
    """Before: XAUTOCLAIM from 0-0 COUNT 1 scanned the first 10 PEL entries only, all live:
    the dead worker's job stayed pending for as long as the live ones ran."""
    app = make_app()
    started_key = record_key(app, "ghost-started")

    @app.task
    async def hold_on(n: int) -> None: ...

    @app.task
    def orphan(n: int) -> None:
        app.client().set(started_key, repr(time.time()))  # runs in a child process

    stream = app.keys.stream("default", "normal")
    app.enqueue_many([hold_on.message(n) for n in range(1000)])
    live = unacked_reads(rclient, stream, "live", 1000)
    # Newer than the live entries: XAUTOCLAIM from 0-0 would have to scan past them.
    orphan.enqueue(1, job_id="orphan")
    unacked_reads(rclient, stream, "ghost")
    idle_since = time.time()  # the ghost read it and died
    worker = worker_for(app, concurrency=4, visibility_timeout=1.0)
    async with kept_fresh(redis_url, stream, "live", live), running(worker):
        await wait_until(lambda: rclient.get(started_key), timeout=10, message="orphan ran")
        await wait_until(lambda: worker.processed == 1, timeout=10, message="orphan settled")
        waited = float(rclient.get(started_key)) - idle_since
        summary = rclient.xpending(stream, GROUP)
    print(f"\ndefect 2: the dead worker's job started {waited * 1000:.0f} ms after it went "
          "idle (visibility timeout 1000 ms, 1000 live pending entries)")  # fmt: skip
    assert waited < 3.0  # the goal is 1.5 x the visibility timeout; loose here
    assert summary["pending"] == 1000
    assert [(c["name"], c["pending"]) for c in summary["consumers"]] == [(b"live", 1000)]
    assert job_ended(rclient, app.keys, "orphan")


# Defect 3: a redelivered job does not hold back new work.


async def test_a_long_redelivered_job_does_not_hold_back_new_work(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    """Before: a reclaimed job ran alone and the worker read nothing until it ended."""
    app = make_app()
    started_key, release_key = record_key(app, "slow-started"), record_key(app, "slow-release")
    quick_started: list[float] = []

    @app.task
    def slow(n: int) -> None:  # redelivered: runs in a child process
        client = app.client()
        client.set(started_key, "1")
        while not client.blpop([release_key], timeout=1):
            pass

    @app.task(priority="critical")
    async def quick(n: int) -> None:
        quick_started.append(time.monotonic())

    slow.enqueue(1, job_id="slow")
    stream = app.keys.stream("default", "normal")
    unacked_reads(rclient, stream, "ghost")
    worker = worker_for(app, concurrency=4, visibility_timeout=0.5)
    async with running(worker):
        try:
            await wait_until(lambda: rclient.exists(started_key), timeout=10,
                             message="the reclaimed job started")  # fmt: skip
            enqueued = time.monotonic()
            await quick.enqueue_async(1)
            await wait_until(lambda: quick_started, timeout=5, message="the new job started")
            waited = quick_started[0] - enqueued
            # The reclaimed job still runs meanwhile, on this worker.
            assert pending_owner(rclient, stream) == [(worker.name, 2)]
        finally:
            rclient.rpush(release_key, "go")
        await wait_until(lambda: worker.processed == 2, message="both jobs settled")
    print(f"\ndefect 3: a new critical job started {waited * 1000:.0f} ms after its enqueue "
          "while a redelivered job ran")  # fmt: skip
    assert waited < 2.0
    assert list_dead(app) == []


# Defect 8: idempotent=True keys include the task name.


async def test_idempotent_tasks_that_share_a_job_id_both_run(
    make_app: Callable[..., App],
) -> None:
    """Before: the claim key was the job id alone, so ``send_receipt`` met ``charge``'s done
    marker and was acknowledged without running."""
    app = make_app()
    ran: list[str] = []

    @app.task(idempotent=True)
    async def charge(order: int) -> None:
        ran.append("charge")

    @app.task(idempotent=True)
    async def send_receipt(order: int) -> None:
        ran.append("send_receipt")

    worker = worker_for(app, concurrency=2)
    async with running(worker):
        assert (await charge.enqueue_async(42, job_id="order:42")).created
        await wait_until(lambda: worker.processed == 1, message="charge settled")
        assert (await send_receipt.enqueue_async(42, job_id="order:42")).created
        await wait_until(lambda: worker.processed == 2, message="send_receipt settled")
        # Each task's own done marker still holds: a duplicate of either does not run.
        assert (await charge.enqueue_async(42, job_id="order:42")).created
        await wait_until(lambda: worker.processed == 3, message="duplicate settled")
    assert ran == ["charge", "send_receipt"]
    assert list_dead(app) == []


# Defect 9: the TTL guard.


def test_the_idempotency_ttl_guard_applies_to_idempotent_tasks_only(
    make_app: Callable[..., App],
) -> None:
    """Before: ``retries=168`` on a plain task raised a ConfigError about idempotency."""
    app = make_app()

    @app.task(retries=168)
    def patient(n: int) -> None: ...

    assert app.tasks["patient"].retry.retries == 168
    with pytest.raises(ConfigError, match="idempotency TTL"):

        @app.task(idempotent=True, retries=168, idempotency_ttl=60)
        def too_patient(n: int) -> None: ...

    assert "too_patient" not in app.tasks


async def test_a_retry_due_after_its_steps_done_markers_expire_is_dead_lettered(
    make_app: Callable[..., App],
) -> None:
    """Before: the retry ran 2 s later, after the step's 1.5 s marker expired: the finished
    step ran again."""
    app = make_app()
    emails: list[int] = []

    # Retry window 0.25 s: a 1.5 s step TTL passes the declaration check.
    @app.task(retries=1, backoff=0.25)
    async def notify(user: str) -> None:
        job = current_job()
        async with job.step("email", ttl=1.5):
            emails.append(job.attempt)
        raise RetryableError("the provider asked us to come back", delay=2)

    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await notify.enqueue_async("u1", job_id="notify-u1")
        await wait_until(lambda: worker.dead == 1, timeout=10, message="dead-lettered")
    (letter,) = list_dead(app)
    assert letter.job_id == "notify-u1"
    assert "done markers" in letter.reason, letter.reason
    assert letter.error_type == "RetryableError"
    assert emails == [1]
    assert worker.retried == 0


# Defect 10: due work wakes an idle worker.


async def test_a_retry_starts_on_time_on_an_idle_worker(make_app: Callable[..., App]) -> None:
    """Before: the worker blocked for its whole idle wait (5 s) while the retry came due."""
    app = make_app()
    attempts: list[tuple[int, float]] = []

    @app.task(retries=1)
    async def flaky(n: int) -> None:
        attempts.append((current_job().attempt, time.time()))
        if current_job().attempt == 1:
            raise RetryableError("not yet", delay=0.2)

    worker = worker_for(app, concurrency=2, idle_wait=5.0)
    async with running(worker):
        await flaky.enqueue_async(1)
        await wait_until(lambda: worker.processed == 1, timeout=10, message="attempt 2 done")
    (first, failed_at), (second, started_at) = attempts
    assert (first, second) == (1, 2)
    late = started_at - (failed_at + 0.2)
    print(f"\ndefect 10: the retry started {late * 1000:.0f} ms after its due time "
          "(idle wait 5 s)")  # fmt: skip
    assert -0.05 < late < 1.0


async def test_a_delayed_job_starts_on_time_on_an_idle_worker(
    make_app: Callable[..., App], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a delayed enqueue did not wake a worker blocked in its 5 s idle wait."""
    waits = IdleWaits(monkeypatch, StreamConsumer)
    app = make_app()
    started: list[float] = []

    @app.task
    async def later(n: int) -> None:
        started.append(time.time())

    worker = worker_for(app, concurrency=2, idle_wait=5.0)
    async with running(worker):
        await wait_until(lambda: waits.active == 1, message="the worker idles")
        enqueued = time.time()
        await later.enqueue_async(1, delay=0.3)
        await wait_until(lambda: started, timeout=10, message="the delayed job ran")
    late = started[0] - (enqueued + 0.3)
    print(f"\ndefect 10: a delayed job started {late * 1000:.0f} ms after its due time "
          "(idle wait 5 s)")  # fmt: skip
    assert -0.05 < late < 1.0


# Defect 16: one enqueue call wakes every idle worker of the sorted backend.


async def test_one_enqueue_call_wakes_every_idle_sorted_worker(
    make_app: Callable[..., App], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: one LPUSH per enqueue call woke one BLPOP: 3 jobs started 0 / 1 / 2 idle waits
    apart on 3 idle workers."""
    waits = IdleWaits(monkeypatch, SortedConsumer)
    app = make_app(backend="sorted")
    started: dict[str, float] = {}
    everyone = asyncio.Event()

    @app.task
    async def meet(n: int) -> None:
        started[current_job().job_id] = time.monotonic()
        if len(started) == 3:
            everyone.set()
        with contextlib.suppress(TimeoutError):  # before the fix, it would wait forever
            async with asyncio.timeout(10):
                await everyone.wait()

    workers = [worker_for(app, concurrency=1, idle_wait=5.0) for _ in range(3)]
    async with running(workers[0]), running(workers[1]), running(workers[2]):
        await wait_until(lambda: waits.active == 3, message="all three workers idle")
        enqueued = time.monotonic()
        await app.enqueue_many_async([meet.message(n, job_id=f"meet-{n}") for n in range(3)])
        await wait_until(everyone.is_set, timeout=15, message="all three jobs started")
        await wait_until(lambda: sum(w.processed for w in workers) == 3, message="settled")
    offsets = sorted(at - enqueued for at in started.values())
    print("\ndefect 16: 3 jobs of one enqueue call started on 3 idle workers after "
          + " / ".join(f"{s * 1000:.0f}" for s in offsets) + " ms (idle wait 5 s)")  # fmt: skip
    assert offsets[-1] < 1.0
    assert [w.processed for w in workers] == [1, 1, 1]


# Defect 20: errors while settling, and background loops that fail.


@pytest.fixture
def durable_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A private redis-server that writes every command to its AOF before answering."""
    server = PrivateRedis(tmp_path / "redis", {"appendonly": "yes", "appendfsync": "always"})
    try:
        yield server.start()
    finally:
        server.close()


async def test_settles_that_meet_a_redis_crash_land_once_when_it_is_back(
    durable_redis: PrivateRedis,
    make_app: Callable[..., App],
    rclient: redis.Redis,
    namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: the failed ack was dropped (the job ran again after the visibility timeout)
    and the retry call's ConnectionFailed was lost ("Task exception was never retrieved")."""
    server = durable_redis
    app = make_app(redis_url=server.url, namespace=uuid.uuid4().hex)
    # Runs are counted on the shared server, which is not faulted: a redelivered run
    # would be in a child process.
    runs_key = f"lockgate:{{{namespace}}}:test:runs"
    gate = asyncio.Event()
    ended: list[str] = []

    @app.task(retries=2)
    async def pay(n: int) -> None:
        job = current_job()
        rclient.hincrby(runs_key, f"{job.job_id}:{job.attempt}", 1)
        if job.attempt == 1:
            await gate.wait()
        ended.append(job.job_id)
        if job.job_id == "flaky" and job.attempt == 1:
            raise RetryableError("try again", delay=0)

    def runs() -> dict[str, int]:
        return {k.decode(): int(v) for k, v in rclient.hgetall(runs_key).items()}

    app.enqueue_many([pay.message(1, job_id="ok"), pay.message(2, job_id="flaky")])
    # Long enough that no redelivery happens while Redis is down; a dropped settle would
    # show as a second run once it passes.
    worker = worker_for(app, concurrency=4, visibility_timeout=5.0)
    async with running(worker) as task:
        try:
            await wait_serving(task, lambda: len(runs()) == 2, message="both jobs running")
            server.kill()
            gate.set()  # both runs end while Redis is down: a done and a retry to settle
            await wait_serving(task, lambda: len(ended) == 2, message="both runs ended")
            await hold(task, 1.0, "Redis down")
        finally:
            gate.set()
            if not server.running:
                server.restart()
        back = time.monotonic()
        last: list[str] = []

        async def settled() -> bool:
            nonlocal last
            last = await leftovers(app, server)
            return runs().get("flaky:2", 0) >= 1 and not last

        await wait_serving(task, settled, message="everything settled")
        took = time.monotonic() - back
        assert worker.processed == 2 and worker.retried == 1, last
    print(f"\ndefect 20: both settles landed {took * 1000:.0f} ms after Redis came back")
    gc.collect()  # a lost task exception is reported when its task is collected
    assert runs() == {"ok:1": 1, "flaky:1": 1, "flaky:2": 1}
    assert "could not settle" in caplog.text or "settling it failed" in caplog.text
    assert "never retrieved" not in caplog.text


async def test_a_failing_heartbeat_loop_is_logged_and_restarted(
    make_app: Callable[..., App], rclient: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: an exception other than a LockgateError ended the heartbeat loop for good;
    the running job went idle and another worker reclaimed it while it still ran."""
    app = make_app()
    gate = asyncio.Event()
    ran: list[str] = []

    @app.task
    async def long_job(n: int) -> None:
        ran.append(current_job().job_id)
        if n == 1:
            await gate.wait()

    stream = app.keys.stream("default", "normal")
    first = worker_for(app, concurrency=2, visibility_timeout=0.6)
    second = worker_for(app, concurrency=2, visibility_timeout=0.6)
    beats = {"failed": 0, "ok": 0}
    async with running(first) as task:
        await wait_serving(task, lambda: first._consumer is not None, message="connected")
        consumer = first._consumer
        heartbeat = consumer.heartbeat

        async def failing_heartbeat(deliveries: Any) -> None:
            await heartbeat(deliveries)
            if beats["failed"] < 2:  # the loop fails twice (after the call landed)
                beats["failed"] += 1
                raise RuntimeError("injected heartbeat loop failure")
            beats["ok"] += 1

        consumer.heartbeat = failing_heartbeat  # type: ignore[method-assign]
        try:
            await long_job.enqueue_async(1, job_id="long")
            await wait_serving(task, lambda: ran == ["long"], message="the first worker runs it")
            async with running(second):
                # Six good heartbeats after the failures: two visibility timeouts.
                await wait_serving(task, lambda: beats["ok"] >= 6, timeout=10,
                                   message="heartbeats resumed")  # fmt: skip
                assert pending_owner(rclient, stream) == [(first.name, 1)]
                gate.set()
                await wait_serving(task, lambda: first.processed == 1, message="long settled")
                await long_job.enqueue_async(2, job_id="after")  # and the worker goes on
                await wait_serving(task, lambda: first.processed + second.processed == 2,
                                   message="the next job settled")  # fmt: skip
        finally:
            gate.set()
    assert beats["failed"] == 2
    assert sorted(ran) == ["after", "long"]
    assert rclient.xpending(stream, GROUP)["pending"] == 0
    failures = [r for r in caplog.records if "heartbeat loop failed" in r.getMessage()]
    assert len(failures) == 2
    assert all(r.exc_info is not None for r in failures)


async def test_a_worker_whose_heartbeats_lapsed_does_not_reclaim_its_own_running_job(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    """Three heartbeats lost in a row (Redis unreachable for a moment, say) leave a running
    entry idle past the visibility timeout. Another worker may then take it over: that is
    the visibility contract. But the worker that runs it must not reclaim it from itself
    ("reclaimed from a worker that stopped") and run the job twice on its own, which
    happens with a single worker too; it can simply refresh the entry."""
    app = make_app()
    runs_key, release_key = record_key(app, "runs"), record_key(app, "release")
    finished_key = record_key(app, "finished")

    @app.task
    def long_job(n: int) -> None:  # a reclaimed run is in a child process: record in Redis
        client = app.client()
        client.rpush(runs_key, "run")
        while not client.exists(release_key):
            time.sleep(0.01)
        client.rpush(finished_key, "run")

    stream = app.keys.stream("default", "normal")
    worker = worker_for(app, concurrency=2, visibility_timeout=0.6)
    beats = {"failed": 0, "ok": 0}
    async with running(worker) as task:
        await wait_serving(task, lambda: worker._consumer is not None, message="connected")
        consumer = worker._consumer
        heartbeat = consumer.heartbeat

        async def lost_heartbeat(deliveries: Any) -> None:
            if beats["failed"] < 3:
                beats["failed"] += 1
                raise RuntimeError("injected: heartbeat lost")
            await heartbeat(deliveries)
            beats["ok"] += 1

        consumer.heartbeat = lost_heartbeat  # type: ignore[method-assign]
        try:
            await long_job.enqueue_async(1, job_id="long")
            await wait_serving(task, lambda: beats["ok"] >= 3, timeout=10,
                               message="heartbeats resumed")  # fmt: skip
        finally:
            rclient.set(release_key, "1")
        await wait_serving(
            task,
            lambda: (
                rclient.llen(finished_key) == rclient.llen(runs_key)
                and rclient.xpending(stream, GROUP)["pending"] == 0
            ),
            message="every run ended and the job settled",
        )
    assert rclient.llen(runs_key) == 1


async def test_an_unencodable_dead_letter_never_stalls_the_other_acks(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    """An error message with a lone surrogate (a file name read with surrogateescape)
    cannot be sent as text: it is escaped, the job is dead-lettered, the rest is acked."""
    app = make_app()
    bad_name = b"report-\xff.csv".decode("utf-8", "surrogateescape")

    @app.task(retries=0)
    def parse(name: str) -> None:
        raise ValueError(f"cannot parse {bad_name}")

    @app.task
    def fine(n: int) -> None: ...

    parse.enqueue("x", job_id="bad-1")
    app.enqueue_many([fine.message(n) for n in range(5)])
    worker = worker_for(app, concurrency=2)
    async with running(worker):
        await wait_until(lambda: worker.processed == 5 and worker.dead == 1)
    (letter,) = list_dead(app)
    assert letter.job_id == "bad-1"
    assert "cannot parse report-" in letter.error
    assert rclient.xpending(app.keys.stream("default", "normal"), GROUP)["pending"] == 0


async def test_a_graceful_stop_waits_for_an_isolated_async_run_and_settles_it_once(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    """A job that once killed its child runs in a child again; a stop cannot interrupt a
    child safely, so the worker waits for it past the grace period and settles it."""
    app = make_app()
    started, release, runs = (f"{app.keys.prefix}:test:{name}" for name in ("s", "r", "n"))

    @app.task
    async def slow(n: int) -> None:
        client = inspection_client(app.redis_url)
        try:
            client.incr(runs)
            client.set(started, 1)
            while not client.exists(release):
                await asyncio.sleep(0.01)
        finally:
            client.close()

    job = slow.message(1, job_id="isolated-1").job
    app.enqueue_many([Message(msgspec.structs.replace(job, crashes=1))])
    worker = worker_for(app, concurrency=1, grace_period=0.2)
    task = asyncio.create_task(worker.run())
    try:
        await wait_until(lambda: rclient.exists(started), message="the child started")
        worker.request_stop()
        await asyncio.sleep(0.5)  # well past the grace period: a steady state, observed
        assert not task.done()  # still waiting for the child
        rclient.set(release, 1)
        await finish(worker, task)
    finally:
        if not task.done():
            worker.request_stop()
            await finish(worker, task)
    assert worker.processed == 1
    assert rclient.get(runs) == b"1"
    assert job_ended(rclient, app.keys, "isolated-1")
