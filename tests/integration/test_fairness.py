"""Fair shares inside a level (``@app.task(key_by=...)``), on the streams backend: jobs are
served round-robin across their fairness keys, so one key's flood does not starve the
others; the level's jobs without a key take one turn together.

Each test fills the queue before the worker starts and records the order in which jobs
start, from inside the tasks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from conftest import most_at_once, running, wait_until, worker_for
from lockgate import App, CancelOutcome, ConfigError, current_job
from lockgate.backend.broker import Outgoing
from lockgate.backend.keys import fair_lane
from lockgate.core import codec
from lockgate.ops.inspect import queue_stats, stats_report
from lockgate.ops.queues import pause, purge


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_a_flooding_key_does_not_starve_the_others(
    make_app: Callable[..., App], backend: str
) -> None:
    """One key's 3,000 jobs queued first, then 4 keys' 20 each: the 80 start within the
    first few rounds, not after the flood (unkeyed: they would start last)."""
    app = make_app(backend=backend)
    started: list[str] = []

    @app.task(priority="low", key_by="tenant")
    async def report(tenant: str, n: int) -> None:
        started.append(tenant)

    app.enqueue_many([report.message("big", n) for n in range(3000)])
    app.enqueue_many([report.message(f"small{t}", n) for n in range(20) for t in range(4)])
    worker = worker_for(app, concurrency=8)
    async with running(worker):
        await wait_until(lambda: worker.processed == 3080, timeout=60)
    smalls = [i for i, tenant in enumerate(started) if tenant != "big"]
    assert len(smalls) == 80
    # Five keys share the turns: the small ones' 80 jobs are done within about 100 starts
    # (the reads' batches blur the rounds a little).
    assert max(smalls) < 130, max(smalls)
    assert sorted(started[:10]) != ["big"] * 10


async def test_unkeyed_jobs_take_one_turn_together(make_app: Callable[..., App]) -> None:
    """A level's jobs without a key (another task's, or an empty key) are one turn of the
    round, beside each key."""
    app = make_app()
    started: list[str] = []

    @app.task(priority="low", key_by=lambda tenant, n: tenant)
    async def keyed(tenant: str, n: int) -> None:
        started.append(tenant or "empty")

    @app.task(priority="low")
    async def plain(n: int) -> None:
        started.append("plain")

    app.enqueue_many([plain.message(n) for n in range(500)])
    app.enqueue_many([keyed.message("a", n) for n in range(50)])
    app.enqueue_many([keyed.message("", n) for n in range(50)])
    worker = worker_for(app, concurrency=4)
    async with running(worker):
        await wait_until(lambda: worker.processed == 600, timeout=60)
    first = started[:150]
    # Two turns a round: key "a" and the unkeyed (plain and empty-keyed jobs alike).
    assert 50 <= first.count("a") <= 75, first.count("a")
    assert first.count("plain") + first.count("empty") >= 70


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_job_info_reports_the_key(make_app: Callable[..., App], backend: str) -> None:
    app = make_app(backend=backend)

    @app.task(key_by="account_id", keep_result=60)
    async def charge(account_id: int, cents: int) -> str:
        return current_job().job_id

    waiting = charge.enqueue(42, 100)
    info = app.job(waiting.job_id)
    assert (info.status, info.key) == ("waiting", "42")
    worker = worker_for(app, concurrency=2)
    async with running(worker):
        assert await waiting.result_async(timeout=10) == waiting.job_id
    done = app.job(waiting.job_id)
    assert (done.status, done.key) == ("done", "42")


async def test_a_waiting_keyed_job_cancels_and_its_key_leaves_the_rotation(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    started: list[int] = []

    @app.task(key_by="tenant")
    async def job(tenant: str, n: int) -> None:
        started.append(n)

    first = job.enqueue("a", 1)
    second = job.enqueue("b", 2)
    assert app.cancel(first.job_id) is CancelOutcome.CANCELLED
    assert app.job(first.job_id).status == "cancelled"
    client, _ = await app.async_connection()
    rotation = app.keys.fair_rotation("default", "normal")
    assert await client.zrange(rotation, 0, -1) == [b"", b"=b"]
    assert not await client.exists(app.keys.fair_jobs("default", "normal", fair_lane("a")))
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.processed == 1)
    assert started == [2]
    assert not await client.exists(rotation)
    assert app.job(second.job_id).status == "done"
    assert app.job(first.job_id).key == "a"


async def test_keyed_retries_and_delays_come_back_through_their_key(
    make_app: Callable[..., App],
) -> None:
    from lockgate import RetryableError

    app = make_app()
    runs: list[int] = []

    @app.task(key_by="tenant", retries=2, backoff=0.01)
    async def flaky(tenant: str, n: int) -> None:
        runs.append(current_job().attempt)
        if current_job().attempt == 1:
            raise RetryableError("once more")

    result = flaky.enqueue("t", 1)
    later = flaky.message("t", 2, delay=0.2)
    app.enqueue_many([later])
    worker = worker_for(app, concurrency=2)
    async with running(worker):
        await wait_until(lambda: worker.processed == 2, timeout=20)
    assert sorted(runs) == [1, 1, 2, 2]
    assert app.job(result.job_id).status == "done"
    assert app.job(later.job.id).status == "done"


def test_key_by_must_name_a_parameter(make_app: Callable[..., App]) -> None:
    app = make_app()
    with pytest.raises(ConfigError, match=r"key_by='tenant' is not one of its parameters"):

        @app.task(key_by="tenant")
        def report(account: str) -> None: ...


async def test_stats_count_keyed_jobs_and_purge_removes_them(make_app: Callable[..., App]) -> None:
    app = make_app()

    @app.task(priority="low", key_by="tenant")
    async def keyed(tenant: str, n: int) -> None: ...

    @app.task(priority="low")
    async def plain(n: int) -> None: ...

    sent = app.enqueue_many([keyed.message(t, n) for t in "abc" for n in range(4)])
    app.enqueue_many([plain.message(n) for n in range(3)])
    (low,) = [row for row in (await queue_stats(app)).levels if row.level == "low"]
    assert (low.waiting, low.pending, low.length) == (15, 0, 15)
    assert low.oldest_wait_ms is not None
    assert await purge(app, "default", level="low", task=keyed.name) == 12
    (low,) = [row for row in (await queue_stats(app)).levels if row.level == "low"]
    assert low.waiting == 3
    assert {app.job(r.job_id).status for r in sent} == {"unknown"}
    client, _ = await app.async_connection()
    assert not await client.exists(app.keys.fair_rotation("default", "low"))
    again = keyed.enqueue("a", 1, job_id=sent[0].job_id)  # the purge freed its id
    assert again.created


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_key_concurrency_is_never_exceeded_and_holds_back_nothing_else(
    make_app: Callable[..., App], backend: str
) -> None:
    """Limit 2 per key, 16 slots in the worker: each key runs at most 2 at once (a ledger
    of start and end stamps), all of them run, and another task's jobs of the same key and
    the jobs of other keys are not held back by a key at its limit."""
    app = make_app(backend=backend)
    ledger: dict[str, list[tuple[float, float]]] = {}
    order: list[str] = []

    @app.task(priority="low", key_by="tenant", key_concurrency=2)
    async def call_partner(tenant: str, n: int) -> None:
        order.append(f"call {tenant}")
        start = time.monotonic()
        await asyncio.sleep(0.02)
        ledger.setdefault(tenant, []).append((start, time.monotonic()))

    @app.task(priority="low", key_by="tenant")
    async def note(tenant: str, n: int) -> None:
        order.append(f"note {tenant}")

    app.enqueue_many([call_partner.message(t, n) for t in ("a", "b", "c") for n in range(30)])
    app.enqueue_many([note.message("a", n) for n in range(5)])
    worker = worker_for(app, concurrency=16)
    async with running(worker):
        await wait_until(lambda: worker.processed == 95, timeout=60)
    assert {t: len(spans) for t, spans in ledger.items()} == {"a": 30, "b": 30, "c": 30}
    assert {t: most_at_once(spans) for t, spans in ledger.items()} == {"a": 2, "b": 2, "c": 2}
    # The five notes of key "a" did not wait for its 30 limited calls, two at a time.
    last_note = max(i for i, started in enumerate(order) if started == "note a")
    calls_before = order[:last_note].count("call a")
    assert calls_before <= 10, order
    client, _ = await app.async_connection()
    slots = [app.keys.fair_slots(call_partner.name, t) for t in "abc"]
    assert [await client.zcard(key) for key in slots] == [0, 0, 0]
    assert await client.hlen(app.keys.fair_holds("default", "low")) == 0
    if backend == "sorted":  # no job left parked (lua/_fair_sorted.lua)
        assert await client.zcard(app.keys.sorted_parked_sets("default")) == 0
        assert int(await client.hget(app.keys.sorted_heads("default"), "") or 0) == 0


def test_key_concurrency_needs_key_by(make_app: Callable[..., App]) -> None:
    app = make_app()
    with pytest.raises(ConfigError, match="needs key_by"):
        app.task(key_concurrency=2)(lambda n: None)
    with pytest.raises(ConfigError, match="whole number >= 1"):
        app.task(key_by="n", key_concurrency=0)(lambda n: None)


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_key_rate_limit_spaces_each_keys_starts_and_spends_no_attempt(
    make_app: Callable[..., App], backend: str
) -> None:
    """``key_rate_limit="5/s"``: the limiter spaces each key's reserved starts 200 ms
    apart, and a job never starts before its reservation, so a key's five starts span at
    least 0.8 s (less the first one's few ms); the keys do not share a limit (their starts
    interleave); no put-back spends an attempt."""
    app = make_app(backend=backend)
    starts: dict[str, list[float]] = {}
    order: list[str] = []

    @app.task(key_by="tenant", key_rate_limit="5/s")
    async def sync_contacts(tenant: str, n: int) -> None:
        assert current_job().attempt == 1
        starts.setdefault(tenant, []).append(time.monotonic())
        order.append(tenant)

    sent = app.enqueue_many([sync_contacts.message(t, n) for n in range(5) for t in "ab"])
    worker = worker_for(app, concurrency=8)
    async with running(worker):
        await wait_until(lambda: worker.processed == 10, timeout=30)
    for tenant in "ab":
        assert len(starts[tenant]) == 5
        assert starts[tenant][-1] - starts[tenant][0] > 0.75, (tenant, starts[tenant])
    assert order.index("b") < len(order) - 1 - order[::-1].index("a")  # interleaved
    assert {app.job(r.job_id).attempts for r in sent} == {1}


def test_key_rate_limit_is_checked_like_rate_limit(make_app: Callable[..., App]) -> None:
    app = make_app()
    with pytest.raises(ConfigError, match="key_rate_limit must look like"):
        app.task(key_by="n", key_rate_limit="fast")(lambda n: None)
    with pytest.raises(ConfigError, match=r"key_rate_limit limits .* needs key_by"):
        app.task(key_rate_limit="1/s")(lambda n: None)


async def test_stats_show_the_busiest_keys_with_their_running_jobs_and_limits(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    release = asyncio.Event()
    running_now: list[str] = []

    @app.task(priority="low", key_by="tenant", key_concurrency=2)
    async def export(tenant: str, n: int) -> None:
        running_now.append(tenant)
        await release.wait()

    app.enqueue_many([export.message("big", n) for n in range(20)])
    app.enqueue_many([export.message("small", n) for n in range(3)])
    worker = worker_for(app, concurrency=8)
    async with running(worker):
        await wait_until(lambda: len(running_now) == 4)
        report = await stats_report(app)
        rows = {(row.key, row.waiting): (row.running, row.limits) for row in report.keys}
        release.set()
        await wait_until(lambda: worker.processed == 23, timeout=30)
    assert rows == {
        ("big", 18): ({export.name: 2}, {export.name: 2}),
        ("small", 1): ({export.name: 2}, {export.name: 2}),
    }
    assert [row.key for row in report.keys] == ["big", "small"]  # busiest first
    assert report.as_dict()["busiest_keys"][0]["waiting"] == 18
    assert (await stats_report(app)).keys == []


async def test_a_queue_named_fair_is_a_queue_like_any_other(make_app: Callable[..., App]) -> None:
    app = make_app()
    started: list[str] = []

    @app.task(queue="fair")
    async def plain(n: int) -> None:
        started.append("plain")

    @app.task(queue="fair", key_by="tenant")
    async def keyed(tenant: str) -> None:
        started.append(tenant)

    app.enqueue_many([plain.message(1), keyed.message("a"), keyed.message("b")])
    assert await purge(app, "fair", task=plain.name) == 1
    worker = worker_for(app, concurrency=2, queues=["fair"])
    async with running(worker):
        await wait_until(lambda: worker.processed == 2)
    assert sorted(started) == ["a", "b"]


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_jobs_without_a_key_flow_while_every_key_waits_for_a_slot(
    make_app: Callable[..., App], backend: str
) -> None:
    """Forty keys at their limit of one (their jobs hold their slots until released), a
    second job of each waiting, and plain jobs of the same level: the plain jobs all run
    meanwhile, and the held-back ones run once the slots come back."""
    app = make_app(backend=backend)
    release = asyncio.Event()
    plain_done: list[int] = []

    @app.task(priority="low", key_by="tenant", key_concurrency=1)
    async def hold(tenant: str, n: int) -> None:
        await release.wait()

    @app.task(priority="low")
    async def plain(n: int) -> None:
        plain_done.append(n)

    app.enqueue_many([hold.message(f"t{k}", n) for n in range(2) for k in range(40)])
    app.enqueue_many([plain.message(n) for n in range(60)])
    worker = worker_for(app, concurrency=48)
    async with running(worker):
        await wait_until(lambda: len(plain_done) == 60, timeout=30)
        await wait_until(lambda: worker.processed == 60)  # the held jobs hold their slots
        release.set()
        await wait_until(lambda: worker.processed == 140, timeout=30)


async def test_a_keyed_enqueue_retried_after_a_lost_reply_answers_as_the_first(
    make_app: Callable[..., App],
) -> None:
    """redis-py sends an enqueue again when its connection failed after the call: the
    second call finds the very same job where the first put it, in its lane or moved on
    to the delivery stream, and answers with an entry, not "duplicate" (0)."""
    app = make_app()
    release = asyncio.Event()

    @app.task(key_by="tenant", key_concurrency=1)
    async def job(tenant: str) -> None:
        await release.wait()

    message = job.message("acme", job_id="once")
    outgoing = Outgoing(message.job, codec.encode(message.job), limited=job.name)
    (call,) = app.store.broker.plan_enqueue([outgoing]).calls

    def sent() -> Any:
        return app.store.run([call])[0][0]

    assert sent() != 0  # queued in its lane
    assert sent() != 0  # the same job again: found there
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: app.job("once").status == "running")
        assert sent() != 0  # moved to the delivery stream: found there
        assert job.enqueue("acme", job_id="once").created is False  # another job: a duplicate
        release.set()
        await wait_until(lambda: worker.processed == 1)


async def test_keyed_jobs_live_in_their_keys_partition(
    make_app: Callable[..., App], rclient: Any
) -> None:
    """With partitions, a keyed job lives in its key's partition (so a key's jobs, lane
    and slots share a hash tag): every job runs once, the flood does not starve the few,
    and ``app.job``, ``cancel`` and ``result`` find a job by its id alone."""
    app = make_app(partitions=4)
    ran: list[str] = []
    tenants: list[str] = []

    @app.task(priority="low", key_by="tenant", keep_result=60)
    async def report(tenant: str, n: int) -> str:
        ran.append(current_job().job_id)
        tenants.append(tenant)
        return f"{tenant}{n}"

    layout = app.store.layout
    sent = app.enqueue_many([report.message(t, n) for t in ("big", "a", "b") for n in range(40)])
    for result, tenant in zip(sent, ["big"] * 40 + ["a"] * 40 + ["b"] * 40, strict=True):
        home = layout.for_job(result.job_id, tenant)
        assert rclient.exists(home.job(result.job_id)), (result.job_id, tenant)
    moved = next(
        r for r in sent[40:80] if layout.for_job(r.job_id) != layout.for_job(r.job_id, "a")
    )  # a job whose id would put it in another partition than its key's
    assert app.job(moved.job_id).status == "waiting"
    assert app.job(moved.job_id).key == "a"
    assert app.cancel(moved.job_id)
    assert app.job(moved.job_id).status == "cancelled"
    worker = worker_for(app, concurrency=4)
    async with running(worker):
        await wait_until(lambda: worker.processed == 119, timeout=30)
        assert await sent[-1].result_async(timeout=10) == "b39"
    assert sorted(ran) == sorted(r.job_id for r in sent if r.job_id != moved.job_id)
    assert {app.job(r.job_id).key for r in sent[:40]} == {"big"}
    # All three keys share turns wherever they live: the few are not behind the flood.
    assert tenants[:60].count("big") < 40


async def test_key_concurrency_with_partitions(make_app: Callable[..., App]) -> None:
    """``key_concurrency`` holds in a partitioned namespace: a key's jobs and slots live in
    its key's partition."""
    app = make_app(partitions=4)
    spans: dict[str, list[tuple[float, float]]] = {}

    @app.task(key_by="tenant", key_concurrency=2)
    async def export(tenant: str, n: int) -> None:
        start = time.monotonic()
        await asyncio.sleep(0.02)
        spans.setdefault(tenant, []).append((start, time.monotonic()))

    app.enqueue_many([export.message(t, n) for t in "abcd" for n in range(12)])
    worker = worker_for(app, concurrency=16)
    async with running(worker):
        await wait_until(lambda: worker.processed == 48, timeout=30)
    assert {t: len(s) for t, s in spans.items()} == dict.fromkeys("abcd", 12)
    assert max(most_at_once(s) for s in spans.values()) == 2


async def test_sorted_backend_parked_jobs_are_counted_cancelled_and_purged(
    make_app: Callable[..., App],
) -> None:
    """Sorted backend, ``key_concurrency=1``: a key's jobs taken while it is at its limit
    are parked (counted as waiting, "waiting" to ``app.job``), a cancel takes one out, a
    purge the rest; the running one's settle leaves nothing parked behind."""
    app = make_app(backend="sorted")
    release = asyncio.Event()
    started: list[int] = []

    @app.task(priority="low", key_by="tenant", key_concurrency=1)
    async def hold(tenant: str, n: int) -> None:
        started.append(n)
        await release.wait()

    sent = app.enqueue_many([hold.message("acme", n) for n in range(6)])
    client, _ = await app.async_connection()
    parked = app.keys.sorted_parked("default", hold.name, "acme")
    worker = worker_for(app, concurrency=4)
    async with running(worker):
        await wait_until(lambda: started == [0])
        await wait_until(lambda: app.client().zcard(parked) >= 1)
        assert (await queue_stats(app)).levels[0].waiting == 5
        parked_id = next(r.job_id for r in sent if app.client().zscore(parked, r.job_id))
        assert app.job(parked_id).status == "waiting"
        assert app.cancel(parked_id)
        assert await purge(app, "default") == 4
        assert (await queue_stats(app)).levels[0].waiting == 0
        release.set()
        await wait_until(lambda: worker.processed == 1)
    assert started == [0]
    assert await client.zcard(parked) == 0
    assert await client.zcard(app.keys.sorted_parked_sets("default")) == 0
    assert await client.zcard(app.keys.fair_slots(hold.name, "acme")) == 0


async def test_sorted_backend_lanes_count_cancel_purge_and_delay(
    make_app: Callable[..., App],
) -> None:
    """Sorted backend: a key's jobs behind its head are counted as waiting, report
    "waiting", can be cancelled (the head too: the next one takes its place), come back
    through the lane when delayed, and go with a purge; nothing is left behind."""
    app = make_app(backend="sorted")
    started: list[str] = []

    @app.task(priority="low", key_by="tenant")
    async def report(tenant: str, n: int) -> None:
        started.append(f"{tenant}{n}")

    sent = app.enqueue_many([report.message("big", n) for n in range(10)])
    app.enqueue_many([report.message("small", n, delay=0.05) for n in range(3)])
    assert (await queue_stats(app)).levels[0].waiting == 10
    assert app.job(sent[5].job_id).status == "waiting"
    assert app.cancel(sent[0].job_id)  # the head: big1 takes its place
    assert app.cancel(sent[5].job_id)  # in the lane
    assert (await queue_stats(app)).levels[0].waiting == 8
    await asyncio.sleep(0.1)  # the scenario's delay: the small ones fall due
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: len(started) == 11, timeout=30)
    big = [name for name in started if name.startswith("big")]
    assert big == [f"big{n}" for n in range(1, 10) if n != 5]
    small = [i for i, name in enumerate(started) if name.startswith("small")]
    assert small and max(small) < 8, started  # they took turns with big's next jobs
    again = app.enqueue_many([report.message(t, n) for t in "xy" for n in range(40)])
    assert await purge(app, "default") == 80
    assert (await queue_stats(app)).levels[0].waiting == 0
    assert all(app.job(r.job_id).status == "unknown" for r in again)
    client = app.client()
    assert not client.exists(app.keys.sorted_lane("default", "low", "x"))
    assert int(client.hget(app.keys.sorted_heads("default"), "") or 0) == 0


async def test_sorted_backend_delayed_jobs_join_their_lane_with_their_level_boost_exactly(
    make_app: Callable[..., App],
) -> None:
    """Sorted backend: a delayed keyed job that falls due behind its key's head joins the
    key's lane scored so that the score less its rank is its level's boost to the
    microsecond; a rounded due time made the next head rank up to 1 ms late, behind a
    key whose head was taken just after (a failed CI run)."""
    app = make_app(backend="sorted")

    @app.task(priority="low", key_by="tenant")
    async def report(tenant: str, n: int) -> None:
        pass

    await pause(app, "default")
    app.enqueue_many([report.message("a", 0)])
    sent = app.enqueue_many([report.message("a", n, delay=0.02) for n in range(1, 4)])
    lane = app.keys.sorted_lane("default", "low", "a")
    client = app.client()
    worker = worker_for(app, concurrency=1)  # paused: its takes only move due jobs
    async with running(worker):
        await wait_until(lambda: client.zcard(lane) == 3)
    boost = app.store.broker.boost("low")
    ranks = app.keys.sorted_keys("default").ranks
    for result in sent:
        score = float(client.zscore(lane, result.job_id))
        assert round(score) - int(client.hget(ranks, result.job_id)) == boost


async def test_sorted_backend_stats_show_the_busiest_keys(make_app: Callable[..., App]) -> None:
    """Sorted backend: the busiest keys from the heads in the ranked set, the jobs behind
    them in their lanes, and the jobs in flight per task."""
    app = make_app(backend="sorted")
    release = asyncio.Event()
    running_now: list[str] = []

    @app.task(priority="low", key_by="tenant")
    async def export(tenant: str, n: int) -> None:
        running_now.append(tenant)
        await release.wait()

    app.enqueue_many([export.message("big", n) for n in range(20)])
    app.enqueue_many([export.message("small", n) for n in range(3)])
    worker = worker_for(app, concurrency=2)
    async with running(worker):
        await wait_until(lambda: len(running_now) == 2)
        report = await stats_report(app)
        release.set()
        await wait_until(lambda: worker.processed == 23, timeout=30)
    rows = {row.key: (row.waiting, row.running) for row in report.keys}
    assert rows == {"big": (19, {export.name: 1}), "small": (2, {export.name: 1})}
    assert [row.key for row in report.keys] == ["big", "small"]
    assert (await stats_report(app)).keys == []


async def test_an_idempotent_keyed_job_in_a_partitioned_namespace_runs_once(
    make_app: Callable[..., App],
) -> None:
    """With partitions, an ``idempotent=True`` keyed job's claim lives with the job, in
    its key's partition: its settle marks it done (one script, one slot), and the same id
    enqueued again after it ended is acknowledged without running."""
    app = make_app(partitions=4)
    ran: list[int] = []

    @app.task(idempotent=True, key_by="tenant")
    async def charge(tenant: str, n: int) -> None:
        ran.append(n)

    layout = app.store.layout
    job_id = next(
        f"charge-{n}" for n in range(100)
        if layout.for_job(f"charge-{n}") != layout.for_job(f"charge-{n}", "acme")
    )  # fmt: skip
    worker = worker_for(app, concurrency=2)
    async with running(worker):
        assert charge.enqueue("acme", 1, job_id=job_id).created
        await wait_until(lambda: app.job(job_id).status == "done")
        assert charge.enqueue("acme", 1, job_id=job_id).created  # the id is free again
        await wait_until(lambda: worker.processed == 2)
    assert ran == [1]
    assert worker.dead == 0


async def test_sorted_parked_jobs_come_back_when_the_limit_is_gone(
    make_app: Callable[..., App],
) -> None:
    """Sorted backend: jobs parked under ``key_concurrency=1`` go back to the queue, and
    run, once a deploy drops the limit (its workers publish none for the task)."""
    app = make_app(backend="sorted")
    release = asyncio.Event()
    started: list[int] = []

    @app.task(name="hold", priority="low", key_by="tenant", key_concurrency=1)
    async def hold(tenant: str, n: int) -> None:
        started.append(n)
        await release.wait()

    app.enqueue_many([hold.message("acme", n) for n in range(4)])
    parked = app.keys.sorted_parked("default", "hold", "acme")
    # A short grace: the stop abandons the held run (it stays in flight, with its slot).
    async with running(worker_for(app, concurrency=4, grace_period=0.2)):
        await wait_until(lambda: started == [0])
        await wait_until(lambda: app.client().zcard(parked) == 3)
    assert app.client().zcard(parked) == 3  # the stop left them parked

    redeployed = make_app(backend="sorted")

    @redeployed.task(name="hold", priority="low", key_by="tenant")
    async def hold_unlimited(tenant: str, n: int) -> None:
        started.append(n)

    release.set()
    worker = worker_for(redeployed, concurrency=4)
    async with running(worker):
        await wait_until(lambda: sorted(started) == [0, 1, 2, 3], timeout=30)
    assert app.client().zcard(parked) == 0
    assert app.client().zcard(app.keys.sorted_parked_sets("default")) == 0
