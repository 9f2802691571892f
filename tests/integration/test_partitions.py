"""A partitioned namespace (``App(partitions=N)``) keeps every promise of one partition:
the count is agreed, jobs run once wherever they hash, a worker never holds more jobs
than its slots, dead letters, status, cancel, pause and stats see all partitions, and an
enqueue wakes about one idle worker per job instead of all of them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from conftest import finish, running, wait_until, worker_for
from lockgate import (
    AlreadyProcessed,
    App,
    CancelOutcome,
    ConfigError,
    RetryableError,
    Worker,
    WorkerConfig,
)
from lockgate.backend import partitioned
from lockgate.backend.connections import AsyncClient, async_client
from lockgate.backend.partitions import home_of, partition_of
from lockgate.integrations.embedded import EmbeddedServer
from lockgate.ops import deadletter, queues
from lockgate.ops.delayed import delayed_jobs

PARTITIONS = 4


async def test_a_count_other_than_the_recorded_one_is_a_config_error(
    make_app: Callable[..., App],
) -> None:
    first = make_app(partitions=PARTITIONS)

    @first.task
    async def job() -> None: ...

    await job.enqueue_async()
    other = make_app(partitions=1)

    @other.task(name=job.name)
    async def same() -> None: ...

    with pytest.raises(ConfigError, match=r"has 4 partition\(s\) in Redis.*partitions=1"):
        same.enqueue()
    with pytest.raises(ConfigError, match="partitions=1"):
        await Worker(other, WorkerConfig(idle_wait=1.0)).run()
    # The recorded count is untouched and its own App works on.
    assert (await job.enqueue_async()).created


def test_partitions_need_the_streams_backend_and_a_sane_count(
    make_app: Callable[..., App],
) -> None:
    with pytest.raises(ConfigError, match="sorted backend keeps one partition"):
        make_app(partitions=2, backend="sorted")
    for bad in (0, 1025, True, 2.5):
        with pytest.raises(ConfigError, match="partitions"):
            make_app(partitions=bad)


async def test_every_job_runs_once_and_a_worker_never_holds_more_than_its_slots(
    make_app: Callable[..., App],
) -> None:
    app = make_app(partitions=PARTITIONS)
    ran: list[int] = []
    in_flight: list[int] = []
    running_now = 0
    slots = 3

    @app.task
    async def job(n: int) -> None:
        nonlocal running_now
        running_now += 1
        in_flight.append(running_now)
        await asyncio.sleep(0.002)  # overlap with the jobs the same read took
        running_now -= 1
        ran.append(n)

    sent = app.enqueue_many(
        [job.message(n, priority=("critical", "low")[n % 2]) for n in range(120)]
    )
    assert len({partition_of(r.job_id, PARTITIONS) for r in sent}) == PARTITIONS
    worker = worker_for(app, concurrency=slots)
    async with running(worker):
        await wait_until(lambda: worker.processed == 120)
    assert sorted(ran) == list(range(120))
    assert max(in_flight) == slots


async def test_dead_letters_status_results_and_cancel_across_partitions(
    make_app: Callable[..., App],
) -> None:
    app = make_app(partitions=PARTITIONS)

    @app.task(retries=0)
    async def fail(n: int) -> None:
        raise ValueError(f"bad {n}")

    @app.task(keep_result=60)
    async def double(n: int) -> int:
        return 2 * n

    failed = [fail.enqueue(n) for n in range(8)]
    kept = [double.enqueue(n) for n in range(8)]
    later = double.enqueue(99, delay=600)
    assert later.status() == "delayed"
    assert app.cancel(later.job_id)
    assert later.status() == "cancelled"
    worker = worker_for(app, concurrency=4)
    async with running(worker):
        await wait_until(lambda: (worker.processed, worker.dead) == (8, 8))
    assert [await r.result_async(timeout=5) for r in kept] == [2 * n for n in range(8)]
    assert {r.status() for r in failed} == {"dead"}
    letters = deadletter.list_dead(app)
    assert sorted(letter.job_id for letter in letters) == sorted(r.job_id for r in failed)
    # Oldest first across partitions, each named '<partition>/<entry id>'.
    # (by entry id: when each letter landed, on its partition's node's clock)
    landed = [tuple(map(int, x.id.split("/")[1].split("-"))) for x in letters]
    assert landed == sorted(landed)
    for letter in letters:
        assert letter.id.split("/")[0] == str(partition_of(letter.job_id, PARTITIONS))
        shown = deadletter.show_dead(app, letter.id)
        assert shown is not None and shown.job_id == letter.job_id
    assert deadletter.count_dead(app) == 8
    replayed = deadletter.replay(app, [letters[0]])
    assert [r.outcome for r in replayed] == ["enqueued"]
    assert deadletter.count_dead(app) == 7
    assert deadletter.show_dead(app, letters[0].id) is None
    assert deadletter.purge(app) == 7 and deadletter.count_dead(app) == 0


async def test_delayed_jobs_of_every_partition_are_listed_soonest_first(
    make_app: Callable[..., App],
) -> None:
    app = make_app(partitions=PARTITIONS, levels={"high": 5, "low": 1})

    @app.task
    async def later(n: int) -> None: ...

    delays = {f"later-{n}": 100 + (7 * n) % 12 for n in range(12)}  # due in a shuffled order
    levels = {job_id: ("high", "low")[n % 2] for n, job_id in enumerate(delays)}
    for n, job_id in enumerate(delays):
        await later.enqueue_async(n, job_id=job_id, delay=delays[job_id], priority=levels[job_id])
    assert len({partition_of(job_id, PARTITIONS) for job_id in delays}) > 1
    soonest = sorted(delays, key=delays.__getitem__)
    listed = await delayed_jobs(app)
    assert [(job.id, job.level) for job in listed] == [(i, levels[i]) for i in soonest]
    assert [job.id for job in await delayed_jobs(app, limit=5)] == soonest[:5]


async def test_pause_holds_every_partition_and_resume_wakes_an_idle_worker(
    make_app: Callable[..., App],
) -> None:
    app = make_app(partitions=PARTITIONS)

    @app.task
    async def job(n: int) -> None: ...

    await queues.pause(app, "default")
    app.enqueue_many([job.message(n) for n in range(12)])
    # A long idle wait: only the resume's wake-up can start the jobs promptly.
    worker = worker_for(app, concurrency=4, idle_wait=60.0)
    async with running(worker):
        await wait_until(lambda: worker._reading, message="the worker read once")
        rows, _ = await app.store.stats(["default"])
        assert sum(row.waiting for row in rows) == 12 and worker.processed == 0
        await queues.resume(app, "default")
        await wait_until(lambda: worker.processed == 12, timeout=20)


async def test_a_retry_wakes_an_idle_worker_for_its_due_time(
    make_app: Callable[..., App],
) -> None:
    app = make_app(partitions=PARTITIONS)
    attempts: list[int] = []

    @app.task(retries=1, backoff=0.3, retry_on=(ValueError,))
    async def flaky() -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise ValueError("once")

    worker = worker_for(app, concurrency=2, idle_wait=60.0)
    async with running(worker):
        await flaky.enqueue_async()
        # Well under the 60 s idle wait: the settle's wake-up told the worker the due time.
        await wait_until(lambda: worker.processed == 1, timeout=20)
    assert len(attempts) == 2


@pytest.mark.parametrize("delay", [0.0, 0.05])
async def test_a_burst_worker_runs_a_put_back_job_before_it_stops(
    make_app: Callable[..., App], delay: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy worker plans reads from a count of the partitions: a job its own settle put
    back (a retry) must still be seen before a burst run decides nothing is left. The
    count is kept for a minute here, so only a recount for the put-backs finds them."""
    monkeypatch.setattr(partitioned, "COUNT_EVERY", 60.0)
    app = make_app(partitions=PARTITIONS)
    attempts: dict[int, int] = {}

    @app.task(retries=2)
    async def flaky(n: int) -> None:
        attempts[n] = attempts.get(n, 0) + 1
        if attempts[n] == 1:
            raise RetryableError("again", delay=delay)

    # One job, one slot: the first read takes every job counted, then reads again only
    # once the put-back landed.
    await flaky.enqueue_async(0)
    worker = worker_for(app, concurrency=1)
    await asyncio.wait_for(worker.run(burst=True), 30)
    assert attempts == {0: 2}


async def test_an_idempotent_job_claims_and_marks_done_in_its_partition(
    make_app: Callable[..., App],
) -> None:
    app = make_app(partitions=PARTITIONS)
    ran: list[int] = []

    @app.task(idempotent=True)
    async def pay(n: int) -> None:
        ran.append(n)

    for n in range(6):
        pay.enqueue(n, job_id=f"pay-{n}")
    worker = worker_for(app, concurrency=2)
    async with running(worker):
        await wait_until(lambda: worker.processed == 6)
        # The same ids again, after their markers freed them: skipped as already done.
        for n in range(6):
            pay.enqueue(n, job_id=f"pay-{n}")
        await wait_until(lambda: worker.processed == 12)
    assert sorted(ran) == list(range(6))


def test_counters_cooldowns_and_user_claims_on_a_partitioned_namespace(
    make_app: Callable[..., App],
) -> None:
    app = make_app(partitions=PARTITIONS)
    assert app.incr_once("views", "req-1", 2) == (True, 2)
    assert app.incr_once("views", "req-1", 2) == (False, 2)
    assert app.counter("views") == 2
    assert app.cooldown("otp:+84", 60)
    assert not app.cooldown("otp:+84", 60)
    with app.idempotent("order:A1"):
        pass
    with pytest.raises(AlreadyProcessed, match="order:A1"), app.idempotent("order:A1"):
        pass
    # User keys hash by themselves, not into a partition of jobs.
    claim_key, _ = app.store.claim_place("order:A1")
    assert claim_key.startswith(f"lockgate:{{{app.namespace}/c.")


async def test_one_job_wakes_one_idle_worker_of_fifty() -> None:
    """The thundering herd, measured: with one partition every idle worker blocks on the
    streams and wakes for each new job; partitioned, a job wakes one."""
    woken = {}
    with EmbeddedServer() as server:
        for partitions in (1, PARTITIONS):
            app = App(server.url, namespace=f"herd-{partitions}", partitions=partitions)

            @app.task
            async def job() -> None: ...

            workers = [Worker(app, WorkerConfig(concurrency=1, idle_wait=60.0)) for _ in range(50)]
            tasks = [asyncio.create_task(w.run()) for w in workers]
            try:
                client, _ = await app.async_connection()

                async def all_idle(client: AsyncClient = client) -> bool:
                    clients = await client.client_list()
                    return sum(c["cmd"] in ("blpop", "xread") for c in clients) == 50

                await wait_until(all_idle, message="50 idle workers")
                before = sum(w._consumer.woken for w in workers if w._consumer)
                await job.enqueue_async()
                await wait_until(lambda ws=workers: sum(w.processed for w in ws) == 1)
                await wait_until(all_idle, message="idle again")
                woken[partitions] = sum(w._consumer.woken for w in workers if w._consumer) - before
            finally:
                for worker in workers:
                    worker.request_stop()
                for worker, task in zip(workers, tasks, strict=True):
                    await finish(worker, task)
                await app.aclose()
                app.close()
    print(f"idle workers woken by one job, of 50: {woken}")
    assert woken[1] >= 45
    assert woken[PARTITIONS] <= 2


def ids_in(partition: int, count: int, prefix: str = "job") -> list[str]:
    """``count`` job ids that hash to ``partition`` (of :data:`PARTITIONS`)."""
    found = (f"{prefix}-{n}" for n in range(100_000))
    return [i for i in found if partition_of(i, PARTITIONS) == partition][:count]


async def test_a_namespace_with_one_partition_jobs_is_refused_by_a_partitioned_app(
    make_app: Callable[..., App], rclient: Any
) -> None:
    """Its workers would never read them: refused before anything is written."""
    old = make_app()

    @old.task
    async def job() -> None: ...

    await job.enqueue_async()
    rclient.delete(old.keys.partitions())  # as lockgate 0.2 left it: no record
    new = make_app(partitions=PARTITIONS)

    @new.task(name=job.name)
    async def same() -> None: ...

    with pytest.raises(ConfigError, match="one-partition layout"):
        await same.enqueue_async()
    with pytest.raises(ConfigError, match="one-partition layout"):
        await Worker(new, WorkerConfig(idle_wait=1.0)).run()
    assert rclient.get(old.keys.partitions()) is None
    # The one-partition App still serves them.
    worker = worker_for(old)
    async with running(worker):
        await wait_until(lambda: worker.processed == 1)


async def test_a_partition_that_fails_does_not_stop_the_others(
    make_app: Callable[..., App], rclient: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """One partition's calls fail (its stream key holds a string: WRONGTYPE, as a
    primary that is down fails its slots); the jobs of the others run, and the failure
    is logged."""
    app = make_app(partitions=PARTITIONS)

    @app.task
    async def job(n: int) -> None: ...

    app.enqueue_many(
        [job.message(n, job_id=i) for p in (0, 2, 3) for n, i in enumerate(ids_in(p, 5))]
    )
    rclient.set(app.store.layout.parts[1].stream("default", "normal"), "not a stream")
    worker = worker_for(app, concurrency=4)
    async with running(worker):
        await wait_until(lambda: worker.processed == 15)
    assert "partition calls failed" in caplog.text and "WRONGTYPE" in caplog.text


async def test_a_free_slot_is_used_while_long_jobs_run(make_app: Callable[..., App]) -> None:
    """A partitioned worker gathers free slots for a read, briefly: a job enqueued while
    7 of 8 slots run long jobs starts before any of them ends."""
    app = make_app(partitions=PARTITIONS)
    release = asyncio.Event()
    quick_started = asyncio.Event()

    @app.task
    async def slow() -> None:
        await release.wait()

    @app.task
    async def quick() -> None:
        quick_started.set()

    app.enqueue_many([slow.message() for _ in range(7)])
    worker = worker_for(app, concurrency=8, idle_wait=60.0)
    async with running(worker):
        await wait_until(lambda: len(worker._running) == 7, message="7 slow jobs run")
        await quick.enqueue_async()
        await asyncio.wait_for(quick_started.wait(), 10)
        assert len(worker._running) >= 7  # the slow ones still run
        release.set()
        await wait_until(lambda: worker.processed == 8)


async def test_an_empty_read_never_rests_on_an_old_count(
    make_app: Callable[..., App], redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's count said partition 0 had jobs; another worker took them; jobs came
    to partition 1 meanwhile: the read counts again and takes one, instead of coming
    back empty (the worker would then idle while jobs wait)."""
    monkeypatch.setattr(partitioned, "COUNT_EVERY", 60.0)  # the count is kept
    app = make_app(partitions=PARTITIONS)

    @app.task
    async def job() -> None: ...

    app.enqueue_many([job.message(job_id=i) for i in ids_in(0, 3)])
    consumers = [
        app.store.consumer(async_client(redis_url), queues=["default"], name=name,
                           lease_seconds=30, claims=None)
        for name in ("w1", "w2")
    ]  # fmt: skip
    first, second = consumers
    try:
        assert len((await first.read(1, [0, 0, 0])).deliveries) == 1  # counted: 2 left in p0
        assert len((await second.read(2, [0, 0, 0])).deliveries) == 2  # p0 emptied
        app.enqueue_many([job.message(job_id=i) for i in ids_in(1, 5)])
        taken = (await first.read(1, [0, 0, 0])).deliveries
        assert [partition_of(d.job_id, PARTITIONS) for d in taken] == [1]
    finally:
        for consumer in consumers:
            await consumer.close()


async def test_cancel_tells_an_ended_keyed_job_from_an_unknown_one_in_any_partition(
    make_app: Callable[..., App],
) -> None:
    """A keyed job lives in its key's partition, not its id's: once it ended (no marker
    left), the cancel finds nothing there, and the status read after it looks in every
    partition, so the outcome is ENDED, not UNKNOWN."""
    app = make_app(partitions=PARTITIONS)

    @app.task(key_by="tenant")
    async def sync(tenant: str, n: int) -> None: ...

    moved = 0
    for n in range(16):
        r = sync.enqueue(f"t{n}", n, job_id=f"sync-{n}")
        moved += home_of(r.job_id, f"t{n}", PARTITIONS) != partition_of(r.job_id, PARTITIONS)
    assert moved  # some live in another partition than their id's
    await asyncio.wait_for(worker_for(app).run(burst=True), 30)
    assert {app.cancel(f"sync-{n}") for n in range(16)} == {CancelOutcome.ENDED}
    assert app.cancel("sync-99") is CancelOutcome.UNKNOWN
