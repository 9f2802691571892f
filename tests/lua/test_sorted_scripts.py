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


@pytest.fixture
def keys(namespace: str) -> Keys:
    return Keys(namespace)


@pytest.fixture
def scripts(rclient: redis.Redis) -> SyncScripts:
    return SyncScripts(rclient)


def run(scripts: SyncScripts, name: Any, keys: list[str], args: list[Any]) -> Any:
    return scripts.run_all([ScriptCall(name, keys, args)])[0]


def enqueue(scripts: SyncScripts, keys: Keys, q: SortedKeys, *jobs: tuple[str, int]) -> list[int]:
    """Enqueue (job id, boost in us) pairs; the payload is the id with a 'P' prefix."""
    script_keys = [q.waiting, q.payloads, q.ranks, q.clock, q.wakeup]
    args: list[Any] = []
    for job_id, boost in jobs:
        script_keys.append(keys.job(job_id))
        args += [job_id, boost, f"P{job_id}"]
    return run(scripts, "enqueue_sorted", script_keys, args)


def take(
    scripts: SyncScripts, q: SortedKeys, limit: int, lease_ms: int
) -> tuple[list[Any], int, int]:
    taken, returned, next_deadline = run(
        scripts, "take_sorted", [q.waiting, q.inflight, q.payloads, q.ranks], [limit, lease_ms]
    )
    return taken, returned, next_deadline


def ranks(rclient: redis.Redis, q: SortedKeys) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in rclient.hgetall(q.ranks).items()}


def waiting(rclient: redis.Redis, q: SortedKeys) -> list[str]:
    return [m.decode() for m in rclient.zrange(q.waiting, 0, -1)]


def now_ms(rclient: redis.Redis) -> int:
    seconds, micros = rclient.time()
    return seconds * 1000 + micros // 1000


def test_every_script_documents_its_keys_and_args() -> None:
    for name in ("enqueue_sorted", "take_sorted", "extend_sorted", "ack_sorted"):
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
    assert taken == [b"crit", b"Pcrit", b"low", b"Plow"]
    assert returned == 0
    assert 0 < next_deadline <= 30_000
    assert waiting(rclient, q) == ["low2"]
    deadlines = dict(rclient.zrange(q.inflight, 0, -1, withscores=True))
    assert set(deadlines) == {b"crit", b"low"}
    for deadline in deadlines.values():
        assert before + 30_000 <= deadline <= after + 30_000
    # Payloads and ranks stay until the ack: a dead worker's job can come back.
    assert rclient.hlen(q.payloads) == 3 and rclient.hlen(q.ranks) == 3


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
    assert taken == [b"first", b"Pfirst"]


def test_expired_lease_is_taken_again_in_the_same_call(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, q, ("a", 0), ("b", 0))
    take(scripts, q, 1, 60_000)
    rclient.zadd(q.inflight, {"a": 1})  # a lease that ended long ago
    taken, returned, _ = take(scripts, q, 1, 60_000)
    assert taken == [b"a", b"Pa"]
    assert returned == 1
    assert waiting(rclient, q) == ["b"]


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
    assert taken == [b"orphan", None]


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


def test_ack_finishes_jobs_and_frees_their_ids(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, q, ("a", 0), ("b", 0), ("c", 0))
    take(scripts, q, 2, 60_000)
    done = run(
        scripts,
        "ack_sorted",
        [q.inflight, q.payloads, q.ranks, keys.job("a"), keys.job("b"), keys.job("zz")],
        ["a", "b", "zz"],
    )
    assert done == 2
    assert rclient.zcard(q.inflight) == 0
    assert set(rclient.hkeys(q.payloads)) == {b"c"} == set(rclient.hkeys(q.ranks))
    assert not rclient.exists(keys.job("a"), keys.job("b"))
    assert rclient.exists(keys.job("c"))
    assert enqueue(scripts, keys, q, ("a", 0), ("c", 0)) == [1, 0]
