"""job_status and cancel_job, called directly against real Redis: each trusts only the
marker value its caller read, and answers 'moved' when the marker changed since."""

from __future__ import annotations

import json
from typing import Any

import redis

from lockgate.backend.keys import GROUP, Keys, status_shard
from lockgate.backend.lua import ScriptCall, SyncScripts, source

PAYLOAD = b'{"id":"a","task":"t","queue":"q","level":"low"}'


def run(scripts: SyncScripts, name: Any, keys: list[str], args: list[Any]) -> Any:
    return scripts.run_all([ScriptCall(name, keys, args)])[0]


def status(scripts: SyncScripts, keys: Keys, placed: str) -> list[Any]:
    script_keys = [keys.job("a"), keys.result("a"), keys.statuses(), keys.status("a")]
    script_keys += keys.place_keys(placed)
    args = [GROUP, placed, "a", status_shard("a")]
    return list(run(scripts, "job_status", script_keys, args))


def cancel(scripts: SyncScripts, keys: Keys, placed: str) -> bytes:
    script_keys = [keys.job("a"), keys.cancel_flag("a"), keys.statuses()]
    script_keys += keys.place_keys(placed)
    args = [GROUP, b'{"status":"cancelled"}', 60_000, 60_000, placed, "a", status_shard("a")]
    return bytes(run(scripts, "cancel_job", script_keys, args))


def test_the_scripts_document_their_keys_and_args() -> None:
    for name in ("job_status", "cancel_job"):
        text = source(name)
        assert text.startswith(f"-- {name}.lua")
        assert "-- KEYS" in text and "-- ARGV" in text


def test_a_marker_that_changed_since_it_was_read_answers_moved(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    stream = keys.stream("q", "low")
    entry = rclient.xadd(stream, {"job": PAYLOAD}).decode()
    rclient.set(keys.job("a"), f"{entry} q:low")
    assert status(scripts, keys, "")[0] == b"moved"  # read before the enqueue landed
    assert cancel(scripts, keys, "delayed 1 q:low") == b"moved"
    assert rclient.xlen(stream) == 1  # nothing touched
    placed = f"{entry} q:low"
    assert status(scripts, keys, placed)[:2] == [b"waiting", PAYLOAD]


def test_cancel_flags_a_running_entry_with_its_take_and_removes_a_waiting_one(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    stream = keys.stream("q", "low")
    rclient.xgroup_create(stream, GROUP, id="0", mkstream=True)
    entry = rclient.xadd(stream, {"job": PAYLOAD}).decode()
    placed = f"{entry} q:low"
    rclient.set(keys.job("a"), placed)
    rclient.xreadgroup(GROUP, "c1", {stream: ">"}, count=1)
    assert status(scripts, keys, placed)[0] == b"running"
    assert cancel(scripts, keys, placed) == b"running"
    assert rclient.get(keys.cancel_flag("a")) == entry.encode()  # names this take
    assert rclient.xlen(stream) == 1 and rclient.get(keys.job("a")) == placed.encode()
    # Acked by its worker, then enqueued again: waiting, so cancelling removes it.
    rclient.xack(stream, GROUP, entry)
    rclient.xdel(stream, entry)
    again = rclient.xadd(stream, {"job": PAYLOAD}).decode()
    rclient.set(keys.job("a"), f"{again} q:low")
    assert cancel(scripts, keys, f"{again} q:low") == b"cancelled"
    assert rclient.xlen(stream) == 0 and not rclient.exists(keys.job("a"))
    state, record, _, _ = status(scripts, keys, "")
    assert state == b"final"
    # The record is built from the job itself: its task, attempts so far, times.
    kept = json.loads(record)
    assert (kept["s"], kept["t"], kept["a"], kept["r"]) == ("cancelled", "t", 0, "cancelled")
    assert kept["f"] > 1.7e9


# The final records' store (_status.lua), through its three functions.
KEEP = source("_status") + "\nkeep_status(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])\n"  # type: ignore[arg-type]
READ = source("_status") + "\nreturn status_record(KEYS[1], ARGV[1], ARGV[2])\n"  # type: ignore[arg-type]
FORGET = source("_status") + "\nforget_status(KEYS[1], ARGV[1], ARGV[2])\n"  # type: ignore[arg-type]


def keep(rclient: redis.Redis, keys: Keys, job_id: str, record: bytes, ttl_ms: int) -> None:
    rclient.eval(KEEP, 1, keys.statuses(), job_id, status_shard(job_id), record, ttl_ms)


def read(rclient: redis.Redis, keys: Keys, job_id: str) -> bytes | None:
    found = rclient.eval(READ, 1, keys.statuses(), job_id, status_shard(job_id))
    return bytes(found) if found is not None else None


def test_a_final_record_is_kept_in_a_compact_hash_for_its_ttl_and_an_eighth_at_most(
    keys: Keys, rclient: redis.Redis
) -> None:
    keep(rclient, keys, "a", b"rec-a", 80_000)
    ((member, expiry),) = rclient.zrange(keys.statuses(), 0, -1, withscores=True)
    assert int(member) == expiry
    bucket = f"{keys.statuses()}:{member.decode()}:{status_shard('a')}"
    assert rclient.hgetall(bucket) == {b"a": b"rec-a"}
    assert rclient.object("encoding", bucket) == b"listpack"
    # A window is an eighth of the TTL: its hash lives a TTL after the window ends.
    assert (expiry - 80_000) % 10_000 == 0
    assert 80_000 - 1_000 <= rclient.pttl(bucket) <= 90_000
    assert rclient.pexpiretime(bucket) == rclient.pexpiretime(keys.statuses()) == expiry
    assert read(rclient, keys, "a") == b"rec-a"
    assert read(rclient, keys, "b") is None


def test_the_newest_window_answers_and_a_forget_clears_every_window(
    keys: Keys, rclient: redis.Redis
) -> None:
    """A job id used again: the record of the latest window is the one read; a purge's
    forget drops the id from every live window."""
    seconds, _ = rclient.time()
    older = (int(seconds) - 20) * 1000  # a window 20 s ago, of the same 80 s TTL
    older_expiry = older - older % 10_000 + 10_000 + 80_000
    rclient.zadd(keys.statuses(), {str(older_expiry): older_expiry})
    rclient.hset(f"{keys.statuses()}:{older_expiry}:{status_shard('a')}", "a", b"first")
    keep(rclient, keys, "a", b"second", 80_000)
    keep(rclient, keys, "b", b"other", 80_000)
    assert rclient.zcard(keys.statuses()) == 2
    assert read(rclient, keys, "a") == b"second"
    rclient.eval(FORGET, 1, keys.statuses(), "a", status_shard("a"))
    assert read(rclient, keys, "a") is None
    assert read(rclient, keys, "b") == b"other"


def test_a_thousand_records_of_one_window_stay_in_compact_hashes(
    keys: Keys, rclient: redis.Redis
) -> None:
    ids = [f"job-{n}" for n in range(1_000)]
    pipe = rclient.pipeline(transaction=False)
    for job_id in ids:
        pipe.eval(KEEP, 1, keys.statuses(), job_id, status_shard(job_id), job_id.encode(), 600_000)
    pipe.execute()
    assert all(read(rclient, keys, job_id) == job_id.encode() for job_id in ids[::50])
    buckets = list(rclient.scan_iter(match=keys.statuses() + ":*", count=10_000))
    # 4,096 shards (CRC-32 spreads these ids over 1,000 of them), one window or two.
    assert 800 <= len(buckets) <= 2_000
    assert {rclient.object("encoding", b) for b in buckets[:100]} == {b"listpack"}
