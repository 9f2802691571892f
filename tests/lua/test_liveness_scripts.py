"""Liveness, script by script, against real Redis: beat.lua keeps a worker's record on
the server's clock, and the scripts that take jobs from other workers (reclaim_stream,
take_sorted) take them only from a worker known dead, never after an outage before every
worker had a full lease to check in again."""

from __future__ import annotations

from typing import Any

import redis

from conftest import wait_until_sync
from lockgate.backend.keys import GROUP, Keys
from lockgate.backend.lua import ScriptCall, SyncScripts
from lua.test_stream_scripts import enqueue, idle_ms, pending_consumers, read

LEASE_MS = 600
GAP_MS = 400  # long enough that a pause of this test's loop is no outage
QUIET_MS = LEASE_MS


def run(scripts: SyncScripts, name: Any, keys: list[str], args: list[Any]) -> Any:
    return scripts.run_all([ScriptCall(name, keys, args)])[0]


def beat(scripts: SyncScripts, keys: Keys, consumer: str, lease_ms: int = LEASE_MS) -> list[int]:
    """beat.lua for ``consumer``: [ms its liveness had lapsed (-1: first), gap ended]."""
    return list(run(scripts, "beat", [keys.liveness()], [consumer, lease_ms, GAP_MS, 0]))


def reclaim(scripts: SyncScripts, keys: Keys, consumer: str, min_idle_ms: int = 50) -> Any:
    stream = keys.stream("q", "low")
    args = [GROUP, consumer, min_idle_ms, QUIET_MS, GAP_MS]
    return run(scripts, "reclaim_stream", [keys.liveness(), stream], args)


def now_ms(rclient: redis.Redis) -> int:
    seconds, micros = rclient.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_the_first_beat_starts_a_quiet_period_and_later_beats_keep_the_worker_alive(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    assert beat(scripts, keys, "w1") == [-1, 1]  # nothing beat before: a gap
    since = int(rclient.zscore(keys.liveness(), "~since"))
    assert beat(scripts, keys, "w1") == [0, 0]
    assert int(rclient.zscore(keys.liveness(), "~since")) == since
    alive_until = int(rclient.zscore(keys.liveness(), "w1"))
    assert 0 < alive_until - now_ms(rclient) <= LEASE_MS


def test_a_beat_after_a_silence_longer_than_the_gap_restarts_the_quiet_period(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    beat(scripts, keys, "w1")
    before = int(rclient.zscore(keys.liveness(), "~since"))
    wait_until_sync(lambda: now_ms(rclient) - before > GAP_MS + LEASE_MS, message="silence")
    lapsed, gap = beat(scripts, keys, "w1")
    assert gap == 1 and lapsed > 0  # its own liveness lapsed too: an outage, not a death
    assert int(rclient.zscore(keys.liveness(), "~since")) > before


def test_a_clean_stop_ends_the_workers_liveness_at_once(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    beat(scripts, keys, "w1")
    beat(scripts, keys, "w1", lease_ms=0)
    assert int(rclient.zscore(keys.liveness(), "w1")) <= now_ms(rclient)


def test_a_sweep_removes_records_of_workers_lapsed_long_ago(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    rclient.zadd(keys.liveness(), {"gone": 1, "recent": now_ms(rclient) - 10})
    run(scripts, "beat", [keys.liveness()], ["w1", LEASE_MS, GAP_MS, 60_000])
    members = set(rclient.zrange(keys.liveness(), 0, -1))
    assert members == {b"recent", b"~since", b"~pulse", b"w1"}


def keep_beating(scripts: SyncScripts, keys: Keys, *consumers: str) -> None:
    for consumer in consumers:
        beat(scripts, keys, consumer)


def test_an_idle_entry_of_a_live_worker_is_kept_for_it_not_reclaimed(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    """Its event loop is blocked: no entry heartbeat, but its liveness thread beats."""
    stream = keys.stream("q", "low")
    enqueue(scripts, keys, ("a", "low", b"A"))
    keep_beating(scripts, keys, "busy", "rescuer")
    entry = read(scripts, keys, 1, [0, 0, 1], consumer="busy")[1][0][1]
    # Past the quiet period and the entry's min idle, both workers beating all along.
    start = now_ms(rclient)
    while now_ms(rclient) - start < QUIET_MS + 50:
        keep_beating(scripts, keys, "busy", "rescuer")
    assert idle_ms(rclient, stream, entry) >= 50
    idle = idle_ms(rclient, stream, entry)
    assert reclaim(scripts, keys, "rescuer")[0] == 0
    assert pending_consumers(rclient, stream) == {b"busy": 1}
    # Left alone, not reset: taken as soon as its worker is known dead.
    assert idle_ms(rclient, stream, entry) >= idle


def test_an_entry_of_a_worker_whose_liveness_lapsed_while_redis_served_is_reclaimed(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    stream = keys.stream("q", "low")
    enqueue(scripts, keys, ("a", "low", b"A"))
    keep_beating(scripts, keys, "dead", "rescuer")
    entry = read(scripts, keys, 1, [0, 0, 1], consumer="dead")[1][0][1]
    start = now_ms(rclient)
    while now_ms(rclient) - start < LEASE_MS + 50:  # only the rescuer beats
        keep_beating(scripts, keys, "rescuer")
    index, entry_id, _, count, _ = reclaim(scripts, keys, "rescuer")
    assert (index, entry_id.decode(), count) == (1, entry, 2)
    assert pending_consumers(rclient, stream) == {b"rescuer": 1}


def test_after_an_outage_nobody_is_reclaimed_until_every_worker_had_a_lease_to_beat(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    """Redis away longer than the lease: every record lapsed. The first beats after it
    start a quiet period; the worker that beats again keeps its job."""
    stream = keys.stream("q", "low")
    enqueue(scripts, keys, ("a", "low", b"A"), ("b", "low", b"B"))
    keep_beating(scripts, keys, "w1", "w2", "rescuer")
    read(scripts, keys, 1, [0, 0, 1], consumer="w1")
    read(scripts, keys, 1, [0, 0, 1], consumer="w2")
    silence_from = now_ms(rclient)
    wait_until_sync(lambda: now_ms(rclient) - silence_from > LEASE_MS + GAP_MS, message="outage")
    # Redis is back: the rescuer beats first, and a reclaim right after it takes nothing.
    assert beat(scripts, keys, "rescuer")[1] == 1
    assert reclaim(scripts, keys, "rescuer")[0] == 0
    # w1 checks in within the quiet period, w2 never does.
    start = now_ms(rclient)
    while now_ms(rclient) - start < QUIET_MS + 50:
        keep_beating(scripts, keys, "w1", "rescuer")
    taken = reclaim(scripts, keys, "rescuer")
    assert taken[0] == 1 and taken[2] == [b"job", b"B"]
    assert reclaim(scripts, keys, "rescuer")[0] == 0
    assert pending_consumers(rclient, stream) == {b"w1": 1, b"rescuer": 1}


def test_a_reclaimer_whose_own_beats_stalled_takes_nothing(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    """Others beat, but the rescuer's own record lapsed: it may be the one cut off, so it
    decides nothing, whatever the others' records say."""
    enqueue(scripts, keys, ("a", "low", b"A"))
    keep_beating(scripts, keys, "dead", "rescuer")
    read(scripts, keys, 1, [0, 0, 1], consumer="dead")
    rclient.zadd(keys.liveness(), {"~since": 0})  # serving for long, as far as it knows
    start = now_ms(rclient)
    while now_ms(rclient) - start < LEASE_MS + 50:  # only a third worker beats
        keep_beating(scripts, keys, "third")
    assert reclaim(scripts, keys, "rescuer")[0] == 0
    keep_beating(scripts, keys, "rescuer")  # its beats land again: now it may
    assert reclaim(scripts, keys, "rescuer")[0] == 1


def sorted_take(
    scripts: SyncScripts, keys: Keys, consumer: str, lease_ms: int, *, everything: bool = False
) -> Any:
    """take_sorted of one job; ``everything``: the caller names every job it runs (none)."""
    q = keys.sorted_keys("q")
    script_keys = [
        q.waiting, q.inflight, q.payloads, q.ranks, q.delayed, q.deliveries, q.owners, q.wake,
        keys.paused(), keys.liveness(),
    ]  # fmt: skip
    args = [1, lease_ms, consumer, QUIET_MS, GAP_MS, int(everything), 0]
    return run(scripts, "take_sorted", script_keys, args)


def test_sorted_an_expired_lease_of_a_live_worker_is_extended_not_handed_out(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    q = keys.sorted_keys("q")
    script_keys = [q.waiting, q.payloads, q.ranks, q.clock, q.wake, q.delayed, keys.job("a")]
    assert run(scripts, "enqueue_sorted", [*script_keys, keys.job("a")], ["a", 0, "PA", 0, 0])
    keep_beating(scripts, keys, "busy", "other")
    taken, *_ = sorted_take(scripts, keys, "busy", 50)
    assert taken[0] == b"a"
    start = now_ms(rclient)
    while now_ms(rclient) - start < QUIET_MS + 50:  # its lease (50 ms) expired long ago
        keep_beating(scripts, keys, "busy", "other")
    taken, returned, next_ms, _ = sorted_take(scripts, keys, "other", 50)
    assert (taken, returned) == ([], 0)
    # Kept for it until its record ends (it beat just now), not left expired.
    assert 0 < next_ms <= LEASE_MS
    # It stops beating: once its liveness lapsed, the job goes to the other worker.
    start = now_ms(rclient)
    while now_ms(rclient) - start < LEASE_MS + 50:
        keep_beating(scripts, keys, "other")
    taken, returned, _, _ = sorted_take(scripts, keys, "other", 50)
    assert taken[0] == b"a" and taken[2] == 2 and returned == 1


def test_an_idle_entry_of_the_reclaimer_itself_that_it_does_not_run_is_taken_back(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    """A read whose reply was lost (a timeout): the entry is pending for a live worker
    that does not know it. Kept "for its live owner", it would wait forever."""
    stream = keys.stream("q", "low")
    enqueue(scripts, keys, ("a", "low", b"A"), ("b", "low", b"B"))
    keep_beating(scripts, keys, "w1")
    lost = read(scripts, keys, 1, [0, 0, 1], consumer="w1")[1][0][1]
    running = read(scripts, keys, 1, [0, 0, 1], consumer="w1")[1][0][1]
    wait_until_sync(lambda: idle_ms(rclient, stream, lost) >= 60, message="idle")
    keep_beating(scripts, keys, "w1")
    args = [GROUP, "w1", 50, QUIET_MS, GAP_MS, running]  # it names the one it runs
    index, entry_id, fields, count, _ = run(
        scripts, "reclaim_stream", [keys.liveness(), stream], args
    )
    assert (index, entry_id.decode(), fields, count) == (1, lost, [b"job", b"A"], 2)
    assert run(scripts, "reclaim_stream", [keys.liveness(), stream], args)[0] == 0


def test_sorted_an_expired_lease_of_the_taker_itself_that_it_does_not_run_goes_back(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    q = keys.sorted_keys("q")
    script_keys = [q.waiting, q.payloads, q.ranks, q.clock, q.wake, q.delayed, keys.job("a")]
    assert run(scripts, "enqueue_sorted", [*script_keys, keys.job("a")], ["a", 0, "PA", 0, 0])
    keep_beating(scripts, keys, "w1")
    assert sorted_take(scripts, keys, "w1", 50)[0][0] == b"a"  # its reply was lost
    start = now_ms(rclient)
    wait_until_sync(lambda: now_ms(rclient) - start > 60, message="lease expired")
    keep_beating(scripts, keys, "w1")
    # Not naming every job it runs: the lease is kept (extended), as for a live owner.
    assert sorted_take(scripts, keys, "w1", 50)[0] == []
    kept_until = rclient.zscore(keys.sorted_keys("q").inflight, "a")
    while now_ms(rclient) <= kept_until:  # kept until its record's end: it keeps beating
        keep_beating(scripts, keys, "w1")
    taken, returned, _, _ = sorted_take(scripts, keys, "w1", 50, everything=True)
    assert taken[0] == b"a" and taken[2] == 2 and returned == 1


def test_a_workers_claim_whose_lease_lapsed_is_taken_over_only_from_a_dead_holder(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    """A claim held by a worker (``Holder.token``) outlives its lease by its hold: once
    the lease lapsed it is busy to everyone but a caller that judged its holder dead and
    names the value it judged; the holder's late writes are then refused (fenced)."""
    key, liveness, hold_ms, lease_ms = keys.claim("order:1"), keys.liveness(), 60_000, 100
    value = f"w{hold_ms}.{QUIET_MS}.{GAP_MS}.{'ab' * 16}.w1"

    def take(token: str, expect: str = "") -> list[Any]:
        args = [token, lease_ms + hold_ms, "", keys.done_bucket_prefix, 0, 0, expect]
        return list(run(scripts, "idem_claim", [key], args))

    def judge(holder: str) -> list[int]:
        return list(run(scripts, "judge_owner", [liveness], [holder, "w2", QUIET_MS, GAP_MS]))

    beat(scripts, keys, "w1")
    beat(scripts, keys, "w2")
    assert take(value) == [1, 0]
    state, left = take("other")
    assert state == -1 and 0 < left <= lease_ms  # the lease, not the hold, is what is left
    wait_until_sync(lambda: rclient.pttl(key) <= hold_ms, message="lease lapsed")
    assert take("other") == [-2, 0, b"c:" + value.encode()]
    state, wait_ms = judge("w1")
    assert state == 0 and wait_ms > 0  # its holder beats: alive
    assert take("other", expect="c:" + value + "x")[0] == -2  # not the value judged
    # The holder stops beating (it died); the other worker beats on.
    wait_until_sync(
        lambda: beat(scripts, keys, "w2") and judge("w1")[0] == 1, message="holder judged dead"
    )
    assert take("other", expect="c:" + value) == [1, 0]
    assert rclient.get(key) == b"c:other"
    settle = [value, "release", lease_ms, "", keys.done_bucket_prefix, 0]
    assert run(scripts, "idem_settle", [key], settle) == 0  # the late holder is fenced
    assert rclient.get(key) == b"c:other"


def test_a_lapsed_claims_holder_is_not_judged_during_or_right_after_an_outage(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    """No beat for longer than the gap (Redis away): nobody is judged dead until beats
    have come for a whole quiet period again."""
    beat(scripts, keys, "w1")
    since = int(rclient.zscore(keys.liveness(), "~since"))
    wait_until_sync(lambda: now_ms(rclient) - since > GAP_MS + LEASE_MS, message="silence")
    args = ["w1", "", QUIET_MS, GAP_MS]
    state, wait_ms = run(scripts, "judge_owner", [keys.liveness()], args)
    assert state == 0 and wait_ms > 0  # the silence: an outage, not a death
    beat(scripts, keys, "w2")  # beats come again: a quiet period starts
    state, wait_ms = run(scripts, "judge_owner", [keys.liveness()], args)
    assert state == 0 and QUIET_MS - 100 < wait_ms <= QUIET_MS
