"""The dead-letter queue: what an entry records; listing, replaying, trimming, purging it."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import msgspec
import pytest
import redis

from conftest import job_ended, running, wait_until, wait_until_sync, worker_for
from lockgate import App, ConfigError, current_job
from lockgate.backend.partitions import partition_of
from lockgate.core.codec import Job, decode, encode
from lockgate.ops.deadletter import (
    DeadLetter,
    Replayed,
    count_dead,
    list_dead,
    purge,
    replay,
    show_dead,
    trim,
    trim_args,
)

BACKENDS = ["streams", "sorted"]
# Each backend, and streams over partitions (a letter lives in its job's partition).
LAYOUTS = [("streams", 1), ("streams", 4), ("sorted", 1)]


def server_now(rclient: redis.Redis) -> float:
    seconds, micros = rclient.time()
    return seconds + micros / 1_000_000


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_dead_letter_records_why_where_and_when(
    make_app: Callable[..., App], rclient: redis.Redis, backend: str
) -> None:
    app = make_app(backend=backend)

    @app.task(queue="mail", priority="low", dead_on=(ValueError,))
    def send_invoice(order_id: str, *, copy: bool = False) -> None:
        raise ValueError(f"no address for {order_id}")

    before = time.time()
    send_invoice.enqueue("A1", copy=True, job_id="invoice-A1")
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.dead == 1)
    after = time.time()
    (letter,) = list_dead(app)
    assert re.fullmatch(r"\d+-\d+", letter.id)
    assert (letter.job_id, letter.task) == ("invoice-A1", "send_invoice")
    assert letter.reason == "failed"
    assert (letter.error_type, letter.error) == ("ValueError", "no address for A1")
    assert "Traceback" in letter.traceback
    assert "in send_invoice" in letter.traceback
    assert "ValueError: no address for A1" in letter.traceback
    assert (letter.attempt, letter.deliveries) == (1, 1)
    assert (letter.queue, letter.level) == ("mail", "low")
    if backend == "streams":
        assert letter.origin == app.keys.stream("mail", "low")
        assert re.fullmatch(r"\d+-\d+", letter.entry)
    else:
        assert (letter.origin, letter.entry) == ("mail", "invoice-A1")
    assert letter.enqueued_at is not None and letter.failed_at is not None
    assert before - 0.01 <= letter.enqueued_at <= letter.failed_at <= after + 0.01
    job = decode(letter.job)
    assert (job.id, job.args, job.kwargs, job.attempt) == ("invoice-A1", ["A1"], {"copy": True}, 1)
    assert letter.as_dict()["job_id"] == "invoice-A1"
    # Dead-lettered: acked, gone from the queue, and its id free for a replay.
    assert job_ended(rclient, app.keys, "invoice-A1")
    if backend == "streams":
        assert rclient.xlen(app.keys.stream("mail", "low")) == 0
    else:
        assert rclient.zcard(app.keys.sorted_inflight("mail")) == 0
    assert show_dead(app, letter.id) == letter
    assert show_dead(app, "0-1") is None
    assert count_dead(app) == 1


async def test_replay_keeps_the_job_id_and_runs_the_job(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    fixed = False
    runs: list[tuple[str, int, list[str]]] = []

    @app.task(retries=0)
    def charge(order_id: str) -> None:
        job = current_job()
        if not fixed:
            raise RuntimeError("card service bug")
        runs.append((job.job_id, job.attempt, [order_id]))

    charge.enqueue("A1", job_id="charge-A1")
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.dead == 1)
        fixed = True  # the code is fixed; replay
        (letter,) = list_dead(app)
        (result,) = replay(app, [letter])
        assert (result.id, result.job_id, result.outcome) == (letter.id, "charge-A1", "enqueued")
        assert list_dead(app) == []
        await wait_until(lambda: worker.processed == 1)
    assert runs == [("charge-A1", 1, ["A1"])]
    assert job_ended(rclient, app.keys, "charge-A1")


async def test_replay_leaves_a_letter_whose_id_is_taken_or_whose_job_is_unusable(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()

    @app.task(retries=0, dead_on=(RuntimeError,))
    def charge(order_id: str) -> None:
        raise RuntimeError("down")

    charge.enqueue("A1", job_id="charge-A1")
    stream = app.keys.stream("default", "normal")
    rclient.xadd(stream, {"job": b"not json"})  # undecodable
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.dead == 2)
    letters = {letter.reason: letter for letter in list_dead(app)}
    assert set(letters) == {"failed", "undecodable entry"}
    assert letters["undecodable entry"].job == "not json"

    charge.enqueue("A1", job_id="charge-A1")  # the same id is queued again meanwhile
    results = {r.outcome: r for r in replay(app, list_dead(app))}
    assert set(results) == {"taken", "bad"}
    assert results["taken"].job_id == "charge-A1"
    assert count_dead(app) == 2  # both letters stay
    assert rclient.xlen(stream) == 1  # only the job enqueued by hand


async def test_purge_deletes_every_dead_letter(make_app: Callable[..., App]) -> None:
    app = make_app()

    @app.task(retries=0)
    async def broken(n: int) -> None:
        raise KeyError(n)

    app.enqueue_many([broken.message(n) for n in range(3)])
    worker = worker_for(app, concurrency=3)
    async with running(worker):
        await wait_until(lambda: worker.dead == 3)
    assert count_dead(app) == 3
    assert purge(app) == 3
    assert count_dead(app) == 0 and list_dead(app) == []
    assert purge(app) == 0


def letter_of(job: Job) -> dict[str, str | bytes]:
    """The fields of a dead letter of ``job`` (as an older release or another app left it)."""
    return {
        "job_id": job.id, "task": job.task, "reason": "failed", "queue": job.queue,
        "level": job.level, "attempt": str(job.attempt), "job": encode(job),
    }  # fmt: skip


def bury(rclient: redis.Redis, app: App, job: Job, entry_id: str = "*") -> str:
    """Write a dead letter of ``job`` directly (as an older release or another app left it)."""
    entry: bytes = rclient.xadd(app.keys.dead(), letter_of(job), id=entry_id)
    return entry.decode()


def bury_many(rclient: redis.Redis, app: App, jobs: list[Job]) -> None:
    """Dead letters of ``jobs`` written directly, each in its job's partition's stream."""
    with rclient.pipeline(transaction=False) as pipe:
        for job in jobs:
            pipe.xadd(app.store.layout.for_job(job.id).dead(), letter_of(job))
        pipe.execute()


def queued_ids(rclient: redis.Redis, app: App, queue: str, level: str) -> list[str]:
    """Job ids waiting on one queue and level of the app's backend."""
    if app.backend == "sorted":
        return [member.decode() for member in rclient.zrange(app.keys.sorted_waiting(queue), 0, -1)]
    return [
        decode(fields[b"job"]).id for _, fields in rclient.xrange(app.keys.stream(queue, level))
    ]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_replay_refuses_a_level_or_queue_the_app_does_not_declare(
    make_app: Callable[..., App], rclient: redis.Redis, backend: str
) -> None:
    app = make_app(backend=backend)

    @app.task(queue="mail")
    def send(to: str) -> None: ...

    urgent = bury(rclient, app, Job(id="send-1", task="send", queue="mail", level="urgent"))
    reports = bury(rclient, app, Job(id="send-2", task="send", queue="reports", level="low"))
    gone = bury(rclient, app, Job(id="gone-1", task="gone", queue="mail", level="low"))
    letters = list_dead(app)

    results = replay(app, letters)

    assert [(r.id, r.job_id, r.outcome) for r in results] == [
        (urgent, "send-1", "bad"), (reports, "send-2", "bad"), (gone, "gone-1", "bad"),
    ]  # fmt: skip
    assert results[0].detail == (
        "level 'urgent' is not declared by this app (declared: critical, normal, low); "
        "replay with --level LEVEL"
    )
    assert results[1].detail == (
        "queue 'reports' is not served by this app (served: mail); replay with --queue QUEUE"
    )
    assert results[2].detail == "unknown task 'gone'"
    assert list_dead(app) == letters  # every letter stays
    for job_id in ("send-1", "send-2", "gone-1"):
        assert job_ended(rclient, app.keys, job_id)  # no id blocked
    assert rclient.keys(f"{app.keys.prefix}:stream:*") == []
    assert rclient.keys(f"{app.keys.prefix}:sorted:*") == []


@pytest.mark.parametrize("backend", BACKENDS)
async def test_replay_to_another_level_runs_the_job_there_under_its_id(
    make_app: Callable[..., App], rclient: redis.Redis, backend: str
) -> None:
    app = make_app(backend=backend)
    runs: list[tuple[str, str, str, int]] = []

    @app.task(queue="mail")
    def send(to: str) -> None:
        job = current_job()
        runs.append((f"{job.job_id} {to}", job.queue, job.level, job.attempt))

    old = Job(id="send-1", task="send", queue="mail", level="urgent", args=["a@x"], attempt=4)
    bury(rclient, app, old)
    (result,) = replay(app, list_dead(app), level="normal")
    assert (result.job_id, result.outcome) == ("send-1", "enqueued")
    assert list_dead(app) == []
    assert queued_ids(rclient, app, "mail", "normal") == ["send-1"]
    assert not job_ended(rclient, app.keys, "send-1")
    if backend == "streams":
        assert not rclient.exists(app.keys.stream("mail", "urgent"))

    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.processed == 1)
    assert runs == [("send-1 a@x", "mail", "normal", 1)]


async def test_replay_to_another_queue_follows_a_task_that_moved(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()

    @app.task(queue="billing")
    def charge(order_id: str) -> None: ...

    bury(rclient, app, Job(id="charge-1", task="charge", queue="default", level="normal"))
    (refused,) = replay(app, list_dead(app))
    assert refused.outcome == "bad" and "queue 'default' is not served" in refused.detail
    (result,) = replay(app, list_dead(app), queue="billing")
    assert result.outcome == "enqueued"
    assert queued_ids(rclient, app, "billing", "normal") == ["charge-1"]
    assert list_dead(app) == []


@pytest.mark.parametrize(("backend", "partitions"), LAYOUTS)
async def test_a_replayed_job_is_the_stored_job_with_attempt_1_and_a_new_enqueue_time(
    make_app: Callable[..., App], rclient: redis.Redis, backend: str, partitions: int
) -> None:
    app = make_app(backend=backend, partitions=partitions)

    @app.task(queue="mail")
    def send(to: str) -> None: ...

    # Every field a job carries stays as stored, but its attempt, enqueue time and what
    # described its last attempt alone (waits, rate_reserved).
    old = Job(
        id="send-1", task="send", queue="mail", level="low", args=["a@x"], kwargs={"cc": "b@x"},
        attempt=4, enqueued=1000.0, waits=3, markers_expire=2_000_000_000.5, crashes=2,
        rate_reserved=True,
    )  # fmt: skip
    bury_many(rclient, app, [old])
    before = time.time()
    (result,) = replay(app, list_dead(app))
    assert result.outcome == "enqueued"
    if backend == "streams":
        stream = app.store.layout.for_job("send-1").stream("mail", "low")
        ((_, fields),) = rclient.xrange(stream)
        stored = decode(fields[b"job"])
    else:
        stored = decode(rclient.hget(app.keys.sorted_payloads("mail"), "send-1"))
    assert before <= stored.enqueued <= time.time()
    fresh = {"attempt": 1, "waits": 0, "rate_reserved": False}
    assert stored == msgspec.structs.replace(old, enqueued=stored.enqueued, **fresh)
    # To another level, the level changes too, and nothing else.
    bury_many(rclient, app, [msgspec.structs.replace(old, id="send-2")])
    (moved,) = replay(app, list_dead(app), level="critical")
    assert moved.outcome == "enqueued"
    if backend == "streams":
        stream = app.store.layout.for_job("send-2").stream("mail", "critical")
        ((_, fields),) = rclient.xrange(stream)
        again = decode(fields[b"job"])
    else:
        again = decode(rclient.hget(app.keys.sorted_payloads("mail"), "send-2"))
    assert again == msgspec.structs.replace(
        old, id="send-2", level="critical", enqueued=again.enqueued, **fresh
    )


async def test_replay_leaves_alone_what_is_no_letter_or_a_letter_outside_its_jobs_partition(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app(partitions=4)

    @app.task
    def charge(order_id: str) -> None: ...

    job = Job(id="charge-1", task="charge", queue="default", level="normal")
    home = partition_of(job.id, 4)
    keys = app.store.layout.for_job(job.id)
    stray = rclient.xadd(app.store.layout.parts[(home + 1) % 4].dead(), letter_of(job))
    (letter,) = list_dead(app)
    assert letter.id == f"{(home + 1) % 4}/{stray.decode()}"
    (refused,) = replay(app, [letter])
    assert (refused.outcome, refused.detail) == ("bad", "the letter is not in its job's partition")
    assert list_dead(app) == [letter] and job_ended(rclient, keys, job.id)
    # Ids that name no letter of this namespace (no partition, or no stream id): gone, and
    # nothing sent, so one such id does not fail the round trip of every letter.
    for nonsense in (f"{home}/x-1", "9/1-0", "²/1-0", "1-0", f"{home}/1-0"):
        (result,) = replay(app, [dataclasses.replace(letter, id=nonsense)])
        assert (result.outcome, result.detail) == ("gone", "replayed or removed by someone else")
    assert list_dead(app) == [letter] and job_ended(rclient, keys, job.id)


CONCURRENT_LETTERS = 300


@pytest.mark.parametrize("start", ["together", "in chunks", "staggered"])
@pytest.mark.parametrize(("backend", "partitions"), LAYOUTS)
async def test_two_replays_of_the_same_letters_at_once_run_each_job_once(
    make_app: Callable[..., App], rclient: redis.Redis, backend: str, partitions: int, start: str
) -> None:
    """Two operators replay the same listing at once while a worker runs: each letter is
    replayed by exactly one of them, and the other is told it was gone.

    ``together``: both start at the same moment, with one call each. ``in chunks``: both
    start at the same moment and replay five letters a call, so their calls alternate.
    ``staggered``: the second starts once the first has replayed a third of the letters
    (or all of them), so its listing is stale for those, whose jobs may have run already.
    """
    runs: Counter[str] = Counter()
    # The worker's app and each operator's (a process of its own, with its own client).
    apps = [make_app(backend=backend, partitions=partitions) for _ in range(3)]
    for app in apps:

        @app.task(name="charge")
        async def charge(n: int) -> None:
            job = current_job()
            runs[job.job_id] += 1

    worker_app, *operators = apps
    jobs = [
        Job(id=f"charge-{n}", task="charge", queue="default", level="normal", args=[n], attempt=3)
        for n in range(CONCURRENT_LETTERS)
    ]
    bury_many(rclient, worker_app, jobs)
    letters = list_dead(worker_app)
    assert len(letters) == CONCURRENT_LETTERS
    barrier = threading.Barrier(len(operators))

    def operate(app: App, listing: list[DeadLetter], first: bool) -> list[Replayed]:
        if start == "staggered":
            if not first:
                left = CONCURRENT_LETTERS * 2 // 3
                wait_until_sync(lambda: count_dead(app) <= left, message="a third replayed")
            return replay(app, listing)
        barrier.wait(timeout=10)
        if start == "together":
            return replay(app, listing)
        # A few letters a call, so the two operators' calls alternate letter by letter.
        step = 5
        return [r for i in range(0, len(listing), step) for r in replay(app, listing[i : i + step])]

    worker = worker_for(worker_app, concurrency=20)
    async with running(worker):
        reports = await asyncio.gather(
            *(asyncio.to_thread(operate, app, letters, i == 0) for i, app in enumerate(operators))
        )
        replayed = [r.job_id for report in reports for r in report if r.outcome == "enqueued"]
        # Whatever was enqueued runs (twice over, were a job enqueued twice).
        await wait_until(lambda: worker.processed >= len(replayed))
    assert sorted(replayed) == sorted(job.id for job in jobs)
    assert runs == Counter({job.id: 1 for job in jobs})
    # Every letter is in both reports: enqueued by one, gone for the other.
    for report in reports:
        assert [r.id for r in report] == [letter.id for letter in letters]
    outcomes = Counter(tuple(sorted((a.outcome, b.outcome))) for a, b in zip(*reports, strict=True))
    assert outcomes == Counter({("enqueued", "gone"): CONCURRENT_LETTERS})
    assert {r.detail for report in reports for r in report if r.outcome == "gone"} <= {
        "replayed or removed by someone else"
    }
    assert count_dead(worker_app) == 0
    assert worker.processed == CONCURRENT_LETTERS


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"level": "urgent"}, "unknown priority 'urgent'; declared levels: critical, normal, low"),
        ({"queue": "reports"}, "queue 'reports' is not served by this app (served: default)"),
    ],
)
async def test_replay_to_an_undeclared_level_or_queue_is_an_error(
    make_app: Callable[..., App], rclient: redis.Redis, options: dict[str, str], message: str
) -> None:
    app = make_app()

    @app.task
    def charge(order_id: str) -> None: ...

    bury(rclient, app, Job(id="charge-1", task="charge", queue="default", level="normal"))
    with pytest.raises(ConfigError, match=re.escape(message)):
        replay(app, list_dead(app), **options)
    assert count_dead(app) == 1
    assert job_ended(rclient, app.keys, "charge-1")


def test_dead_letter_limits_default_to_100k_letters_and_30_days() -> None:
    app = App(namespace="limits")
    assert (app.dead_letter_max_len, app.dead_letter_max_age_ms) == (100_000, 30 * 86_400_000)
    assert trim_args(app) == [100_000, 30 * 86_400_000]
    unlimited = App(namespace="limits", dead_letter_max_len=None, dead_letter_max_age=None)
    assert trim_args(unlimited) == [0, 0]
    hour = App(namespace="limits", dead_letter_max_len=7, dead_letter_max_age=timedelta(hours=1))
    assert trim_args(hour) == [7, 3_600_000]
    assert trim_args(App(namespace="limits", dead_letter_max_age=2.5)) == [100_000, 2500]


@pytest.mark.parametrize(
    "options",
    [
        {"dead_letter_max_len": 0},
        {"dead_letter_max_len": -1},
        {"dead_letter_max_len": True},
        {"dead_letter_max_len": 1.5},
        {"dead_letter_max_age": -1},
        {"dead_letter_max_age": 0},
        {"dead_letter_max_age": "30d"},
    ],
)
def test_bad_dead_letter_limits_are_rejected(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=next(iter(options))):
        App(namespace="limits", **options)


def fill(rclient: redis.Redis, app: App, ids: list[str]) -> None:
    with rclient.pipeline(transaction=False) as pipe:
        for entry_id in ids:
            pipe.xadd(app.keys.dead(), {"job_id": entry_id, "job": b"{}"}, id=entry_id)
        pipe.execute()


def node_entries(rclient: redis.Redis) -> int:
    """Entries per stream node: approximate trimming removes whole nodes only."""
    return int(rclient.config_get("stream-node-max-entries")["stream-node-max-entries"])


async def test_trim_by_length_keeps_the_newest_and_works_off_a_backlog(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app(dead_letter_max_len=1000, dead_letter_max_age=None)
    ids = [f"{n}-0" for n in range(1, 25_001)]
    fill(rclient, app, ids)
    # More than one XTRIM's bounded work: trim() keeps calling until nothing goes.
    removed = trim(app)
    left = [letter.id for letter in list_dead(app, limit=100_000)]
    assert removed == 25_000 - len(left)
    assert 1000 <= len(left) < 1000 + node_entries(rclient)
    assert left == ids[-len(left) :]
    assert trim(app) == 0


async def test_trim_by_age_removes_letters_older_than_the_limit(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app(dead_letter_max_len=None, dead_letter_max_age=timedelta(days=1))
    ancient = [f"{n * 1000}-0" for n in range(1, 501)]  # 1970
    fill(rclient, app, ancient)
    recent = [bury(rclient, app, Job(id=f"j{n}", task="t", queue="q", level="low")) for n in "abc"]
    removed = trim(app)
    left = [letter.id for letter in list_dead(app)]
    assert removed == 503 - len(left)
    assert left[-3:] == recent
    assert len(left) - 3 < node_entries(rclient)  # only ancient letters sharing a node stay


async def test_no_limits_trim_nothing(make_app: Callable[..., App], rclient: redis.Redis) -> None:
    app = make_app(dead_letter_max_len=None, dead_letter_max_age=None)
    fill(rclient, app, [f"{n * 1000}-0" for n in range(1, 1001)])
    assert trim(app) == 0
    assert count_dead(app) == 1000


async def test_purge_of_a_large_queue_deletes_in_chunks(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    fill(rclient, app, [f"{n}-0" for n in range(1, 25_001)])
    assert purge(app) == 25_000
    assert not rclient.exists(app.keys.dead())
    assert purge(app) == 0


async def test_purge_of_an_empty_queue_is_zero(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    assert purge(app) == 0
    assert not rclient.exists(app.keys.dead())
