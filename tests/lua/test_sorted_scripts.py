"""The sorted backend's scripts, called directly against real Redis."""

from __future__ import annotations

import itertools
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

import pytest
import redis

from conftest import LIVENESS_ARGS, WAIT_TIMEOUT, wait_until_sync
from lockgate.backend.keys import Keys, SortedKeys
from lockgate.backend.lua import ScriptCall, SyncScripts, source

# Workers named here never beat: each counts as dead as it did before liveness.
pytestmark = pytest.mark.usefixtures("liveness_of_old")

SECOND_US = 1_000_000


@pytest.fixture
def q(namespace: str) -> SortedKeys:
    return Keys(namespace).sorted_keys("q")


def run(scripts: SyncScripts, name: Any, keys: list[str], args: list[Any]) -> Any:
    return scripts.run_all([ScriptCall(name, keys, args)])[0]


def paused_key(q: SortedKeys) -> str:
    """Keys.paused of the namespace ``q`` belongs to (its hash tag)."""
    return Keys(q.waiting.partition("{")[2].partition("}")[0]).paused()


def liveness_key(q: SortedKeys) -> str:
    """Keys.liveness of the namespace ``q`` belongs to (see conftest.serving_forever)."""
    return Keys(q.waiting.partition("{")[2].partition("}")[0]).liveness()


def enqueue(
    scripts: SyncScripts,
    keys: Keys,
    q: SortedKeys,
    *jobs: tuple[str, int] | tuple[str, int, int],
    tag: str = "",
) -> list[int]:
    """Enqueue (job id, boost in us[, delay ms]); the payload is the id with a 'P' prefix
    and ``tag`` after it (another tag: another job under the same id)."""
    script_keys = [q.waiting, q.payloads, q.ranks, q.clock, q.wake, q.delayed]
    args: list[Any] = []
    for job_id, boost, *delay in jobs:
        script_keys += [keys.job(job_id), keys.job(job_id)]
        args += [job_id, boost, f"P{job_id}{tag}", delay[0] if delay else 0, 0]
    return run(scripts, "enqueue_sorted", script_keys, args)


NOT_CLAIMED = 2  # take_sorted's claim state for a job it did not claim


class Taken(NamedTuple):
    job_id: bytes
    payload: bytes | None
    deliveries: int
    owner: bytes


class Take(NamedTuple):
    taken: list[Taken]
    returned: int
    next_ms: int
    wake_id: bytes

    @property
    def jobs(self) -> list[tuple[bytes, bytes | None, int]]:
        """(job id, payload, deliveries) of each job taken, without owner tokens."""
        return [(t.job_id, t.payload, t.deliveries) for t in self.taken]


def take(
    scripts: SyncScripts,
    q: SortedKeys,
    limit: int,
    lease_ms: int,
    consumer: str = "w1",
    running: tuple[str, ...] = (),
) -> Take:
    """take_sorted for one worker (consumer name, the job ids it still runs)."""
    flat, returned, next_ms, wake_id = run(
        scripts,
        "take_sorted",
        [q.waiting, q.inflight, q.payloads, q.ranks, q.delayed, q.deliveries, q.owners, q.wake,
         paused_key(q), liveness_key(q)],
        [limit, lease_ms, consumer, *LIVENESS_ARGS, 0, len(running), *running],
    )  # fmt: skip
    taken = [Taken(*flat[i : i + 4]) for i in range(0, len(flat), 6)]
    assert all(state == NOT_CLAIMED for state in flat[4::6])  # no idempotent task named
    return Take(taken, returned, next_ms, wake_id)


def extend(scripts: SyncScripts, q: SortedKeys, lease_ms: int, *owned: tuple[str, bytes]) -> int:
    """extend_sorted with (job id, owner token) pairs."""
    args: list[Any] = [lease_ms]
    for job_id, owner in owned:
        args += [job_id, owner]
    return int(run(scripts, "extend_sorted", [q.inflight, q.owners], args))


def ranks(rclient: redis.Redis, q: SortedKeys) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in rclient.hgetall(q.ranks).items()}


def waiting(rclient: redis.Redis, q: SortedKeys) -> list[str]:
    return [m.decode() for m in rclient.zrange(q.waiting, 0, -1)]


def now_ms(rclient: redis.Redis) -> int:
    seconds, micros = rclient.time()
    return seconds * 1000 + micros // 1000


def test_every_script_documents_its_keys_and_args() -> None:
    names = (
        "enqueue_sorted", "take_sorted", "extend_sorted", "stats_sorted",
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
    assert enqueue(scripts, keys, q, ("a", 5 * SECOND_US), tag="2") == [0]
    assert ranks(rclient, q) == rank
    assert rclient.hget(q.payloads, "a") == b"Pa"
    assert rclient.zcard(q.waiting) == 2
    assert rclient.get(keys.job("a")) == b"sorted q"


def test_a_retried_enqueue_answers_as_the_first_did_and_adds_nothing(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    """The same call again (its reply was lost, the client retried): its own job is there,
    byte for byte, so it is reported created, not a duplicate; another job under the id
    still is a duplicate."""
    assert enqueue(scripts, keys, q, ("a", 0), ("d", 0, 60_000)) == [1, 1]
    rank = ranks(rclient, q)
    assert enqueue(scripts, keys, q, ("a", 0), ("d", 0, 60_000)) == [1, 1]
    assert enqueue(scripts, keys, q, ("a", 0), ("d", 0), tag="other") == [0, 0]
    assert ranks(rclient, q) == rank
    assert waiting(rclient, q) == ["a"] and rclient.zcard(q.delayed) == 1
    # An id twice in one call counts once, the retry included.
    assert enqueue(scripts, keys, q, ("t", 0), ("t", 0)) == [1, 0]
    assert enqueue(scripts, keys, q, ("t", 0), ("t", 0)) == [1, 0]


def test_enqueue_with_a_delay_waits_in_delayed_until_due(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    before = now_ms(rclient)
    assert enqueue(scripts, keys, q, ("later", 0, 600_000), ("now", 0)) == [1, 1]
    after = now_ms(rclient)
    assert waiting(rclient, q) == ["now"]
    due = rclient.zscore(q.delayed, "later")
    # in ms, kept to the microsecond: before its call's ms began and before the next ms of
    # the reply
    assert due is not None and before + 600_000 <= due < after + 600_001
    # Its rank is its due stamp, so once due it queues behind what was enqueued before it.
    assert ranks(rclient, q)["later"] > ranks(rclient, q)["now"] + 599 * SECOND_US
    assert rclient.hget(q.payloads, "later") == b"Plater"
    assert enqueue(scripts, keys, q, ("later", 0), tag="2") == [0]  # a delayed id is taken
    got = take(scripts, q, 5, 30_000)
    assert got.jobs == [(b"now", b"Pnow", 1)]
    assert 30_000 >= got.next_ms > 0  # the lease ends before the delayed job is due
    rclient.zadd(q.delayed, {"later": 1})  # as if its due time had come
    assert take(scripts, q, 5, 30_000).jobs == [(b"later", b"Plater", 1)]
    assert rclient.zcard(q.delayed) == 0


def test_enqueue_signals_idle_workers_only_when_it_added(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, q, ("a", 0), ("b", 0), ("later", 0, 60_000))
    ((_, fields),) = rclient.xrange(q.wake)  # one entry per call, with how many it added
    assert fields == {b"n": b"3"}
    enqueue(scripts, keys, q, ("a", 0))  # taken: nothing added, nobody woken
    assert rclient.xlen(q.wake) == 1
    for n in range(100):
        enqueue(scripts, keys, q, (f"n{n}", 0))
    assert rclient.xlen(q.wake) == 16  # MAXLEN 16: the stream stays short


def test_take_moves_the_best_ranked_to_inflight(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, q, ("low", 0), ("crit", 10 * SECOND_US), ("low2", 0))
    before = now_ms(rclient)
    got = take(scripts, q, 2, 30_000)
    after = now_ms(rclient)
    assert got.jobs == [(b"crit", b"Pcrit", 1), (b"low", b"Plow", 1)]
    assert got.returned == 0
    assert 0 < got.next_ms <= 30_000
    assert waiting(rclient, q) == ["low2"]
    deadlines = dict(rclient.zrange(q.inflight, 0, -1, withscores=True))
    assert set(deadlines) == {b"crit", b"low"}
    for deadline in deadlines.values():
        assert before + 30_000 <= deadline <= after + 30_000
    # Payloads and ranks stay until the ack: a dead worker's job can come back.
    assert rclient.hlen(q.payloads) == 3 and rclient.hlen(q.ranks) == 3
    assert rclient.hgetall(q.deliveries) == {b"crit": b"1", b"low": b"1"}
    assert rclient.hgetall(q.owners) == {t.job_id: t.owner for t in got.taken}


def test_take_with_nothing_in_flight(scripts: SyncScripts, q: SortedKeys) -> None:
    assert take(scripts, q, 5, 1000) == ([], 0, -1, b"0-0")  # no wake stream yet


def test_take_with_no_room_only_reports(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, q, ("a", 0), ("b", 0))
    take(scripts, q, 1, 60_000)
    got = take(scripts, q, 0, 60_000)
    assert (got.taken, got.returned) == ([], 0)
    assert 0 < got.next_ms <= 60_000
    assert waiting(rclient, q) == ["b"]


def test_take_returns_expired_leases_at_their_original_rank(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, q, ("first", 0), ("second", 0))
    original = ranks(rclient, q)["first"]
    assert take(scripts, q, 1, 100).taken[0].job_id == b"first"
    enqueue(scripts, keys, q, ("third", 0))
    # Wait (by the server's clock) until the lease is over: the worker "died".
    deadline = rclient.zscore(q.inflight, "first")
    wait_until_sync(lambda: now_ms(rclient) > deadline, message="lease over")
    got = take(scripts, q, 0, 100)
    assert (got.taken, got.returned, got.next_ms) == ([], 1, -1)
    assert rclient.zscore(q.waiting, "first") == original
    assert waiting(rclient, q) == ["first", "second", "third"]
    assert rclient.zcard(q.inflight) == 0
    assert take(scripts, q, 1, 60_000).jobs == [(b"first", b"Pfirst", 2)]  # second delivery


def test_expired_lease_is_taken_again_in_the_same_call_with_the_rest(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, q, ("a", 0), ("b", 0), ("c", 0))
    take(scripts, q, 1, 60_000)
    rclient.zadd(q.inflight, {"a": 1})  # a lease that ended long ago
    got = take(scripts, q, 3, 60_000)
    # Back at its rank, first; the batch goes on (the worker isolates a redelivery by its
    # delivery count instead of leaving free slots idle).
    assert got.jobs == [(b"a", b"Pa", 2), (b"b", b"Pb", 1), (b"c", b"Pc", 1)]
    assert got.returned == 1
    assert waiting(rclient, q) == []


def test_an_expired_lease_of_a_job_the_worker_still_runs_is_not_handed_out_again(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    """Its heartbeats lapsed (Redis was unreachable): the next one extends it."""
    enqueue(scripts, keys, q, ("a", 0), ("b", 0))
    ((first, *_),) = take(scripts, q, 1, 60_000).taken
    assert first == b"a"
    rclient.zadd(q.inflight, {"a": 1})  # a lease that ended long ago
    got = take(scripts, q, 2, 60_000, running=("a",))
    assert [t.job_id for t in got.taken] == [b"b"]
    assert got.returned == 1  # counted as expired, but left in flight for its owner
    assert rclient.zscore(q.inflight, "a") == 1


def test_expired_lease_of_a_finished_job_is_dropped(
    scripts: SyncScripts, q: SortedKeys, rclient: redis.Redis
) -> None:
    rclient.zadd(q.inflight, {"ghost": 1})  # no rank: its job was acked meanwhile
    got = take(scripts, q, 1, 1000)
    assert (got.taken, got.returned) == ([], 1)
    assert rclient.zcard(q.inflight) == 0 and rclient.zcard(q.waiting) == 0


def test_take_reports_a_missing_payload(
    scripts: SyncScripts, q: SortedKeys, rclient: redis.Redis
) -> None:
    rclient.zadd(q.waiting, {"orphan": 5})
    assert take(scripts, q, 1, 1000).jobs == [(b"orphan", None, 1)]


def test_each_take_records_its_own_owner_token(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, q, ("a", 0))
    (first,) = take(scripts, q, 1, 60_000, consumer="w1").taken
    assert first.owner.startswith(b"w1:1:")
    rclient.zadd(q.inflight, {"a": 1})  # w1's lease ended (paused, cut off)
    (second,) = take(scripts, q, 1, 60_000, consumer="w2").taken
    assert second.owner.startswith(b"w2:2:")
    rclient.zadd(q.inflight, {"a": 1})
    (third,) = take(scripts, q, 1, 60_000, consumer="w1").taken  # the same worker again
    assert len({first.owner, second.owner, third.owner}) == 3
    assert rclient.hget(q.owners, "a") == third.owner  # only the latest take may settle


def test_extend_pushes_back_leases_of_the_current_owner_only(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, q, ("a", 0), ("b", 0), ("c", 0))
    a, b = take(scripts, q, 2, 1000, consumer="w1").taken
    old_b = rclient.zscore(q.inflight, "b")
    before = now_ms(rclient)
    # b with an earlier take's token; c waits (never taken): neither is extended.
    stale = b"w1:0:" + b.owner.split(b":", 2)[2]
    assert extend(scripts, q, 600_000, ("a", a.owner), ("b", stale), ("c", a.owner)) == 1
    assert rclient.zscore(q.inflight, "a") >= before + 600_000
    assert rclient.zscore(q.inflight, "b") == old_b
    assert rclient.zscore(q.inflight, "c") is None
    assert waiting(rclient, q) == ["c"]


def test_a_worker_whose_lease_lapsed_cannot_extend_the_new_owners_lease(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, q, ("a", 0))
    (old,) = take(scripts, q, 1, 60_000, consumer="w1").taken
    rclient.zadd(q.inflight, {"a": 1})  # w1's lease ended
    (new,) = take(scripts, q, 1, 1000, consumer="w2").taken
    deadline = rclient.zscore(q.inflight, "a")
    assert extend(scripts, q, 600_000, ("a", old.owner)) == 0  # w1 comes back
    assert rclient.zscore(q.inflight, "a") == deadline
    assert extend(scripts, q, 600_000, ("a", new.owner)) == 1
    assert rclient.zscore(q.inflight, "a") > deadline


def test_take_reports_the_wake_streams_last_id(
    scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    assert take(scripts, q, 1, 1000).wake_id == b"0-0"
    enqueue(scripts, keys, q, ("a", 0))
    enqueue(scripts, keys, q, ("b", 0))
    ((last, _),) = rclient.xrevrange(q.wake, count=1)
    got = take(scripts, q, 0, 1000)
    assert got.wake_id == last
    # Blocking from there: nothing yet; the next enqueue is seen.
    assert rclient.xread({q.wake: got.wake_id}) == []
    enqueue(scripts, keys, q, ("c", 0))
    assert len(rclient.xread({q.wake: got.wake_id})[0][1]) == 1


def blocked_readers(rclient: redis.Redis, names: list[str]) -> bool:
    """Whether every named client is blocked in XREAD right now (by CLIENT LIST)."""
    blocked = {
        row["name"]
        for row in rclient.client_list()
        if row["cmd"] == "xread" and "b" in row["flags"]
    }
    return set(names) <= blocked


def test_one_enqueue_wakes_every_blocked_worker(
    redis_url: str, scripts: SyncScripts, keys: Keys, q: SortedKeys, rclient: redis.Redis
) -> None:
    """Defect 16: with a BLPOP list one enqueue woke one idle worker; every idle worker
    blocks on the wake stream with XREAD, so one enqueue wakes them all."""
    wake_id = take(scripts, q, 1, 1000).wake_id
    names = [f"{keys.namespace}-idle-{n}" for n in range(3)]
    readers = [redis.Redis.from_url(redis_url, client_name=name) for name in names]
    try:
        with ThreadPoolExecutor(len(readers)) as pool:
            block_ms = int(WAIT_TIMEOUT * 1000)
            woken: list[Future[Any]] = [
                pool.submit(reader.xread, {q.wake: wake_id}, None, block_ms) for reader in readers
            ]
            try:
                wait_until_sync(
                    lambda: blocked_readers(rclient, names), message="3 readers block on XREAD"
                )
                assert enqueue(scripts, keys, q, ("a", 0)) == [1]
                replies = [future.result(timeout=WAIT_TIMEOUT) for future in woken]
            finally:
                if not all(future.done() for future in woken):  # free them on a failure
                    rclient.xadd(q.wake, {"n": 0})
    finally:
        for reader in readers:
            reader.close()
    ((last, _),) = rclient.xrevrange(q.wake, count=1)
    for reply in replies:
        ((stream, entries),) = reply
        assert stream == q.wake.encode()
        assert [entry_id for entry_id, _ in entries] == [last]
