"""The sorted backend's scripts, called directly against real Redis."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import redis

from conftest import wait_until_sync
from lockgate.keys import Keys, SortedKeys
from lockgate.lua import ScriptCall, SyncScripts, source

SECOND_US = 1_000_000


@pytest.fixture
def q(namespace: str) -> SortedKeys:
    return Keys(namespace).sorted_keys("q")


def run(scripts: SyncScripts, name: Any, keys: list[str], args: list[Any]) -> Any:
    return scripts.run_all([ScriptCall(name, keys, args)])[0]


def enqueue(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, *jobs: tuple[str, int] | tuple[str, int, int]
) -> list[int]:
    """Enqueue (job id, boost in us[, delay ms]); the payload is the id with a 'P' prefix."""
    script_keys = [q.waiting, q.payloads, q.ranks, q.clock, q.wakeup, q.delayed]
    args: list[Any] = []
    for job_id, boost, *delay in jobs:
        script_keys.append(keys.job(job_id))
        args += [job_id, boost, f"P{job_id}", delay[0] if delay else 0]
    return run(scripts, "enqueue_sorted", script_keys, args)


def take(
    scripts: SyncScripts, q: SortedKeys, limit: int, lease_ms: int
) -> tuple[list[Any], int, int]:
    """take_sorted: (flat (job id, payload, deliveries) triples, leases returned, next ms)."""
    taken, returned, next_ms = run(
        scripts,
        "take_sorted",
        [q.waiting, q.inflight, q.payloads, q.ranks, q.delayed, q.deliveries],
        [limit, lease_ms],
    )
    return taken, returned, next_ms


def ranks(rclient: redis.Redis, q: SortedKeys) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in rclient.hgetall(q.ranks).items()}


def waiting(rclient: redis.Redis, q: SortedKeys) -> list[str]:
    return [m.decode() for m in rclient.zrange(q.waiting, 0, -1)]


def now_ms(rclient: redis.Redis) -> int:
    seconds, micros = rclient.time()
    return seconds * 1000 + micros // 1000


def test_every_script_documents_its_keys_and_args() -> None:
    names = (
        "enqueue_sorted", "take_sorted", "extend_sorted", "ack_sorted", "retry_sorted",
        "dead_letter_sorted", "stats_sorted",
    )  # fmt: skip
    for name in names:
        text = source(name)
        assert text.startswith(f"-- {name}.lua")
        assert "-- KEYS" in text and "-- ARGV" in text


def test_enqueue_gives_strictly_increasing_fifo_ranks(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    order = []
    for batch in range(20):
        jobs = [(f"j{batch}-{n}", 0) for n in range(5)]
        assert enqueue(scripts, keys, q, *jobs) == [1] * 5
        order += [job_id for job_id, _ in jobs]
    stamps = [ranks(rclient, q)[job_id] for job_id in order]
    assert all(a < b for a, b in itertools.pairwise(stamps))
    assert waiting(rclient, q) == order
    assert int(rclient.get(q.clock)) == stamps[-1]
    # Ranks are server microsecond stamps, stored exactly.
    seconds, _ = rclient.time()
    assert abs(stamps[-1] // SECOND_US - seconds) <= 5
    assert [int(s) for _, s in rclient.zrange(q.waiting, 0, -1, withscores=True)] == stamps


def test_enqueue_boosts_higher_levels(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, q, ("low", 0), ("critical", 120 * SECOND_US), ("normal", 60 * SECOND_US))
    rank = ranks(rclient, q)
    assert rank["critical"] == rank["low"] + 1 - 120 * SECOND_US
    assert rank["normal"] == rank["low"] + 2 - 60 * SECOND_US
    assert waiting(rclient, q) == ["critical", "normal", "low"]


def test_enqueue_stamps_never_go_back(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    # As if the server clock had stepped back: the stored clock is ahead of TIME.
    ahead = (rclient.time()[0] + 3600) * SECOND_US
    rclient.set(q.clock, ahead)
    enqueue(scripts, keys, q, ("a", 0), ("b", 0))
    assert ranks(rclient, q) == {"a": ahead + 1, "b": ahead + 2}
    assert int(rclient.get(q.clock)) == ahead + 2


def test_enqueue_dedups_and_keeps_the_first_payload(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    assert enqueue(scripts, keys, q, ("a", 0), ("a", 0), ("b", 0)) == [1, 0, 1]
    rank = ranks(rclient, q)
    assert enqueue(scripts, keys, q, ("a", 5 * SECOND_US)) == [0]
    assert ranks(rclient, q) == rank
    assert rclient.hget(q.payloads, "a") == b"Pa"
    assert rclient.zcard(q.waiting) == 2
    assert rclient.get(keys.job("a")) == b"sorted"


def test_enqueue_with_a_delay_waits_in_delayed_until_due(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    before = now_ms(rclient)
    assert enqueue(scripts, keys, q, ("later", 0, 600_000), ("now", 0)) == [1, 1]
    after = now_ms(rclient)
    assert waiting(rclient, q) == ["now"]
    due = rclient.zscore(q.delayed, "later")
    assert due is not None and before + 600_000 <= due <= after + 600_000
    # Its rank is its due stamp, so once due it queues behind what was enqueued before it.
    assert ranks(rclient, q)["later"] > ranks(rclient, q)["now"] + 599 * SECOND_US
    assert rclient.hget(q.payloads, "later") == b"Plater"
    assert enqueue(scripts, keys, q, ("later", 0)) == [0]  # a delayed id is taken
    taken, _, next_ms = take(scripts, q, 5, 30_000)
    assert taken == [b"now", b"Pnow", 1]
    assert 30_000 >= next_ms > 0  # the lease ends before the delayed job is due
    rclient.zadd(q.delayed, {"later": 1})  # as if its due time had come
    taken, _, _ = take(scripts, q, 5, 30_000)
    assert taken == [b"later", b"Plater", 1]
    assert rclient.zcard(q.delayed) == 0


def test_enqueue_signals_idle_workers_only_when_it_added(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, q, ("a", 0), ("b", 0))
    assert rclient.llen(q.wakeup) == 1
    enqueue(scripts, keys, q, ("a", 0))
    assert rclient.llen(q.wakeup) == 1
    for n in range(100):
        enqueue(scripts, keys, q, (f"n{n}", 0))
    assert rclient.llen(q.wakeup) == 64


def test_take_moves_the_best_ranked_to_inflight(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, q, ("low", 0), ("crit", 10 * SECOND_US), ("low2", 0))
    before = now_ms(rclient)
    taken, returned, next_deadline = take(scripts, q, 2, 30_000)
    after = now_ms(rclient)
    assert taken == [b"crit", b"Pcrit", 1, b"low", b"Plow", 1]
    assert returned == 0
    assert 0 < next_deadline <= 30_000
    assert waiting(rclient, q) == ["low2"]
    deadlines = dict(rclient.zrange(q.inflight, 0, -1, withscores=True))
    assert set(deadlines) == {b"crit", b"low"}
    for deadline in deadlines.values():
        assert before + 30_000 <= deadline <= after + 30_000
    # Payloads and ranks stay until the ack: a dead worker's job can come back.
    assert rclient.hlen(q.payloads) == 3 and rclient.hlen(q.ranks) == 3
    assert rclient.hgetall(q.deliveries) == {b"crit": b"1", b"low": b"1"}


def test_take_with_nothing_in_flight(scripts: SyncScripts, q: SortedKeys) -> None:
    assert take(scripts, q, 5, 1000) == ([], 0, -1)


def test_take_with_no_room_only_reports(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, q, ("a", 0), ("b", 0))
    take(scripts, q, 1, 60_000)
    taken, returned, next_deadline = take(scripts, q, 0, 60_000)
    assert (taken, returned) == ([], 0)
    assert 0 < next_deadline <= 60_000
    assert waiting(rclient, q) == ["b"]


def test_take_returns_expired_leases_at_their_original_rank(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, q, ("first", 0), ("second", 0))
    original = ranks(rclient, q)["first"]
    taken, _, _ = take(scripts, q, 1, 100)
    assert taken[0] == b"first"
    enqueue(scripts, keys, q, ("third", 0))
    # Wait (by the server's clock) until the lease is over: the worker "died".
    deadline = rclient.zscore(q.inflight, "first")
    wait_until_sync(lambda: now_ms(rclient) > deadline, message="lease over")
    taken, returned, next_deadline = take(scripts, q, 0, 100)
    assert (taken, returned, next_deadline) == ([], 1, -1)
    assert rclient.zscore(q.waiting, "first") == original
    assert waiting(rclient, q) == ["first", "second", "third"]
    assert rclient.zcard(q.inflight) == 0
    taken, _, _ = take(scripts, q, 1, 60_000)
    assert taken == [b"first", b"Pfirst", 2]  # its second delivery


def test_expired_lease_is_taken_again_in_the_same_call_and_alone(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, q, ("a", 0), ("b", 0), ("c", 0))
    take(scripts, q, 1, 60_000)
    rclient.zadd(q.inflight, {"a": 1})  # a lease that ended long ago
    taken, returned, _ = take(scripts, q, 3, 60_000)
    # Taken before (its worker died): it ends the batch, so it can run alone.
    assert taken == [b"a", b"Pa", 2]
    assert returned == 1
    assert waiting(rclient, q) == ["b", "c"]
    taken, _, _ = take(scripts, q, 3, 60_000)
    assert taken == [b"b", b"Pb", 1, b"c", b"Pc", 1]


def test_expired_lease_of_a_finished_job_is_dropped(
    scripts: SyncScripts, q: SortedKeys, rclient: redis.Redis
) -> None:
    rclient.zadd(q.inflight, {"ghost": 1})  # no rank: its job was acked meanwhile
    taken, returned, _ = take(scripts, q, 1, 1000)
    assert (taken, returned) == ([], 1)
    assert rclient.zcard(q.inflight) == 0 and rclient.zcard(q.waiting) == 0


def test_take_reports_a_missing_payload(
    scripts: SyncScripts, q: SortedKeys, rclient: redis.Redis
) -> None:
    rclient.zadd(q.waiting, {"orphan": 5})
    taken, _, _ = take(scripts, q, 1, 1000)
    assert taken == [b"orphan", None, 1]


def test_extend_pushes_back_in_flight_leases_only(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, q, ("a", 0), ("b", 0), ("c", 0))
    take(scripts, q, 2, 1000)
    old = rclient.zscore(q.inflight, "a")
    before = now_ms(rclient)
    extended = run(scripts, "extend_sorted", [q.inflight], [600_000, "a", "b", "c"])
    assert extended == 2
    assert rclient.zscore(q.inflight, "a") >= before + 600_000 > old
    assert rclient.zscore(q.inflight, "c") is None
    assert waiting(rclient, q) == ["c"]


def ack(scripts: SyncScripts, keys: Keys, q: SortedKeys, *job_ids: str) -> int:
    markers = [keys.job(job_id) for job_id in job_ids]
    return run(
        scripts, "ack_sorted", [q.inflight, q.payloads, q.ranks, q.deliveries, *markers], job_ids
    )


def test_ack_finishes_jobs_and_frees_their_ids(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, q, ("a", 0), ("b", 0), ("c", 0))
    take(scripts, q, 2, 60_000)
    # "c" waits (not in flight) and "zz" does not exist: the ack leaves both alone.
    assert ack(scripts, keys, q, "a", "c", "b", "zz") == 2
    assert rclient.zcard(q.inflight) == 0
    assert set(rclient.hkeys(q.payloads)) == {b"c"} == set(rclient.hkeys(q.ranks))
    assert rclient.hlen(q.deliveries) == 0
    assert not rclient.exists(keys.job("a"), keys.job("b"))
    assert rclient.exists(keys.job("c"))
    assert waiting(rclient, q) == ["c"]
    assert enqueue(scripts, keys, q, ("a", 0), ("c", 0)) == [1, 0]


def test_a_late_ack_keeps_a_job_taken_over_by_another_worker(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    """A worker's lease ended; another finished the job and it was enqueued again.

    The first worker's late ack must not finish (or free the id of) the newer job.
    """
    enqueue(scripts, keys, q, ("a", 0))
    take(scripts, q, 1, 60_000)
    rclient.zadd(q.inflight, {"a": 1})  # the first worker's lease ended
    assert take(scripts, q, 1, 60_000)[0] == [b"a", b"Pa", 2]  # the second worker
    assert ack(scripts, keys, q, "a") == 1  # the second worker's ack
    assert enqueue(scripts, keys, q, ("a", 0)) == [1]  # queued again, waiting
    assert ack(scripts, keys, q, "a") == 0  # the first worker's late ack
    assert waiting(rclient, q) == ["a"]
    assert rclient.hget(q.payloads, "a") == b"Pa"
    assert rclient.get(keys.job("a")) == b"sorted"
