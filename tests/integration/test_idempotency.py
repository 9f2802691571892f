"""Idempotent side effects on real Redis: claims, leases, duplicates, steps and guards.

The claim API (``app.idempotent``) is tested on its own first, then inside a worker
(duplicates acked, busy claims retried, ``idempotent=True`` tasks, ``job.step``).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from conftest import job_ended, running, wait_until, wait_until_sync, worker_for
from lockgate import (
    AlreadyProcessed,
    App,
    ClaimBusy,
    ConfigError,
    LockgateError,
    RetryableError,
    current_job,
)
from lockgate.backend.keys import GROUP, Keys
from lockgate.backend.lua import ScriptCall, SyncScripts
from lockgate.core.codec import decode, encode
from lockgate.ops.deadletter import list_dead


def namespace_keys(rclient: redis.Redis, namespace: str) -> list[bytes]:
    """The namespace's keys but its partition record and queue names (first call)."""
    found = rclient.scan_iter(match=f"lockgate:{{{namespace}}}:*", count=10_000)
    return [key for key in found if not key.endswith((b":partitions", b":queues"))]


def marker_ttl_ms(rclient: redis.Redis, app: App, key: str) -> int | None:
    """Milliseconds left on the done marker of idempotency key ``key`` (a member of its
    bucket, its expiry rounded up to a second), None when it has none."""
    expiry = rclient.zscore(*app.keys.done_marker(app.keys.claim(key)))
    if expiry is None:
        return None
    seconds, micros = rclient.time()
    return round(expiry * 1000) - (int(seconds) * 1000 + int(micros) // 1000)


def done(rclient: redis.Redis, app: App, key: str) -> bool:
    """``key`` is done: its claim is gone and its done marker live."""
    ttl = marker_ttl_ms(rclient, app, key)
    return ttl is not None and ttl > 0 and not rclient.exists(app.keys.claim(key))


# --- the claim on its own -------------------------------------------------------------


def test_the_claim_is_taken_before_the_side_effect_and_done_after_it(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    key = app.keys.claim("email:A1")
    seen_inside: list[bytes | None] = []
    with app.idempotent("email:A1", ttl=60) as claim:
        seen_inside.append(rclient.get(key))
    assert seen_inside == [f"c:{claim.token}".encode()]
    # Success: the claim goes, a done marker stays for the TTL (the lease no longer matters).
    assert done(rclient, app, "email:A1")
    assert 55_000 < (marker_ttl_ms(rclient, app, "email:A1") or 0) <= 61_000
    with pytest.raises(AlreadyProcessed) as caught, app.idempotent("email:A1", ttl=60):
        pytest.fail("a duplicate ran the side effect")
    assert caught.value.key == "email:A1"
    assert done(rclient, app, "email:A1")


def test_an_exception_releases_the_claim_so_a_retry_runs(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    runs: list[int] = []
    with pytest.raises(ValueError, match="smtp down"), app.idempotent("email:A2"):
        runs.append(1)
        raise ValueError("smtp down")
    assert not rclient.exists(app.keys.claim("email:A2"))
    with app.idempotent("email:A2"):
        runs.append(2)
    assert runs == [1, 2]
    with pytest.raises(AlreadyProcessed), app.idempotent("email:A2"):
        runs.append(3)
    assert runs == [1, 2]


async def test_async_with_claims_marks_done_and_releases(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    key = app.keys.claim("sms:1")
    async with app.idempotent("sms:1", ttl=120) as claim:
        assert rclient.get(key) == f"c:{claim.token}".encode()
    assert done(rclient, app, "sms:1")
    assert 115_000 < (marker_ttl_ms(rclient, app, "sms:1") or 0) <= 121_000
    with pytest.raises(AlreadyProcessed):
        async with app.idempotent("sms:1"):
            pytest.fail("a duplicate ran the side effect")

    with pytest.raises(RuntimeError):
        async with app.idempotent("sms:2"):
            raise RuntimeError("gateway down")
    assert not rclient.exists(app.keys.claim("sms:2"))
    async with app.idempotent("sms:2"):
        pass
    assert done(rclient, app, "sms:2")


def test_32_threads_racing_on_one_key_run_the_block_once(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    start = threading.Barrier(32)
    ran: list[int] = []
    outcomes: list[str] = []
    lock = threading.Lock()

    def contender(n: int) -> None:
        start.wait(timeout=30)
        try:
            with app.idempotent("pay:race"):
                ran.append(n)
            outcome = "ran"
        except ClaimBusy:
            outcome = "busy"
        except AlreadyProcessed:
            outcome = "done"
        except Exception as e:  # recorded, so the assertion shows it
            outcome = repr(e)
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=contender, args=(n,)) for n in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(outcomes) == 32
    assert len(ran) == 1
    assert outcomes.count("ran") == 1
    assert set(outcomes) <= {"ran", "busy", "done"}, outcomes


async def test_32_coroutines_racing_on_one_key_run_the_block_once(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    ran: list[int] = []

    async def contender(n: int) -> str:
        try:
            async with app.idempotent("pay:async-race"):
                ran.append(n)
                await asyncio.sleep(0)  # let the others meet the live claim
            return "ran"
        except ClaimBusy:
            return "busy"
        except AlreadyProcessed:
            return "done"

    outcomes = await asyncio.gather(*(contender(n) for n in range(32)))
    assert len(ran) == 1 and outcomes.count("ran") == 1
    assert set(outcomes) <= {"ran", "busy", "done"}


RACER = """
import sys
import redis
from lockgate import AlreadyProcessed, App, ClaimBusy

url, namespace, key = sys.argv[1:]
prefix = f"lockgate:{{{namespace}}}:test:"
app = App(redis_url=url, namespace=namespace)
scheme, _, rest = url.partition("://")
hosts = rest.partition("/")[0]
client = (  # a cluster client on the cluster run (the URL lists seeds)
    redis.RedisCluster.from_url(f"{scheme}://{hosts.split(',')[0]}")
    if "," in hosts else redis.Redis.from_url(url)
)
try:
    app.client().ping()  # connect before the start signal
    client.rpush(prefix + "ready", 1)
    client.blpop([prefix + "go"], timeout=60)
    try:
        with app.idempotent(key):
            client.incr(prefix + "ran")
        outcome = "ran"
    except ClaimBusy:
        outcome = "busy"
    except AlreadyProcessed:
        outcome = "done"
    client.rpush(prefix + "outcomes", outcome)
finally:
    app.close()
    client.close()
"""


def test_4_processes_racing_on_one_key_run_the_block_once(
    redis_url: str, namespace: str, rclient: redis.Redis
) -> None:
    prefix = f"lockgate:{{{namespace}}}:test:"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, redis_url, namespace, "pay:proc-race"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for _ in range(4)
    ]
    try:
        wait_until_sync(
            lambda: rclient.llen(prefix + "ready") == 4 or any(p.poll() for p in procs),
            message="4 racers ready",
        )
        rclient.rpush(prefix + "go", *[1] * 4)
        outputs = [p.communicate(timeout=60)[0].decode() for p in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    assert [p.returncode for p in procs] == [0] * 4, outputs
    outcomes = sorted(o.decode() for o in rclient.lrange(prefix + "outcomes", 0, -1))
    assert len(outcomes) == 4 and outcomes.count("ran") == 1, outcomes
    assert rclient.get(prefix + "ran") == b"1"


def test_a_live_lease_makes_the_duplicate_busy_for_the_remaining_lease(
    make_app: Callable[..., App],
) -> None:
    holder, duplicate = make_app(), make_app()
    with holder.idempotent("pay:busy", lease=5):
        with pytest.raises(ClaimBusy) as caught, duplicate.idempotent("pay:busy"):
            pytest.fail("the duplicate ran while the holder's lease was live")
    busy = caught.value
    assert isinstance(busy, RetryableError)
    assert busy.key == "pay:busy"
    assert busy.delay is not None and 0 < busy.delay <= 5
    assert "pay:busy" in str(busy)


def settle_script(app: App, key: str, token: str, action: str) -> int:
    args = [token, action, 86_400_000, "", app.keys.done_bucket_prefix, 0]
    call = ScriptCall("idem_settle", [app.keys.claim(key)], args)
    return int(SyncScripts(app.client()).run_all([call])[0])


def test_a_lapsed_lease_is_taken_over_and_the_late_owner_settles_nothing(
    make_app: Callable[..., App], rclient: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """The first owner stalls (nobody renews its short lease); another owner takes over.

    When the stalled owner finally finishes, neither its completion nor its release may
    touch the new owner's claim.
    """
    stalled_app, second_app = make_app(), make_app()
    redis_key = stalled_app.keys.claim("pay:takeover")
    stalled = stalled_app.idempotent("pay:takeover", lease=0.2)
    stalled.__enter__()
    stalled_app.lease_keeper.remove(stalled)  # a frozen process: its lease is not renewed
    with pytest.raises(ClaimBusy):
        second_app.idempotent("pay:takeover").__enter__()
    wait_until_sync(lambda: not rclient.exists(redis_key), message="the stalled lease lapsed")

    with second_app.idempotent("pay:takeover", lease=30) as second:
        ours = f"c:{second.token}".encode()
        assert rclient.get(redis_key) == ours
        for action in ("done", "release", "renew"):
            assert settle_script(stalled_app, "pay:takeover", stalled.token, action) == 0
            assert rclient.get(redis_key) == ours
        stalled.__exit__(None, None, None)  # the stalled owner "succeeds" late
        assert rclient.get(redis_key) == ours
        stalled.__exit__(ValueError, ValueError("late failure"), None)
        assert rclient.get(redis_key) == ours
        assert marker_ttl_ms(rclient, second_app, "pay:takeover") is None
    assert done(rclient, second_app, "pay:takeover")
    assert "pay:takeover was taken over" in caplog.text


def test_a_claim_held_past_its_lease_is_renewed(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    redis_key = app.keys.claim("report:1")
    renewals: list[int] = []
    with app.idempotent("report:1", lease=1.0) as claim:
        readings: list[int] = []

        def renewed_twice() -> bool:
            ttl = rclient.pttl(redis_key)
            assert ttl > 0 and rclient.get(redis_key) == f"c:{claim.token}".encode(), "lapsed"
            if readings and ttl > readings[-1]:
                renewals.append(ttl)
            readings.append(ttl)
            return len(renewals) >= 2

        wait_until_sync(renewed_twice, message="two lease renewals")
        assert not claim.lost
    assert done(rclient, app, "report:1")


def test_a_short_lease_claimed_while_the_keeper_sleeps_is_renewed(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    """A claim with a short lease, taken after one with the default 30 s lease.

    The renewing thread computed its sleep (a third of the shortest lease) from the
    claims it knew; a claim added later with a shorter lease must still be renewed before
    its lease runs out, or a duplicate can take it over while the block still runs.
    """
    app = make_app()
    with app.idempotent("warm-up"):  # starts the lease keeper with a 30 s lease
        pass
    redis_key = app.keys.claim("short")
    with app.idempotent("short", lease=1.0):
        readings: list[int] = []

        def renewed_or_lapsed() -> str | None:
            ttl = rclient.pttl(redis_key)
            if ttl < 0:
                return "lapsed"
            if readings and ttl > readings[-1]:
                return "renewed"
            readings.append(ttl)
            return None

        outcome = wait_until_sync(renewed_or_lapsed, message="renewed or lapsed")
    assert outcome == "renewed", "the 1 s lease lapsed while the block was running"


def test_a_claim_taken_over_behind_its_back_is_flagged_lost(
    make_app: Callable[..., App], rclient: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    redis_key = app.keys.claim("pay:lost")
    claim = app.idempotent("pay:lost", lease=0.3)
    claim.__enter__()
    rclient.set(redis_key, "c:intruder", px=30_000)
    wait_until_sync(lambda: claim.lost, message="renewal noticed the lost claim")
    claim.__exit__(None, None, None)
    assert rclient.get(redis_key) == b"c:intruder"
    assert "lost the claim on pay:lost" in caplog.text


@pytest.mark.parametrize(
    ("key", "options", "named"),
    [
        ("", {}, "''"),
        ("k" * 513, {}, "kkkk"),
        ("é" * 257, {}, "éééé"),  # 514 bytes, 257 characters
        ("order:ttl-zero", {"ttl": 0}, "order:ttl-zero"),
        ("order:ttl-negative", {"ttl": -1}, "order:ttl-negative"),
        ("order:lease-short", {"lease": 0.01}, "order:lease-short"),
    ],
)
def test_bad_input_is_a_config_error_naming_the_key_and_claims_nothing(
    make_app: Callable[..., App],
    rclient: redis.Redis,
    namespace: str,
    key: str,
    options: dict[str, Any],
    named: str,
) -> None:
    app = make_app()
    ran: list[int] = []
    with pytest.raises(ConfigError) as caught:
        with app.idempotent(key, **options):
            ran.append(1)
    assert named in str(caught.value)
    assert ran == []
    assert namespace_keys(rclient, namespace) == []


def test_a_key_of_exactly_512_bytes_is_accepted(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    with app.idempotent("k" * 512):
        pass
    assert done(rclient, app, "k" * 512)


def test_legacy_markers_also_leave_the_string_marker_older_releases_read(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    """For a rolling upgrade from 0.2 (which reads ``d:<token>`` under the claim key)."""
    app, plain_app = make_app(legacy_markers=True), make_app()
    with app.idempotent("email:L1", ttl=60) as claim:
        pass
    key = app.keys.claim("email:L1")
    assert rclient.get(key) == f"d:{claim.token}".encode()
    assert 55_000 < rclient.pttl(key) <= 60_000
    assert 55_000 < (marker_ttl_ms(rclient, app, "email:L1") or 0) <= 61_000
    with pytest.raises(AlreadyProcessed), plain_app.idempotent("email:L1"):
        pytest.fail("a duplicate ran the side effect")


def test_legacy_markers_must_be_a_bool(make_app: Callable[..., App]) -> None:
    with pytest.raises(ConfigError, match="legacy_markers"):
        make_app(legacy_markers="yes")


def test_incr_once_does_not_double_count_a_request(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    assert app.incr_once("views:p1", "req-1") == (True, 1)
    assert app.incr_once("views:p1", "req-1") == (False, 1)  # the retry of req-1
    assert app.incr_once("views:p1", "req-2", amount=3) == (True, 4)
    assert app.counter("views:p1") == 4
    assert app.counter("views:never") == 0
    with pytest.raises(ConfigError):
        app.incr_once("views:p1", "")


def test_incr_once_under_32_threads_counts_each_request_once(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    start = threading.Barrier(32)
    counted: list[bool] = []

    def view(n: int) -> None:
        start.wait(timeout=30)
        counted.append(app.incr_once("views:race", f"req-{n % 4}")[0])

    threads = [threading.Thread(target=view, args=(n,)) for n in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(counted) == 32 and counted.count(True) == 4
    assert app.counter("views:race") == 4


def test_cooldown_lets_exactly_one_of_32_racing_threads_through(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    start = threading.Barrier(32)
    results: list[bool] = []

    def request_otp() -> None:
        start.wait(timeout=30)
        results.append(app.cooldown("otp:+15550001", 60))

    threads = [threading.Thread(target=request_otp) for _ in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == 32 and results.count(True) == 1
    assert 55_000 < rclient.pttl(app.keys.cooldown("otp:+15550001")) <= 60_000
    assert app.cooldown("otp:+15550002", 60) is True  # another key is independent


# --- inside a worker ------------------------------------------------------------------


async def test_a_worker_acks_a_duplicate_without_running_the_side_effect(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    sent: list[str] = []

    @app.task
    def send_email(order_id: str) -> None:
        with app.idempotent(f"email:{order_id}"):
            sent.append(current_job().job_id)

    send_email.enqueue("A1", job_id="first")
    send_email.enqueue("A1", job_id="second")  # another job, the same side effect
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.processed == 2)
    assert sent == ["first"]
    assert (worker.retried, worker.dead) == (0, 0)
    assert list_dead(app) == []
    assert rclient.xlen(app.keys.stream("default", "normal")) == 0
    assert job_ended(rclient, app.keys, "second")


async def test_a_busy_claim_in_a_task_waits_spends_no_attempt_and_runs_soon_after(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    """Defect 11: a duplicate that meets a live claim looks again within a second, not at
    the end of the holder's 30 s lease, and never spends an attempt."""
    app, holder_app = make_app(), make_app()
    sent: list[int] = []

    @app.task(retries=1)
    async def charge(order_id: str) -> None:
        async with app.idempotent(f"charge:{order_id}"):
            sent.append(current_job().attempt)

    holder = holder_app.idempotent("charge:A1", lease=30)  # another worker is at it
    holder.__enter__()
    delayed = app.keys.delayed("default", "normal")
    try:
        charge.enqueue("A1", job_id="charge-A1")
        worker = worker_for(app, concurrency=1)
        async with running(worker):
            # It waits several times (more than its one retry would allow)...
            await wait_until(
                lambda: any(decode(job).waits >= 3 for job in rclient.zrange(delayed, 0, -1)),
                message="waits while the claim is held",
            )
            seconds, micros = rclient.time()
            for _, due in rclient.zrange(delayed, 0, -1, withscores=True):
                assert due - (seconds * 1000 + micros / 1000) <= 1_000 + 50
            assert sent == []
            assert not job_ended(rclient, app.keys, "charge-A1")  # still owned: not lost
            # The other worker fails: its claim is released, and our job runs soon.
            released = time.monotonic()
            holder.__exit__(RuntimeError, RuntimeError("holder failed"), None)
            await wait_until(lambda: worker.processed == 1, message="the job ran after all")
            assert time.monotonic() - released < 5  # loose: measured ~1 s at most
    finally:
        holder_app.lease_keeper.remove(holder)
    assert sent == [1]  # the waits spent no attempt
    assert worker.dead == 0 and worker.retried == 0 and list_dead(app) == []
    assert done(rclient, app, "charge:A1")


async def test_an_idempotent_task_runs_once_even_when_redelivered(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    runs: list[str] = []

    @app.task(idempotent=True, idempotency_ttl=3600)
    def complete_order(order_id: str) -> None:
        runs.append(order_id)

    message = complete_order.message("A1", job_id="order-A1")
    app.enqueue_many([message])
    stream = app.keys.stream("default", "normal")
    worker = worker_for(app, concurrency=2)
    async with running(worker):
        await wait_until(lambda: worker.processed == 1)
        assert done(rclient, app, Keys.job_claim_name("complete_order", "order-A1"))
        ttl_ms = marker_ttl_ms(rclient, app, Keys.job_claim_name("complete_order", "order-A1")) or 0
        assert 3_500_000 < ttl_ms <= 3_601_000
        # Nothing under the 0.1 name (only with legacy_markers=True).
        assert not rclient.exists(app.keys.claim("job:order-A1"))
        # A redelivery of the same entry (a lost ack, a reclaim): acked, not run.
        rclient.xadd(stream, {"job": encode(message.job)})
        await wait_until(lambda: worker.processed == 2)
        # The same job id enqueued again after it finished: acked, not run.
        assert complete_order.enqueue("A1", job_id="order-A1").created
        await wait_until(lambda: worker.processed == 3)
    assert runs == ["A1"]
    assert rclient.xlen(stream) == 0
    assert rclient.xpending(stream, GROUP)["pending"] == 0
    assert (worker.retried, worker.dead) == (0, 0)


async def test_an_idempotent_task_that_fails_is_released_and_retried(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    attempts: list[int] = []

    @app.task(idempotent=True, retries=2, backoff=0.01)
    async def sync_crm(customer: str) -> None:
        attempts.append(current_job().attempt)
        if len(attempts) == 1:
            raise RetryableError("crm down")

    sync_crm.enqueue("C1", job_id="crm-C1")
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.processed == 1)
    assert attempts == [1, 2]
    assert worker.retried == 1
    assert done(rclient, app, Keys.job_claim_name("sync_crm", "crm-C1"))


async def test_an_idempotent_task_whose_job_is_claimed_elsewhere_waits_without_an_attempt(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app, other_app = make_app(), make_app()
    seen: list[int] = []

    @app.task(idempotent=True, retries=0)
    async def pay(order_id: str) -> None:
        seen.append(current_job().attempt)

    other = other_app.idempotent("job:pay-A1", lease=1.5)  # the job running elsewhere
    other.__enter__()
    try:
        pay.enqueue("A1", job_id="pay-A1")
        worker = worker_for(app, concurrency=1)
        async with running(worker):
            delayed = app.keys.delayed("default", "normal")
            await wait_until(lambda: rclient.zcard(delayed) == 1, message="backed off")
            assert seen == []
            other.__exit__(RuntimeError, RuntimeError("the other run failed"), None)
            await wait_until(lambda: worker.processed == 1)
    finally:
        other_app.lease_keeper.remove(other)
    # retries=0, yet it ran: backing off from a busy claim spent no attempt.
    assert seen == [1]
    assert worker.dead == 0


async def test_steps_a_retry_skips_finished_steps_and_reruns_the_rest(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    effects: list[tuple[str, int]] = []

    @app.task(retries=3, backoff=0.01)
    def complete_order(order_id: str) -> None:
        job = current_job()
        with contextlib.suppress(AlreadyProcessed), job.step("email"):
            effects.append(("email", job.attempt))
        with contextlib.suppress(AlreadyProcessed), job.step("partner-api"):
            effects.append(("partner-api", job.attempt))
            if job.attempt == 1:
                raise RetryableError("partner down", delay=0)
        with contextlib.suppress(AlreadyProcessed), job.step("receipt"):
            effects.append(("receipt", job.attempt))

    complete_order.enqueue("A1", job_id="order-A1")
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.processed == 1)
    assert effects == [("email", 1), ("partner-api", 1), ("partner-api", 2), ("receipt", 2)]
    for step in ("email", "partner-api", "receipt"):
        assert done(rclient, app, Keys.step_claim_name("complete_order", "order-A1", step)), step


async def test_a_step_done_escaping_the_task_dead_letters_the_job_with_the_reason(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    effects: list[tuple[str, int]] = []

    @app.task(retries=3, backoff=0.01)
    async def careless(order_id: str) -> None:
        job = current_job()
        async with job.step("email"):  # no suppress(AlreadyProcessed)
            effects.append(("email", job.attempt))
        effects.append(("partner-api", job.attempt))
        if job.attempt == 1:
            raise RetryableError("partner down", delay=0)

    careless.enqueue("A1", job_id="careless-A1")
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.dead == 1)
    assert effects == [("email", 1), ("partner-api", 1)]
    (letter,) = list_dead(app)
    assert letter.job_id == "careless-A1"
    assert letter.error_type == "StepDone"
    assert letter.attempt == 2
    assert "email" in letter.reason and "suppress(AlreadyProcessed)" in letter.reason


def test_an_idempotency_ttl_under_twice_the_retry_window_is_refused_at_declaration(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    # retries=3, backoff=100: window 100 + 200 + 400 = 700 s, so at least 1,400 s.
    with pytest.raises(ConfigError, match="shorter than twice"):

        @app.task(idempotent=True, retries=3, backoff=100, idempotency_ttl=1000)
        def pay() -> None: ...

    assert "pay" not in app.tasks

    @app.task(idempotent=True, retries=3, backoff=100, idempotency_ttl=1400)
    def pay_ok() -> None: ...


async def test_an_idempotency_ttl_under_twice_the_retry_window_fails_at_first_use(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    ran: list[int] = []

    @app.task(retries=3, backoff=100)
    def send() -> None:
        with app.idempotent("email:short-ttl", ttl=1000):
            ran.append(1)

    send.enqueue(job_id="send-1")
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.dead == 1)
    assert ran == []
    assert not rclient.exists(app.keys.claim("email:short-ttl"))
    (letter,) = list_dead(app)
    assert letter.error_type == "ConfigError"
    assert "email:short-ttl" in letter.error and "twice" in letter.error
    # Outside a task there is no retry window to compare with: the same TTL is fine.
    with app.idempotent("email:short-ttl", ttl=1000):
        ran.append(2)
    assert ran == [2]


async def test_one_key_claimed_twice_in_one_job_run_is_a_config_error(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    effects: list[str] = []

    @app.task
    def shared_key() -> None:
        with app.idempotent("partner:sync"):
            effects.append("first")
        with contextlib.suppress(AlreadyProcessed), app.idempotent("partner:sync"):
            effects.append("second")

    @app.task
    def shared_step() -> None:
        job = current_job()
        with contextlib.suppress(AlreadyProcessed), job.step("api"):
            effects.append("step")
        with contextlib.suppress(AlreadyProcessed), job.step("api"):
            effects.append("step again")

    shared_key.enqueue(job_id="shared-key")
    shared_step.enqueue(job_id="shared-step")
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.dead == 2)
    assert sorted(effects) == ["first", "step"]
    letters = {letter.job_id: letter for letter in list_dead(app)}
    assert set(letters) == {"shared-key", "shared-step"}
    for letter in letters.values():
        assert letter.error_type == "ConfigError" and "claimed twice" in letter.error


async def test_steps_default_to_the_tasks_idempotency_ttl(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    """``idempotency_ttl`` is documented as the default TTL of the task's steps too."""
    app = make_app()
    week = 7 * 86_400

    @app.task(idempotency_ttl=week)
    def weekly(order_id: str) -> None:
        with contextlib.suppress(AlreadyProcessed), current_job().step("email"):
            pass

    weekly.enqueue("A1", job_id="weekly-A1")
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.processed + worker.failed == 1)
    ttl_ms = marker_ttl_ms(rclient, app, Keys.step_claim_name("weekly", "weekly-A1", "email")) or 0
    assert (week - 60) * 1000 < ttl_ms <= (week + 1) * 1000, f"step marker TTL {ttl_ms} ms"


def test_current_job_outside_a_worker_is_refused() -> None:
    with pytest.raises(LockgateError, match="inside a running lockgate task"):
        current_job()


async def test_an_idempotent_sync_task_abandoned_at_its_timeout_has_its_effect_once(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    """A sync run over its timeout cannot be stopped, only abandoned: it may still finish.

    Its job claim must not be handed to the retry while the abandoned run goes on, or the
    side effect of an ``idempotent=True`` task happens twice.
    """
    app = make_app()
    release = threading.Event()
    started: list[int] = []
    effects: list[int] = []

    @app.task(idempotent=True, timeout=0.3, retries=1, backoff=0.01)
    def pay(order_id: str) -> None:
        attempt = current_job().attempt
        started.append(attempt)
        release.wait(30)
        effects.append(attempt)  # the payment goes through

    pay.enqueue("A1", job_id="pay-A1")
    stream = app.keys.stream("default", "normal")
    delayed = app.keys.delayed("default", "normal")
    worker = worker_for(app, concurrency=1, visibility_timeout=1.0)
    try:
        async with running(worker):
            await wait_until(lambda: worker.retried >= 1, message="the first run timed out")
            release.set()  # the abandoned run (and any other) completes
            await wait_until(
                lambda: (
                    worker.processed + worker.dead >= 1
                    and len(effects) == len(started)
                    and rclient.xlen(stream) + rclient.zcard(delayed) == 0
                ),
                message="everything settled",
            )
    finally:
        release.set()
    assert len(effects) == 1, f"the payment ran {len(effects)} times (attempts {effects})"
