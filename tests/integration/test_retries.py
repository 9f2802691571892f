"""Nothing lost: retries with backoff, explicit delays, timeouts, delayed jobs, payload
checks at enqueue, and tasks that raise SystemExit or KeyboardInterrupt.

Timing is asserted only loosely, against the Redis server's clock: a job never runs before
its due time; how soon after is not a goal here.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import redis

from conftest import job_ended, running, wait_until, wait_until_sync, worker_for
from lockgate import (
    App,
    ConfigError,
    RetryableError,
    SerializationError,
    current_job,
)
from lockgate.backend.keys import GROUP
from lockgate.core.message import Message
from lockgate.ops.deadletter import list_dead

BACKENDS = ["streams", "sorted"]
HERE = Path(__file__).parent


def server_now(rclient: redis.Redis) -> float:
    """The Redis server's clock, in seconds: the clock due times are kept on."""
    seconds, micros = rclient.time()
    return seconds + micros / 1_000_000


def delayed_count(rclient: redis.Redis, app: App, level: str = "normal") -> int:
    if app.backend == "sorted":
        return int(rclient.zcard(app.keys.sorted_delayed("default")))
    return int(rclient.zcard(app.keys.delayed("default", level)))


def namespace_keys(rclient: redis.Redis, namespace: str) -> list[bytes]:
    """The namespace's keys but its partition record and queue names (first call)."""
    found = rclient.scan_iter(match=f"lockgate:{{{namespace}}}:*", count=10_000)
    return [key for key in found if not key.endswith((b":partitions", b":queues"))]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_retryable_errors_retry_with_the_same_job_id_then_dead_letter(
    make_app: Callable[..., App], rclient: redis.Redis, backend: str
) -> None:
    app = make_app(backend=backend)
    seen: list[tuple[str, int]] = []

    @app.task(retries=2, backoff=0.01)
    def flaky(n: int) -> None:
        job = current_job()
        seen.append((job.job_id, job.attempt))
        raise RetryableError(f"still down ({n})")

    flaky.enqueue(7, job_id="flaky-7")
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.dead == 1)
    assert seen == [("flaky-7", 1), ("flaky-7", 2), ("flaky-7", 3)]
    assert (worker.retried, worker.processed) == (2, 0)
    (letter,) = list_dead(app)
    assert (letter.job_id, letter.task, letter.attempt) == ("flaky-7", "flaky", 3)
    assert letter.reason == "retries exhausted"
    assert (letter.error_type, letter.error) == ("RetryableError", "still down (7)")
    assert delayed_count(rclient, app) == 0
    assert job_ended(rclient, app.keys, "flaky-7")  # free for a replay


async def test_retry_on_types_are_retried_and_others_are_not(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    attempts: Counter[str] = Counter()

    @app.task(retries=1, backoff=0.01, retry_on=(ConnectionError,))
    def call_partner(error: str) -> None:
        attempts[current_job().job_id] += 1
        raise {"reset": ConnectionResetError, "value": ValueError}[error](error)

    call_partner.enqueue("reset", job_id="reset")  # a ConnectionError subclass
    call_partner.enqueue("value", job_id="value")
    worker = worker_for(app, concurrency=2)
    async with running(worker):
        await wait_until(lambda: worker.dead == 2)
    assert attempts == {"reset": 2, "value": 1}
    letters = {letter.job_id: letter for letter in list_dead(app)}
    assert (letters["reset"].reason, letters["reset"].error_type) == (
        "retries exhausted",
        "ConnectionResetError",
    )
    assert (letters["value"].reason, letters["value"].attempt) == ("failed", 1)


async def test_any_exception_retries_unless_dead_on_names_it(
    make_app: Callable[..., App],
) -> None:
    """0.4's rule: without retry_on, any Exception retries up to ``retries``; ``dead_on``
    types dead-letter at once, and ``dead_on=(Exception,)`` keeps 0.3's rule (only
    RetryableError, timeouts and retry_on types retry)."""
    app = make_app()
    attempts: Counter[str] = Counter()
    errors = {"value": ValueError, "key": KeyError, "retryable": RetryableError}

    def fail(error: str) -> None:
        attempts[current_job().job_id] += 1
        raise errors[error](error)

    app.task(retries=2, backoff=0.01, name="plain")(fail)
    app.task(retries=2, backoff=0.01, dead_on=(LookupError,), name="some_dead")(fail)
    app.task(retries=2, backoff=0.01, dead_on=(Exception,), name="as_in_0_3")(fail)
    for task, error in [("plain", "value"), ("some_dead", "key"), ("some_dead", "value"),
                        ("as_in_0_3", "value"), ("as_in_0_3", "retryable")]:  # fmt: skip
        app.tasks[task].enqueue(error, job_id=f"{task}:{error}")
    worker = worker_for(app, concurrency=5)
    async with running(worker):
        await wait_until(lambda: worker.dead == 5)
    assert attempts == {
        "plain:value": 3, "some_dead:key": 1, "some_dead:value": 3,
        "as_in_0_3:value": 1, "as_in_0_3:retryable": 3,
    }  # fmt: skip
    reasons = {letter.job_id: letter.reason for letter in list_dead(app)}
    assert reasons == {
        "plain:value": "retries exhausted", "some_dead:key": "failed",
        "some_dead:value": "retries exhausted", "as_in_0_3:value": "failed",
        "as_in_0_3:retryable": "retries exhausted",
    }  # fmt: skip
    assert worker.retried == 6


@pytest.mark.parametrize("timeout", [None, 30.0])
async def test_a_sync_task_raising_timeout_error_is_its_own_failure(
    make_app: Callable[..., App], timeout: float | None
) -> None:
    """A sync task that raises TimeoutError itself (an HTTP client's, say) failed: it is
    retried when asked and dead-lettered with its own message, and the worker goes on.

    The runner's wait on the thread read that TimeoutError as its own timeout firing and
    spun on it for ever: the event loop froze, with or without a task timeout.
    """
    app = make_app()
    attempts: Counter[str] = Counter()

    @app.task(retries=1, backoff=0.01, retry_on=(TimeoutError,), timeout=timeout)
    def call_partner(recovers: bool) -> None:
        attempts[current_job().job_id] += 1
        if not (recovers and current_job().attempt > 1):
            raise TimeoutError("the partner did not answer")

    call_partner.enqueue(True, job_id="recovers")
    call_partner.enqueue(False, job_id="never")
    worker = worker_for(app, concurrency=2)
    await asyncio.wait_for(worker.run(burst=True), timeout=30)
    assert attempts == {"recovers": 2, "never": 2}
    (letter,) = list_dead(app)
    assert (letter.job_id, letter.reason, letter.error_type, letter.error) == (
        "never",
        "retries exhausted",
        "TimeoutError",
        "the partner did not answer",
    )


async def test_a_job_that_recovers_within_its_retries_is_acked(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    attempts: list[int] = []

    @app.task(retries=3, backoff=0.01)
    async def sync_crm(customer: str) -> None:
        attempts.append(current_job().attempt)
        if len(attempts) < 3:
            raise RetryableError("rate limited")

    sync_crm.enqueue("C1", job_id="crm-C1")
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.processed == 1)
    assert attempts == [1, 2, 3]
    assert (worker.retried, worker.dead) == (2, 0)
    assert list_dead(app) == []
    assert job_ended(rclient, app.keys, "crm-C1")
    assert rclient.xlen(app.keys.stream("default", "normal")) == 0


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_explicit_retry_delay_is_honoured(
    make_app: Callable[..., App], rclient: redis.Redis, backend: str
) -> None:
    app = make_app(backend=backend)
    stamps: list[float] = []

    @app.task(retries=1, backoff=0.01)
    def rate_limited() -> None:
        stamps.append(server_now(rclient))
        if len(stamps) == 1:
            raise RetryableError("429", delay=timedelta(milliseconds=500))

    rate_limited.enqueue(job_id="limited")
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        # Meanwhile the next attempt waits in the delayed set.
        await wait_until(lambda: delayed_count(rclient, app) == 1, message="in the delayed set")
        await wait_until(lambda: worker.processed == 1)
    assert len(stamps) == 2
    assert stamps[1] - stamps[0] >= 0.5 - 0.002  # ms rounding of the due time


async def test_a_hanging_async_task_is_cancelled_at_its_timeout_and_retried(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    started: list[int] = []
    cancelled: list[int] = []

    @app.task(timeout=0.2, retries=1, backoff=0.01)
    async def hang() -> None:
        attempt = current_job().attempt
        started.append(attempt)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(attempt)
            raise

    hang.enqueue(job_id="hang")
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.dead == 1)
    assert started == [1, 2] and cancelled == [1, 2]
    assert worker.retried == 1
    (letter,) = list_dead(app)
    assert (letter.reason, letter.error_type, letter.attempt) == (
        "retries exhausted",
        "TimeoutError",
        2,
    )


async def test_a_hanging_sync_task_is_abandoned_at_its_timeout_and_retried(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    release = threading.Event()
    started: list[int] = []
    finished: list[int] = []

    @app.task(timeout=0.2, retries=1, backoff=0.01)
    def hang() -> None:
        attempt = current_job().attempt
        started.append(attempt)
        release.wait(60)
        finished.append(attempt)

    hang.enqueue(job_id="hang-sync")
    worker = worker_for(app, concurrency=1)
    try:
        async with running(worker):
            await wait_until(lambda: worker.dead == 1)
        assert started == [1, 2]
        assert finished == []  # the threads could not be stopped, only abandoned
        assert worker.retried == 1
        (letter,) = list_dead(app)
        assert (letter.reason, letter.error_type) == ("retries exhausted", "TimeoutError")
    finally:
        release.set()
    await wait_until(lambda: sorted(finished) == [1, 2], message="abandoned threads ended")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_delayed_and_eta_jobs_wait_in_the_delayed_set_and_never_run_early(
    make_app: Callable[..., App], rclient: redis.Redis, backend: str
) -> None:
    app = make_app(backend=backend)
    ran: dict[str, float] = {}

    @app.task
    def remind(name: str) -> None:
        ran[name] = server_now(rclient)

    before = server_now(rclient)
    eta = datetime.now(UTC) + timedelta(milliseconds=600)
    remind.enqueue("delay", delay=0.5)
    remind.enqueue("eta", eta=eta)
    elsewhere = eta.astimezone(timezone(timedelta(hours=-5)))  # the same moment
    await remind.enqueue_async("zoned-eta", eta=elsewhere)
    remind.enqueue("past-eta", eta=datetime.now(UTC) - timedelta(hours=1))  # due now
    assert delayed_count(rclient, app) == 3
    worker = worker_for(app, concurrency=4)
    async with running(worker):
        await wait_until(lambda: worker.processed == 4)
    assert ran["delay"] >= before + 0.5 - 0.002
    for name in ("eta", "zoned-eta"):
        assert ran[name] >= eta.timestamp() - 0.05, name  # the same host clock, ms rounding
    assert delayed_count(rclient, app) == 0


def test_delay_and_eta_together_are_refused(make_app: Callable[..., App]) -> None:
    app = make_app()

    @app.task
    def remind() -> None: ...

    with pytest.raises(ConfigError, match="not both"):
        remind.enqueue(delay=1, eta=datetime.now(UTC))
    with pytest.raises(ConfigError, match="negative"):
        remind.enqueue(delay=-1)


async def test_several_workers_promote_due_jobs_without_duplicating_or_losing_one(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    apps = [make_app() for _ in range(4)]
    runs: Counter[int] = Counter()
    failed_once: set[int] = set()
    lock = threading.Lock()

    def declare(app: App) -> Any:
        @app.task(retries=3, backoff=0.01)
        def tick(n: int) -> None:
            with lock:
                runs[n] += 1
                first = n % 4 == 0 and n not in failed_once
                failed_once.add(n)
            if first:
                raise RetryableError("once", delay=0.05)

        return tick

    tick = declare(apps[0])
    for app in apps[1:]:
        declare(app)
    # All due at about the same moment: every worker's read promotes at once.
    apps[0].enqueue_many([Message(tick.message(n).job, delay=0.3) for n in range(300)])
    assert delayed_count(rclient, apps[0]) == 300
    workers = [worker_for(app, concurrency=4) for app in apps]
    async with running(workers[0]), running(workers[1]), running(workers[2]):
        async with running(workers[3]):
            await wait_until(lambda: sum(w.processed for w in workers) == 300)
    assert runs == {n: 2 if n % 4 == 0 else 1 for n in range(300)}
    assert sum(w.retried for w in workers) == 75
    assert sum(w.dead for w in workers) == 0
    stream = apps[0].keys.stream("default", "normal")
    assert delayed_count(rclient, apps[0]) == 0
    assert rclient.xlen(stream) == 0
    assert rclient.xpending(stream, GROUP)["pending"] == 0


async def test_payloads_that_cannot_be_sent_are_refused_at_enqueue(
    make_app: Callable[..., App], rclient: redis.Redis, namespace: str
) -> None:
    app = make_app(max_payload_bytes=256)

    @app.task
    def store(blob: Any, **extra: Any) -> None: ...

    with pytest.raises(SerializationError, match="over the limit of 256"):
        store.enqueue("x" * 1000, job_id="too-big")
    with pytest.raises(SerializationError, match="over the limit of 256"):
        await store.enqueue_async("x" * 1000)
    with pytest.raises(SerializationError, match="store"):
        store.enqueue(object(), job_id="no-json")
    with pytest.raises(SerializationError):
        store.enqueue("fine", extra=lambda: None)
    with pytest.raises(SerializationError):
        await store.enqueue_async(object())
    # One bad job in a batch: nothing of the batch is enqueued.
    with pytest.raises(SerializationError):
        app.enqueue_many([store.message("fine"), store.message(object()), store.message("ok")])
    with pytest.raises(SerializationError):
        store.enqueue("x" * 1000, delay=5)
    assert namespace_keys(rclient, namespace) == []
    assert store.enqueue("x" * 100).created  # under the limit


@pytest.mark.parametrize("kind", ["sync", "async", "sync-timeout"])
@pytest.mark.parametrize("error", [SystemExit, KeyboardInterrupt])
async def test_a_task_raising_system_exit_or_keyboard_interrupt_is_dead_lettered(
    make_app: Callable[..., App], kind: str, error: type[BaseException]
) -> None:
    app = make_app()
    ran: list[int] = []

    if kind == "async":

        @app.task(name="bad")
        async def bad_async() -> None:
            raise error()

    else:

        @app.task(name="bad", timeout=30 if kind == "sync-timeout" else None)
        def bad_sync() -> None:
            raise error()

    @app.task
    async def good(n: int) -> None:
        ran.append(n)

    app.tasks["bad"].enqueue(job_id="bad-1")
    worker = worker_for(app, concurrency=1)
    async with running(worker) as run:
        await wait_until(lambda: worker.dead == 1 or run.done())
        good.enqueue(1)  # the worker keeps running
        await wait_until(lambda: ran == [1] or run.done())
        assert not run.done()
    (letter,) = list_dead(app)
    assert (letter.job_id, letter.reason, letter.error_type) == ("bad-1", "failed", error.__name__)


@pytest.fixture
def spawn_cli_worker(
    redis_url: str, namespace: str, tmp_path: Path
) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``lockgate worker cli_app:app`` processes; killed at teardown if still running."""
    procs: list[subprocess.Popen[bytes]] = []
    env = dict(os.environ, LOCKGATE_REDIS_URL=redis_url, LOCKGATE_TEST_NAMESPACE=namespace)

    def spawn(*options: str) -> subprocess.Popen[bytes]:
        log = tmp_path / f"worker-{len(procs)}.log"
        command = [sys.executable, "-m", "lockgate", "worker", "cli_app:app", *options]
        with log.open("wb") as out:
            proc = subprocess.Popen(command, cwd=HERE, env=env, stdout=out, stderr=out)
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)


@pytest.mark.parametrize("task_name", ["exit_async", "interrupt_async"])
def test_an_async_task_with_a_timeout_raising_system_exit_does_not_stop_the_worker(
    redis_url: str,
    rclient: redis.Redis,
    namespace: str,
    spawn_cli_worker: Callable[..., subprocess.Popen[bytes]],
    task_name: str,
    tmp_path: Path,
) -> None:
    """In a worker process of its own: if the exception escapes the run loop, only it dies."""
    app = App(redis_url=redis_url, namespace=namespace)
    try:

        @app.task(name=task_name)
        async def bad(*args: Any) -> None: ...

        @app.task
        async def ping(n: int) -> None: ...

        bad.enqueue(*([3] if task_name == "exit_async" else []), job_id="bad-1")
        proc = spawn_cli_worker("--concurrency", "1")
        wait_until_sync(
            lambda: rclient.xlen(app.keys.dead()) or proc.poll() is not None,
            message="the job was dead-lettered",
        )
        ping.enqueue(1)  # the worker keeps running
        pinged = f"{app.keys.prefix}:test:pinged"
        wait_until_sync(
            lambda: rclient.llen(pinged) or proc.poll() is not None,
            message="the next job ran",
        )
        log = (tmp_path / "worker-0.log").read_text(errors="replace")
        assert proc.poll() is None, f"the worker exited ({proc.returncode}):\n{log[-3000:]}"
        (letter,) = list_dead(app)
        assert (letter.job_id, letter.reason) == ("bad-1", "failed")
    finally:
        app.close()
