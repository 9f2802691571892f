"""``@app.task(rate_limit="N/s")``: one limit shared by every worker, enforced in Redis; a
job over it waits (put back delayed as the same attempt) while its worker takes other work.

Timing is asserted one way only: starts are spaced at least as the limit says (less a
slack for a noisy machine); nothing is asserted to be fast except by the hang guards.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
import redis

from conftest import running, wait_until, worker_for
from lockgate import App, WorkerConfig, current_job
from lockgate.backend.broker import Delivery, ReadClaim
from lockgate.core.codec import Job
from lockgate.worker.runner import CLAIM_RETRY, JobRunner, TaskPool

BACKENDS = pytest.mark.parametrize("backend", ["streams", "sorted"])
SLACK = 0.1  # seconds a start may seem early by: scheduling noise between two workers
HANG = 20.0


def limiter_keys(rclient: redis.Redis, app: App) -> list[bytes]:
    return list(rclient.scan_iter(match=f"{app.keys.prefix}:rate:*", count=1000))


@BACKENDS
async def test_two_workers_share_one_limit_and_every_job_runs_once_as_attempt_1(
    make_app: Callable[..., App], backend: str, rclient: redis.Redis
) -> None:
    starts: list[tuple[float, str, int]] = []

    def declare(app: App) -> Any:
        @app.task(rate_limit="20/s")  # one start every 50 ms, whichever worker
        async def charge(order: int) -> None:
            job = current_job()
            starts.append((time.monotonic(), job.job_id, job.attempt))

        return charge

    first, second = make_app(backend=backend), make_app(backend=backend)
    charge = declare(first)
    declare(second)
    sent = [(await charge.enqueue_async(n)).job_id for n in range(12)]
    # Not burst workers: one may stop while the other's put-back is still landing.
    async with (
        running(worker_for(first, concurrency=4)),
        running(worker_for(second, concurrency=4)),
    ):
        await wait_until(lambda: len(starts) >= len(sent), HANG, "every job started")

    assert sorted(job_id for _, job_id, _ in starts) == sorted(sent)  # each exactly once
    assert {attempt for _, _, attempt in starts} == {1}
    moments = sorted(moment for moment, _, _ in starts)
    assert moments[-1] - moments[0] >= (len(sent) - 1) * 0.05 - SLACK
    # The limiter is gone soon after the last start (it expires one interval after it).
    await wait_until(lambda: not limiter_keys(rclient, first), 5, "limiter expired")


@BACKENDS
async def test_a_throttled_task_frees_the_slot_for_other_work(
    make_app: Callable[..., App], backend: str
) -> None:
    app = make_app(backend=backend)
    ended: dict[str, list[float]] = {"limited": [], "free": []}
    attempts: set[int] = set()

    @app.task(rate_limit="5/s")  # one start every 200 ms
    async def limited(n: int) -> None:
        attempts.add(current_job().attempt)
        ended["limited"].append(time.monotonic())

    @app.task
    async def free(n: int) -> None:
        attempts.add(current_job().attempt)
        ended["free"].append(time.monotonic())

    await app.enqueue_many_async([limited.message(n) for n in range(5)])
    await app.enqueue_many_async([free.message(n) for n in range(20)])
    # One slot: had a throttled job held it while waiting, the free jobs would queue
    # behind every limited one (800 ms of waits).
    async with running(worker_for(app, concurrency=1)):
        await wait_until(
            lambda: len(ended["limited"]) == 5 and len(ended["free"]) == 20, HANG, "all ran"
        )

    assert len(ended["limited"]) == 5 and len(ended["free"]) == 20
    assert max(ended["free"]) < max(ended["limited"])
    assert max(ended["limited"]) - min(ended["limited"]) >= 4 * 0.2 - SLACK
    assert attempts == {1}


@BACKENDS
async def test_an_idle_limiter_leaves_no_key(
    make_app: Callable[..., App], backend: str, rclient: redis.Redis
) -> None:
    app = make_app(backend=backend)

    ran: list[str] = []

    @app.task(rate_limit="120/m")  # one start every 500 ms: the second job waits
    async def report(day: str) -> None:
        ran.append(day)

    await report.enqueue_async("d1")
    await report.enqueue_async("d2")
    key = app.keys.rate_limit("report")
    async with running(worker_for(app)):
        await wait_until(lambda: ran, 5, "the first job ran")
        # It lives until the next free start's turn (the second job reserved one), at
        # most 1 s: gone already when this test was slower than that (a loaded machine),
        # never kept without an expiry; and it is the only limiter key.
        ttl = rclient.pttl(key)
        assert 0 < ttl <= 1000 or ttl == -2, ttl
        assert limiter_keys(rclient, app) in ([key.encode()], [])
        await wait_until(lambda: len(ran) == 2, 5, "the second job ran in its turn")
    await wait_until(lambda: not rclient.exists(key), 5, "the limiter expired")


def _delivery(job: Job, claim: ReadClaim | None = None) -> Delivery:
    return Delivery("default", 1, "default", job.id, job, job_id=job.id, claim=claim)


def _runner(app: App) -> JobRunner:
    return JobRunner(app, WorkerConfig(), TaskPool(2), lambda ending: None)


async def test_a_throttled_job_goes_back_as_the_same_attempt_and_lets_its_claim_go(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    ran: list[str] = []

    @app.task(rate_limit="1/m", idempotent=True)
    async def pay(order: str) -> None:
        ran.append(order)

    assert pay.rate_limit is not None
    assert await app.store.rate_limit_wait("pay", pay.rate_limit) == (0.0, True)  # its turn
    turn = rclient.get(app.keys.rate_limit("pay"))
    runner = _runner(app)
    try:
        job = msgspec.structs.replace(pay.message("A2").job, attempt=2, waits=3)
        ending = await runner.run(_delivery(job, ReadClaim("tok-2", 1)))
        outcome = ending.outcome
        assert (outcome.kind, outcome.reason) == ("retry", "rate limited")
        assert 59.0 < outcome.delay <= 60.0
        # The same attempt, counted as a put-back, its start reserved.
        assert outcome.next_job == msgspec.structs.replace(job, waits=4, rate_reserved=True)
        # Back at its turn, it starts without asking again (the limiter is not asked).
        back = _delivery(outcome.next_job, ReadClaim("tok-4", 1))
        assert await runner._rate_limited(pay, back) is None
        # The claim its read took is let go when the ending settles, not kept waiting.
        assert ending.claim is not None and ending.claim.token == "tok-2"
        assert outcome.claim == "release"

        # A job its read found done ends unrun, without asking the limiter.
        done = pay.message("A1").job
        ending = await runner.run(_delivery(done, ReadClaim("tok-3", 0)))
        assert ending.outcome.kind == "done"
    finally:
        runner.pool.shutdown()
    assert ran == []
    # The refusal reserved the next start: the limiter moved on by one interval.
    assert int(rclient.get(app.keys.rate_limit("pay")) or 0) == int(turn or 0) + 60_000_000


async def test_an_unreachable_limiter_puts_the_job_back_soon(
    make_app: Callable[..., App],
) -> None:
    app = make_app(redis_url="redis://127.0.0.1:1/0")
    ran: list[int] = []

    @app.task(rate_limit="100/s")
    async def charge(n: int) -> None:
        ran.append(n)

    runner = _runner(app)
    try:
        job = charge.message(1).job
        outcome = (await runner.run(_delivery(job))).outcome
    finally:
        runner.pool.shutdown()
    assert (outcome.kind, outcome.delay, outcome.next_job) == ("retry", CLAIM_RETRY, job)
    assert outcome.reason.startswith("rate limit check failed")
    assert ran == []


@BACKENDS
async def test_a_burst_worker_runs_every_throttled_job_before_it_stops(
    make_app: Callable[..., App], backend: str
) -> None:
    # Each throttled job is a put-back. A burst worker whose read ran just before one
    # landed saw nothing queued or delayed, then found no settle in flight, and stopped
    # with the job still waiting. The read below is made to lose that race every time.
    app = make_app(backend=backend)
    ran: list[int] = []

    @app.task(rate_limit="10/s")
    def ping(n: int) -> None:
        ran.append(n)

    worker = worker_for(app, concurrency=1)
    make_consumer = app.store.consumer

    def consumer(*args: Any, **kwargs: Any) -> Any:
        made = make_consumer(*args, **kwargs)
        read = made.read

        async def read_then_let_settles_land(*a: Any, **k: Any) -> Any:
            result = await read(*a, **k)
            settler = worker._settler
            if not result.deliveries and settler is not None and len(settler):
                await wait_until(lambda: len(settler) == 0, HANG, "the put-back landed")
            return result

        made.read = read_then_let_settles_land
        return made

    app.store.consumer = consumer  # type: ignore[method-assign]
    await app.enqueue_many_async([ping.message(n) for n in range(3)])
    await asyncio.wait_for(worker.run(burst=True), HANG)
    assert sorted(ran) == [0, 1, 2]
