"""The backend contract: one suite, run against each backend (streams, sorted).

Everything here goes through an App's Store and the Consumer it hands a worker, never
through a backend's own key names, so a third backend (or a partitioned layout) passes
or fails the same checks. What may differ between backends is stated by the contract
itself: a dead reader's job comes back through ``reclaim`` or through ``read``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence

import msgspec
import pytest

from conftest import wait_until
from lockgate import App
from lockgate.backend.broker import Consumer, Delivery, Liveness, Settlement
from lockgate.backend.connections import async_client
from lockgate.backend.dead_store import record
from lockgate.core.outcome import DONE, Outcome, dead
from lockgate.ops.deadletter import list_dead
from lockgate.worker.liveness import LivenessKeeper

LEVELS = {"critical": 10, "normal": 5, "low": 1}
LEASE = 2.0  # seconds: the sorted backend's lease; the streams backend's reclaim idle time


@pytest.fixture(params=["streams", "sorted"])
def app(request: pytest.FixtureRequest, make_app: Callable[..., App]) -> App:
    backend_app = make_app(levels=LEVELS, backend=request.param)

    @backend_app.task(priority="normal")
    def work(n: int) -> None:
        pass

    return backend_app


@pytest.fixture
async def consumers(app: App) -> AsyncIterator[Callable[..., Consumer]]:
    """Consumers of the app's queue, each on its own client, as workers have them, each
    alive (its liveness kept by a keeper of its own, see lockgate.worker.liveness) unless made
    with ``alive=False``: a reader that died before it could say it lives."""
    made: list[Consumer] = []
    keepers: list[LivenessKeeper] = []

    def make(name: str, *, alive: bool = True) -> Consumer:
        consumer = app.store.consumer(
            async_client(app.redis_url), queues=["default"], name=name,
            lease_seconds=LEASE, claims=None,
        )  # fmt: skip
        made.append(consumer)
        if alive:
            keeper = LivenessKeeper(
                app.redis_url, name, consumer.liveness_keys, Liveness.of(LEASE), list
            )
            keeper.start()
            keepers.append(keeper)
        return consumer

    yield make
    for keeper in keepers:
        await asyncio.to_thread(keeper.stop)
    for consumer in made:
        await consumer.close()


def quotas(free: int) -> list[int]:
    return [free] * len(LEVELS)


async def read(consumer: Consumer, free: int) -> list[Delivery]:
    return (await consumer.read(free, quotas(free))).deliveries


async def settle(consumer: Consumer, delivery: Delivery, outcome: Outcome) -> bool:
    """Apply an outcome; whether this consumer still owned the delivery."""
    fields = record(delivery, outcome.reason, outcome.error) if outcome.kind == "dead" else {}
    call = consumer.settle_call(Settlement(delivery, outcome, record=fields))
    (reply,) = await consumer.settle([call])
    return int(reply[0]) == 1


async def totals(app: App) -> tuple[int, int, int, int]:
    """(waiting, pending, delayed, dead letters) over every level."""
    rows, dead_letters = await app.store.stats(["default"])
    return (
        sum(r.waiting for r in rows), sum(r.pending for r in rows),
        sum(r.delayed for r in rows), dead_letters,
    )  # fmt: skip


async def taken_back(consumer: Consumer) -> Delivery | None:
    """A dead reader's job, as this consumer gets it: by reclaim, or by a read."""
    reclaimed = await consumer.reclaim(LEASE)
    if reclaimed is not None:
        return reclaimed
    deliveries = await read(consumer, 1)
    return deliveries[0] if deliveries else None


def ids(deliveries: Sequence[Delivery]) -> list[str]:
    return [d.job_id for d in deliveries]


async def test_enqueue_counts_and_refuses_a_queued_id(app: App) -> None:
    work = app.tasks["work"]
    created = await app.enqueue_many_async(
        [work.message(n, job_id=f"j{n}") for n in range(3)] + [work.message(9, job_id="j0")]
    )
    assert [r.created for r in created] == [True, True, True, False]
    assert await totals(app) == (3, 0, 0, 0)


async def test_read_takes_no_more_than_free_slots_in_fifo_order(
    app: App, consumers: Callable[..., Consumer]
) -> None:
    work = app.tasks["work"]
    for n in range(5):
        await work.enqueue_async(n, job_id=f"j{n}")
    reader = consumers("a")
    first = await read(reader, 2)
    assert ids(first) == ["j0", "j1"]
    assert [d.job.args for d in first if d.job] == [[0], [1]]
    assert await totals(app) == (3, 2, 0, 0)
    assert ids(await read(reader, 10)) == ["j2", "j3", "j4"]
    assert ids(await read(reader, 10)) == []


async def test_higher_levels_are_read_first(app: App, consumers: Callable[..., Consumer]) -> None:
    work = app.tasks["work"]
    await work.enqueue_async(1, job_id="low", priority="low")
    await work.enqueue_async(2, job_id="critical", priority="critical")
    deliveries = await read(consumers("a"), 1)
    assert ids(deliveries) == ["critical"]


async def test_done_removes_the_job_and_frees_its_id(
    app: App, consumers: Callable[..., Consumer]
) -> None:
    work = app.tasks["work"]
    await work.enqueue_async(1, job_id="once")
    reader = consumers("a")
    (delivery,) = await read(reader, 1)
    assert await settle(reader, delivery, DONE)
    assert await totals(app) == (0, 0, 0, 0)
    assert (await work.enqueue_async(1, job_id="once")).created


async def test_a_retry_waits_its_delay_then_comes_back_as_the_next_attempt(
    app: App, consumers: Callable[..., Consumer]
) -> None:
    work = app.tasks["work"]
    await work.enqueue_async(7, job_id="flaky")
    reader = consumers("a")
    (delivery,) = await read(reader, 1)
    assert delivery.job is not None and delivery.job.attempt == 1
    following = msgspec.structs.replace(delivery.job, attempt=2)
    assert await settle(reader, delivery, Outcome("retry", delay=0.3, next_job=following))
    assert await totals(app) == (0, 0, 1, 0)
    assert not (await work.enqueue_async(7, job_id="flaky")).created  # still its job
    again = await wait_until(lambda: read(reader, 1), message="the retry comes back")
    assert ids(again) == ["flaky"]
    assert again[0].job is not None and again[0].job.attempt == 2


async def test_dead_lettered_job_is_kept_with_its_reason(
    app: App, consumers: Callable[..., Consumer]
) -> None:
    work = app.tasks["work"]
    await work.enqueue_async(3, job_id="doomed")
    reader = consumers("a")
    (delivery,) = await read(reader, 1)
    assert await settle(reader, delivery, dead("out of attempts", ValueError("bad card")))
    assert await totals(app) == (0, 0, 0, 1)
    (letter,) = list_dead(app)
    assert (letter.job_id, letter.reason, letter.error_type) == (
        "doomed", "out of attempts", "ValueError",
    )  # fmt: skip
    assert app.store.dead.count() == 1


async def test_delayed_jobs_are_listed_soonest_first_up_to_the_limit(app: App) -> None:
    work = app.tasks["work"]
    for n, (delay, level) in enumerate([(300, "low"), (100, "critical"), (200, "normal")]):
        await work.enqueue_async(n, job_id=f"later-{n}", delay=delay, priority=level)
    await work.enqueue_async(9, job_id="now")
    listed = await app.store.delayed(["default"], 10)
    assert [(job.id, job.level) for job in listed] == [
        ("later-1", "critical"), ("later-2", "normal"), ("later-0", "low"),
    ]  # fmt: skip
    assert {(job.task, job.queue, job.attempt) for job in listed} == {("work", "default", 1)}
    assert abs(listed[0].due_at - (time.time() + 100)) < 5
    assert all(job.enqueued_at is not None for job in listed)
    assert [job.id for job in await app.store.delayed(["default"], 2)] == ["later-1", "later-2"]
    assert await app.store.delayed(["elsewhere"], 10) == []


async def test_a_dead_readers_job_goes_to_another_and_the_first_cannot_settle_it(
    app: App, consumers: Callable[..., Consumer]
) -> None:
    """The zombie rule: once a job was handed to another reader, the first reader's late
    ack is refused, so the job is neither lost nor freed while it runs."""
    work = app.tasks["work"]
    await work.enqueue_async(5, job_id="orphan")
    zombie, heir = consumers("zombie", alive=False), consumers("heir")
    (first,) = await read(zombie, 1)
    second = await wait_until(lambda: taken_back(heir), message="the job is taken back")
    assert second.job_id == "orphan"
    assert second.deliveries == 2
    assert not await settle(zombie, first, DONE)
    assert await totals(app) == (0, 1, 0, 0)  # still the heir's
    assert await settle(heir, second, DONE)
    assert await totals(app) == (0, 0, 0, 0)


async def test_a_heartbeat_keeps_a_running_job_from_other_readers(
    app: App, consumers: Callable[..., Consumer]
) -> None:
    work = app.tasks["work"]
    await work.enqueue_async(6, job_id="long")
    runner, other = consumers("runner"), consumers("other")
    (delivery,) = await read(runner, 1)
    loop = asyncio.get_running_loop()
    until = loop.time() + 2.5 * LEASE
    while loop.time() < until:  # past two lease windows, each look right after a beat
        await runner.heartbeat([delivery])
        assert await taken_back(other) is None
        await asyncio.sleep(LEASE / 5)
    assert await settle(runner, delivery, DONE)


async def test_wait_for_work_returns_when_a_job_arrives(
    app: App, consumers: Callable[..., Consumer]
) -> None:
    reader = consumers("idle")
    assert await read(reader, 1) == []  # an empty read: the wait starts from here
    # The wait looks for what came after that read, so a job that lands before the
    # wait reaches Redis is not missed either.
    waiting = asyncio.create_task(reader.wait_for_work(30.0))
    await app.tasks["work"].enqueue_async(1, job_id="wake")
    await asyncio.wait_for(waiting, 10.0)  # a loose bound against a hang
    assert ids(await read(reader, 1)) == ["wake"]


async def test_forget_namespace_leaves_no_key(app: App, consumers: Callable[..., Consumer]) -> None:
    # A reader without a liveness keeper: a live one beats again after the namespace is
    # forgotten (its record comes back, as a running worker's must), at a moment a busy
    # machine makes random.
    await app.tasks["work"].enqueue_async(1, job_id="gone")
    await read(consumers("a", alive=False), 1)
    client, _ = await app.async_connection()
    pattern = f"{app.keys.prefix}:*"
    assert [key async for key in client.scan_iter(match=pattern)]
    assert await app.store.forget_namespace() > 0
    assert [key async for key in client.scan_iter(match=pattern)] == []
