"""What lockgate 0.1 left in Redis is honoured by this version's worker (issue 8, upgrade).

Each test writes the state a 0.1 deployment leaves behind with raw commands, value for
value as 0.1's code wrote it (``git show 85bc0e9:src/lockgate/...``: ``codec.py`` for the
job JSON, ``lua/enqueue_stream.lua``, ``lua/enqueue_sorted.lua``, ``lua/take_sorted.lua``
and ``lua/idem_settle.lua`` for the keys and values), then runs the new worker on it:

- 0.1 keyed the claim of an ``idempotent=True`` task's job ``idem:job:{id}`` (0.2
  ``idem:job:{task}:{id}``, now ``idem:job/{bytes}:{task}:{id}``; 0.2's names are tested
  in ``test_names.py``): its done marker ``d:<token>`` still acknowledges the job
  without running it, and its live claim ``c:<token>`` still holds the job back, without
  a dead letter or a spent attempt, until it lapses; a job the new worker runs is marked
  done in its bucket, and with ``App(legacy_markers=True)`` also under 0.2's and 0.1's
  names as those releases read them (tagged with the task), so their workers skip it
  too; without, nothing is written under the older names;
- queued, delayed and pending stream entries and sorted-backend jobs written by 0.1 (no
  ``owners`` entry, a ``wakeup`` list instead of the wake stream) each run exactly once;
- a payload with fields this version does not know (a newer producer's) still runs.

Runs are recorded in Redis, not in memory: a redelivered job runs in a child process.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis

from conftest import inspection_client, running, unacked_reads, wait_until, worker_for
from lockgate import App, current_job
from lockgate.backend.keys import Keys
from lockgate.core.codec import decode
from lockgate.core.policy import aging_boost_us
from lockgate.ops.deadletter import list_dead

# A Unix time from 0.1's days: the producer clock's `enqueued` field.
OLD_ENQUEUED = 1764428579.5
# The aging 0.1's App used by default (sorted backend rank boosts).
OLD_AGING = 60.0
DONE_TTL_MS = 86_400_000  # 0.1's default idempotency TTL


def v01_job(
    job_id: str,
    task: str,
    *args: Any,
    level: str = "normal",
    attempt: int = 1,
    kwargs: dict[str, Any] | None = None,
) -> bytes:
    """A job as 0.1's codec encoded it: msgspec JSON, fields in declaration order
    (id, task, queue, level, args, kwargs, attempt, enqueued), defaults omitted."""
    fields: dict[str, Any] = {"id": job_id, "task": task, "queue": "default", "level": level}
    if args:
        fields["args"] = list(args)
    if kwargs:
        fields["kwargs"] = kwargs
    if attempt != 1:
        fields["attempt"] = attempt
    fields["enqueued"] = OLD_ENQUEUED
    return json.dumps(fields, separators=(",", ":")).encode()


def server_ms(rclient: redis.Redis) -> int:
    seconds, micros = rclient.time()
    return int(seconds) * 1000 + int(micros) // 1000


def v01_enqueue_stream(rclient: redis.Redis, keys: Keys, data: bytes, level: str) -> bytes:
    """0.1's enqueue_stream.lua, delay 0: XADD field ``job``; the marker holds the entry id."""
    job_id = json.loads(data)["id"]
    entry_id = rclient.xadd(keys.stream("default", level), {"job": data})
    rclient.set(keys.job(job_id), entry_id)
    return bytes(entry_id)


def v01_enqueue_delayed(
    rclient: redis.Redis, keys: Keys, data: bytes, level: str, delay_ms: int
) -> None:
    """0.1's enqueue_stream.lua with a delay: the JSON itself in the delayed zset, scored
    by the server's clock + delay; the marker says ``delayed``. No wake stream in 0.1."""
    job_id = json.loads(data)["id"]
    rclient.zadd(keys.delayed("default", level), {data: server_ms(rclient) + delay_ms})
    rclient.set(keys.job(job_id), "delayed")


def v01_claim(rclient: redis.Redis, keys: Keys, job_id: str, state: str, px: int) -> bytes:
    """0.1's job claim (idem_claim.lua ``c:<token>``, idem_settle.lua done ``d:<token>``)."""
    value = f"{state}:{uuid.uuid4().hex}".encode()
    rclient.set(keys.claim(f"job:{job_id}"), value, px=px)
    return value


def v01_enqueue_sorted(
    rclient: redis.Redis, app: App, data: bytes, *, delay_ms: int = 0
) -> tuple[str, str]:
    """0.1's enqueue_sorted.lua for one job: (job id, rank)."""
    job = json.loads(data)
    job_id, level = job["id"], job["level"]
    q = app.keys.sorted_keys("default")
    seconds, micros = rclient.time()
    stamp = int(seconds) * 1_000_000 + int(micros)
    now_ms = stamp // 1000
    stamp = max(stamp, int(rclient.get(q.clock) or 0) + 1)
    boost = aging_boost_us(app.levels.index(level), len(app.levels.names), OLD_AGING)
    rank = f"{stamp + delay_ms * 1000 - boost:.0f}"
    assert rclient.set(app.keys.job(job_id), "sorted", nx=True)
    if delay_ms > 0:
        rclient.zadd(q.delayed, {job_id: now_ms + delay_ms})
    else:
        rclient.zadd(q.waiting, {job_id: int(rank)})
    rclient.hset(q.payloads, job_id, data)
    rclient.hset(q.ranks, job_id, rank)
    rclient.set(q.clock, str(stamp))
    wakeup = f"{app.keys.prefix}:sorted:default:wakeup"  # 0.1's signal list
    rclient.lpush(wakeup, 1)
    rclient.ltrim(wakeup, 0, 63)
    return job_id, rank


def v01_take_sorted(rclient: redis.Redis, app: App, job_id: str, deadline_ms: int) -> None:
    """0.1's take_sorted.lua for one job: waiting -> inflight scored by the lease deadline,
    one delivery counted, and no owner recorded (0.1 had no ``owners`` hash)."""
    q = app.keys.sorted_keys("default")
    assert rclient.zrem(q.waiting, job_id) == 1
    rclient.zadd(q.inflight, {job_id: deadline_ms})
    rclient.hincrby(q.deliveries, job_id, 1)


def runs_key(app: App) -> str:
    return f"{app.keys.prefix}:test:runs"


def runs(rclient: redis.Redis, app: App) -> list[str]:
    return sorted(r.decode() for r in rclient.lrange(runs_key(app), 0, -1))


def recording_app(make_app: Callable[..., App], **options: Any) -> App:
    """An app whose tasks note ``job id:attempt`` in Redis (from a child process too);
    ``charge``, an ``idempotent=True`` task, adds whether another owner's claim was still
    under the job's 0.1 name while it ran (``held``) or not (``free``: absent, or the
    mirror of this run's own claim, which 0.1 workers of a rolling deploy must see)."""
    app = make_app(**options)

    def write_run(legacy: str | None = None, mine: str | None = None) -> None:
        # A client per run, not app.client(): a redelivered job runs in a forked child,
        # and the shared client's pool lock may be held at the fork by another task's
        # thread; redis-py's reset() in the child then waits on it forever.
        job = current_job()
        with inspection_client(app.redis_url) as client:
            text = f"{job.job_id}:{job.attempt}"
            if legacy is not None:
                other = client.get(legacy)
                text += ":held" if other and other != client.get(mine or "") else ":free"
            client.rpush(runs_key(app), text)

    @app.task
    def record(n: int, note: str = "") -> None:
        write_run()

    @app.task(idempotent=True)
    def charge(order: str) -> None:
        job = current_job()
        write_run(
            app.keys.claim(Keys.legacy_job_claim_name(job.job_id)),
            app.keys.claim(Keys.job_claim_name(job.task, job.job_id)),
        )

    return app


def marked_done(
    rclient: redis.Redis, keys: Keys, task: str, job_id: str, legacy_markers: bool
) -> bool:
    """The new worker marked the job done in its bucket. With legacy_markers also, tagged
    with the task, under its 0.2 name and its 0.1 name (so 0.2 and 0.1 workers of a
    rolling deploy skip the job as well); without, neither is written."""
    claim = keys.claim(Keys.job_claim_name(task, job_id))
    bucketed = rclient.zscore(*keys.done_marker(claim)) is not None
    older = rclient.get(keys.claim(Keys.older_job_claim_name(task, job_id)))
    legacy = rclient.get(keys.claim(Keys.legacy_job_claim_name(job_id)))
    if not legacy_markers:
        return bucketed and older is None and legacy is None
    return (
        bucketed
        and not rclient.exists(claim)
        and older is not None
        and older.startswith(b"d:")
        and older.endswith(b":t:" + task.encode())
        and legacy == older
    )


def streams_left(rclient: redis.Redis, app: App) -> int:
    """Entries queued, delayed or pending on every stream of the app's default queue."""
    left = 0
    for level in app.levels.names:
        stream = app.keys.stream("default", level)
        left += rclient.xlen(stream) + rclient.zcard(app.keys.delayed("default", level))
        if rclient.exists(stream):
            for group in rclient.xinfo_groups(stream):
                left += group["pending"]
    return left


def job_markers(rclient: redis.Redis, app: App) -> list[bytes]:
    return list(rclient.scan_iter(match=f"{app.keys.prefix}:job:*", count=10_000))


def waiting(rclient: redis.Redis, app: App) -> list[dict[str, Any]]:
    """Jobs of the normal level put back to wait on a busy claim (in its stream or delayed)."""
    stream = app.keys.stream("default", "normal")
    payloads = [fields[b"job"] for _, fields in rclient.xrange(stream)]
    payloads += rclient.zrange(app.keys.delayed("default", "normal"), 0, -1)
    return [job for job in map(json.loads, payloads) if job.get("waits", 0) > 0]


def test_the_0_1_job_bytes_are_the_ones_0_1_wrote() -> None:
    # Printed by 0.1's codec.encode (git show 85bc0e9:src/lockgate/codec.py).
    assert v01_job("old-1", "record", 1) == (
        b'{"id":"old-1","task":"record","queue":"default","level":"normal","args":[1],'
        b'"enqueued":1764428579.5}'
    )
    assert v01_job("old-1", "record", "a", level="low", attempt=2, kwargs={"k": 2}) == (
        b'{"id":"old-1","task":"record","queue":"default","level":"low","args":["a"],'
        b'"kwargs":{"k":2},"attempt":2,"enqueued":1764428579.5}'
    )


async def test_a_0_1_done_marker_acknowledges_the_job_without_running_it(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = recording_app(make_app)
    keys = app.keys
    # One job enqueued by the new producer, one left queued by 0.1; both were done by 0.1.
    markers = {
        "paid-new": v01_claim(rclient, keys, "paid-new", "d", DONE_TTL_MS),
        "paid-old": v01_claim(rclient, keys, "paid-old", "d", DONE_TTL_MS),
    }
    app.tasks["charge"].enqueue("A1", job_id="paid-new")
    v01_enqueue_stream(rclient, keys, v01_job("paid-old", "charge", "A2"), "normal")
    worker = worker_for(app, concurrency=2)
    async with running(worker):
        await wait_until(lambda: worker.processed == 2, message="both acknowledged")
    assert runs(rclient, app) == []
    assert streams_left(rclient, app) == 0
    assert job_markers(rclient, app) == []
    for job_id, marker in markers.items():
        assert (
            rclient.get(keys.claim(Keys.legacy_job_claim_name(job_id))) == marker
        )  # left as 0.1 wrote it
        assert not rclient.exists(keys.claim(Keys.job_claim_name("charge", job_id)))
    assert list_dead(app) == []
    assert (worker.retried, worker.dead) == (0, 0)


@pytest.mark.parametrize("legacy_markers", [False, True])
async def test_a_0_1_live_claim_holds_the_job_back_until_it_lapses_then_it_runs_once(
    make_app: Callable[..., App], rclient: redis.Redis, legacy_markers: bool
) -> None:
    app = recording_app(make_app, legacy_markers=legacy_markers)
    keys = app.keys
    legacy = keys.claim(Keys.legacy_job_claim_name("busy-1"))
    v01_claim(rclient, keys, "busy-1", "c", 2_500)  # a 0.1 worker runs it right now
    app.tasks["charge"].enqueue("B1", job_id="busy-1")
    worker = worker_for(app, concurrency=2)
    async with running(worker):
        # It met the claim and was put back to wait (the same attempt, one more wait).
        await wait_until(
            lambda: runs(rclient, app) or waiting(rclient, app),
            message="the job put back to wait on the 0.1 claim",
        )
        assert runs(rclient, app) == []
        assert rclient.exists(legacy)
        assert [(j["id"], j.get("attempt", 1)) for j in waiting(rclient, app)] == [("busy-1", 1)]
        await wait_until(lambda: runs(rclient, app), message="the job ran after the lapse")
        await wait_until(lambda: streams_left(rclient, app) == 0 and not job_markers(rclient, app))
    # The run saw the 0.1 claim gone: it never ran beside it; no attempt was spent.
    assert runs(rclient, app) == ["busy-1:1:free"]
    assert list_dead(app) == []
    assert (worker.processed, worker.retried, worker.dead) == (1, 0, 0)
    assert marked_done(rclient, keys, "charge", "busy-1", legacy_markers)


@pytest.mark.parametrize("legacy_markers", [False, True])
async def test_stream_jobs_queued_delayed_and_pending_under_0_1_each_run_once(
    make_app: Callable[..., App], rclient: redis.Redis, legacy_markers: bool
) -> None:
    app = recording_app(make_app, legacy_markers=legacy_markers)
    keys = app.keys
    # A 0.1 worker that is gone holds one entry: read, never acknowledged.
    pending = v01_job("old-pending", "record", 1, level="critical")
    entry_id = v01_enqueue_stream(rclient, keys, pending, "critical")
    taken = unacked_reads(rclient, keys.stream("default", "critical"), "old-4242-a1b2c3")
    assert taken == [entry_id]
    v01_enqueue_stream(rclient, keys, v01_job("old-critical", "record", 2, level="critical"),
                       "critical")  # fmt: skip
    v01_enqueue_stream(rclient, keys, v01_job("old-normal", "charge", "C1"), "normal")
    retry = v01_job("old-retry", "record", 3, level="low", attempt=2, kwargs={"note": "x"})
    v01_enqueue_stream(rclient, keys, retry, "low")  # a 0.1 retry already moved back
    v01_enqueue_delayed(rclient, keys, v01_job("old-delayed", "record", 4), "normal", 300)
    v01_enqueue_delayed(rclient, keys, v01_job("old-due", "charge", "C2", level="low"), "low", 1)
    expected = [
        "old-critical:1", "old-delayed:1", "old-due:1:free", "old-normal:1:free",
        "old-pending:1", "old-retry:2",
    ]  # fmt: skip
    worker = worker_for(app, concurrency=4, visibility_timeout=0.5)
    async with running(worker):
        await wait_until(lambda: len(runs(rclient, app)) >= len(expected))
        await wait_until(lambda: streams_left(rclient, app) == 0 and not job_markers(rclient, app))
    assert runs(rclient, app) == sorted(expected)
    assert worker.processed == len(expected)
    assert list_dead(app) == []
    for job_id in ("old-normal", "old-due"):
        assert marked_done(rclient, keys, "charge", job_id, legacy_markers)


@pytest.mark.parametrize("legacy_markers", [False, True])
async def test_sorted_jobs_queued_delayed_and_in_flight_under_0_1_each_run_once(
    make_app: Callable[..., App], rclient: redis.Redis, legacy_markers: bool
) -> None:
    app = recording_app(make_app, backend="sorted", legacy_markers=legacy_markers)
    q = app.keys.sorted_keys("default")
    v01_enqueue_sorted(rclient, app, v01_job("old-queued", "record", 1))
    v01_enqueue_sorted(rclient, app, v01_job("old-critical", "charge", "D1", level="critical"))
    v01_enqueue_sorted(rclient, app, v01_job("old-delayed", "record", 2, level="low"),
                       delay_ms=300)  # fmt: skip
    # A 0.1 worker took this one and died: its lease lapsed a second ago, no owner entry.
    inflight, _ = v01_enqueue_sorted(rclient, app, v01_job("old-inflight", "charge", "D2"))
    v01_take_sorted(rclient, app, inflight, server_ms(rclient) - 1_000)
    assert not rclient.exists(q.owners)
    expected = ["old-critical:1:free", "old-delayed:1", "old-inflight:1:free", "old-queued:1"]
    # The first worker of this release on the namespace takes nobody for dead before a
    # whole visibility timeout of beats (lockgate.worker.liveness): a short one, for the test.
    worker = worker_for(app, concurrency=4, visibility_timeout=1.0)
    async with running(worker):
        await wait_until(lambda: len(runs(rclient, app)) >= len(expected))
        await wait_until(lambda: worker.processed == len(expected))
    assert runs(rclient, app) == sorted(expected)
    for key in (q.waiting, q.inflight, q.delayed, q.payloads, q.ranks, q.deliveries, q.owners):
        assert not rclient.exists(key), key
    assert job_markers(rclient, app) == []
    assert list_dead(app) == []
    for job_id in ("old-critical", "old-inflight"):
        assert marked_done(rclient, app.keys, "charge", job_id, legacy_markers)


NEWER = (
    b'{"id":"newer-1","task":"record","trace":{"span":"ab12","sampled":true},'
    b'"queue":"default","level":"normal","args":[5],"kwargs":{"note":"n"},'
    b'"attempt":1,"enqueued":1764428579.5,"waits":0,"deadline":1.9e9,"tags":["a",1,null]}'
)


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_a_payload_with_fields_this_version_does_not_know_still_runs(
    make_app: Callable[..., App], rclient: redis.Redis, backend: str
) -> None:
    assert decode(NEWER).args == [5]  # unknown fields are skipped, not refused
    app = recording_app(make_app, backend=backend)
    if backend == "streams":
        v01_enqueue_stream(rclient, app.keys, NEWER, "normal")  # the wire form is unchanged
    else:
        v01_enqueue_sorted(rclient, app, NEWER)
    worker = worker_for(app, concurrency=2)
    async with running(worker):
        await wait_until(lambda: worker.processed == 1, message="the newer payload ran")
    assert runs(rclient, app) == ["newer-1:1"]
    assert list_dead(app) == []
    assert job_markers(rclient, app) == []
