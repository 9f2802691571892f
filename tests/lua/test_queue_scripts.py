"""Pausing and purging a queue, script by script, against real Redis: the read scripts
skip a paused queue (read_stream, take_sorted), and the purge scripts delete waiting jobs
only (purge_stream, purge_sorted)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from conftest import LIVENESS_ARGS, unacked_reads
from lockgate.backend.keys import GROUP, Keys, SortedKeys, status_shard
from lockgate.backend.lua import ScriptCall, SyncScripts, source

# Workers named here never beat: each counts as dead as it did before liveness.
pytestmark = pytest.mark.usefixtures("liveness_of_old")

LEVEL = "normal"


def run(scripts: SyncScripts, name: Any, keys: list[str], args: list[Any]) -> Any:
    return scripts.run_all([ScriptCall(name, keys, args)])[0]


def payload(job_id: str, queue: str, task: str = "t") -> str:
    return json.dumps({"id": job_id, "task": task, "queue": queue, "level": LEVEL})


def enqueue(
    scripts: SyncScripts, keys: Keys, queue: str, *job_ids: str, delay_ms: int = 0
) -> list[bytes]:
    """enqueue_stream of jobs of task 't' on ``queue``'s one level: their entry ids."""
    script_keys: list[str] = []
    args: list[Any] = []
    for job_id in job_ids:
        marker = keys.job(job_id)
        script_keys += [marker, keys.stream(queue, LEVEL), keys.delayed(queue, LEVEL), marker]
        args += [payload(job_id, queue), delay_ms, 0]
    return list(run(scripts, "enqueue_stream", [*script_keys, keys.wake()], args))


def read(
    scripts: SyncScripts, keys: Keys, queues: list[str], limit: int = 10
) -> tuple[list[int], list[str], list[bytes], int]:
    """read_stream over one stream per queue (one level): (dry, job ids, last ids, next
    due ms)."""
    streams = [keys.stream(queue, LEVEL) for queue in queues]
    delayed = [keys.delayed(queue, LEVEL) for queue in queues]
    args = [GROUP, "c1", limit, 1, limit, *[1] * len(queues), *queues]
    script_keys = [*streams, *delayed, keys.wake(), keys.paused()]
    dry, flat, last_ids, next_due = run(scripts, "read_stream", script_keys, args)
    fields = [dict(zip(f[::2], f[1::2], strict=True)) for f in flat[2::5]]
    job_ids = [json.loads(f[b"job"])["id"] for f in fields]
    return dry, job_ids, last_ids, next_due


def test_the_purge_scripts_document_their_keys_and_args() -> None:
    for name in ("purge_stream", "purge_sorted"):
        text = source(name)
        assert text.startswith(f"-- {name}.lua")
        for part in ("-- KEYS", "-- ARGV", "-- Touches", "-- Returns"):
            assert part in text, (name, part)


def test_read_stream_skips_the_streams_of_a_paused_queue(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, "mail", "m1", "m2")
    enqueue(scripts, keys, "web", "w1")
    rclient.zadd(keys.paused(), {"mail": 0})

    dry, job_ids, last_ids, _ = read(scripts, keys, ["mail", "web"])
    assert job_ids == ["w1"]
    assert dry == [1, 1]  # a paused queue counts as dry: the policy banks nothing for it
    assert last_ids == []  # something was read: no wait follows

    # Nothing read: the paused stream names no last id (its new jobs must not wake an
    # idle worker), the others and the wake stream do.
    dry, job_ids, last_ids, next_due = read(scripts, keys, ["mail", "web"])
    assert (job_ids, dry, next_due) == ([], [1, 1], -1)
    assert last_ids[0] == b""
    assert last_ids[1] == rclient.xrevrange(keys.stream("web", LEVEL), count=1)[0][0]
    assert last_ids[2] == b"0-0"  # the wake stream: none yet (a resume XADDs it)

    rclient.zrem(keys.paused(), "mail")
    _, job_ids, _, _ = read(scripts, keys, ["mail", "web"])
    assert job_ids == ["m1", "m2"]


def test_a_paused_queue_s_due_delayed_jobs_move_into_its_stream_and_wait_there(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, "mail", "d1", delay_ms=60_000)
    rclient.zadd(keys.delayed("mail", LEVEL), {payload("d1", "mail"): 0})  # due now
    rclient.zadd(keys.paused(), {"mail": 0})

    _, job_ids, _, next_due = read(scripts, keys, ["mail"])
    assert job_ids == []
    assert next_due == -1  # moved: no due time left to wake up for, nothing spins
    assert rclient.zcard(keys.delayed("mail", LEVEL)) == 0
    ((entry_id, _),) = rclient.xrange(keys.stream("mail", LEVEL))
    assert rclient.get(keys.job("d1")) == entry_id + b" mail:normal"

    rclient.zrem(keys.paused(), "mail")
    assert read(scripts, keys, ["mail"])[1] == ["d1"]


def sorted_enqueue(scripts: SyncScripts, keys: Keys, q: SortedKeys, *job_ids: str) -> None:
    script_keys = [q.waiting, q.payloads, q.ranks, q.clock, q.wake, q.delayed]
    args: list[Any] = []
    for job_id in job_ids:
        script_keys += [keys.job(job_id), keys.job(job_id)]
        args += [job_id, 0, payload(job_id, "mail"), 0, 0]
    assert run(scripts, "enqueue_sorted", script_keys, args) == [1] * len(job_ids)


def take(scripts: SyncScripts, keys: Keys, q: SortedKeys, limit: int = 10) -> list[bytes]:
    """take_sorted by worker 'w1': the ids taken."""
    script_keys = [
        q.waiting, q.inflight, q.payloads, q.ranks, q.delayed, q.deliveries, q.owners, q.wake,
        keys.paused(), keys.liveness(),
    ]  # fmt: skip
    args = [limit, 30_000, "w1", *LIVENESS_ARGS, 0, 0]
    taken, _, _, _ = run(scripts, "take_sorted", script_keys, args)
    return list(taken[0::6])


def test_take_sorted_takes_nothing_from_a_paused_queue(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    q = keys.sorted_keys("mail")
    sorted_enqueue(scripts, keys, q, "a", "b")
    rclient.zadd(q.delayed, {"c": 0})  # due now
    rclient.hset(q.payloads, "c", payload("c", "mail"))
    rclient.hset(q.ranks, "c", 5)
    rclient.zadd(keys.paused(), {"mail": 0, "other": 0})

    assert take(scripts, keys, q) == []
    assert rclient.zcard(q.inflight) == 0
    assert rclient.zrange(q.waiting, 0, -1) == [b"c", b"a", b"b"]  # c moved, and waits

    rclient.zrem(keys.paused(), "mail")
    assert take(scripts, keys, q) == [b"c", b"a", b"b"]


def purge_stream(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys, stream: str, entries: list[bytes]
) -> int:
    """purge_stream of some entries of jobs enqueued by :func:`enqueue`, as a purge calls
    it: with the marker of each entry's job (read before the call)."""
    by_entry = {e: json.loads(f[b"job"])["id"] for e, f in rclient.xrange(stream)}
    script_keys, args = [stream, keys.statuses()], [GROUP]
    for entry in entries:
        job_id = by_entry.get(entry, "")
        script_keys += keys.job_record_keys(job_id)
        args += [entry, job_id, status_shard(job_id)]
    return int(run(scripts, "purge_stream", script_keys, args))


@pytest.fixture
def mail(keys: Keys) -> str:
    return keys.stream("mail", LEVEL)


def test_purge_stream_deletes_waiting_entries_in_chunks_and_frees_their_ids(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis, mail: str
) -> None:
    entries = enqueue(scripts, keys, "mail", "a", "b", "c", "d", "e")
    assert purge_stream(scripts, rclient, keys, mail, entries[:2]) == 2
    assert purge_stream(scripts, rclient, keys, mail, entries[2:4]) == 2
    assert [e for e, _ in rclient.xrange(mail)] == entries[4:]
    assert [job_id for job_id in "abcde" if rclient.exists(keys.job(job_id))] == ["e"]
    # Again: nothing is left to delete there.
    assert purge_stream(scripts, rclient, keys, mail, entries[:4]) == 0


def test_purge_stream_leaves_pending_entries_and_their_markers(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis, mail: str
) -> None:
    entries = enqueue(scripts, keys, "mail", "run", "wait1", "wait2")
    assert unacked_reads(rclient, mail) == [entries[0]]  # 'run' is being run
    # The caller read all three before the worker's read: the script itself tells.
    assert purge_stream(scripts, rclient, keys, mail, entries) == 2
    assert [e for e, _ in rclient.xrange(mail)] == [entries[0]]
    assert rclient.get(keys.job("run")) == entries[0] + b" mail:normal"
    assert not rclient.exists(keys.job("wait1")) and not rclient.exists(keys.job("wait2"))
    assert rclient.xpending(mail, GROUP)["pending"] == 1


def test_purge_stream_deletes_only_a_marker_that_names_the_entry(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis, mail: str
) -> None:
    (entry,) = enqueue(scripts, keys, "mail", "a")
    rclient.set(keys.job("a"), "delayed 1 mail:normal")  # another job under the id now
    undecodable = rclient.xadd(mail, {"job": b"\xff not json"})
    # The id of an entry that cannot be decoded is unknown: the marker of the id ''.
    args = [GROUP, entry, "a", status_shard("a"), undecodable, "", status_shard("")]
    script_keys = [mail, keys.statuses(), *keys.job_record_keys("a"), *keys.job_record_keys("")]
    assert run(scripts, "purge_stream", script_keys, args) == 2
    assert rclient.xlen(mail) == 0
    assert rclient.get(keys.job("a")) == b"delayed 1 mail:normal"


def test_purge_stream_of_a_missing_stream_deletes_nothing(
    scripts: SyncScripts, keys: Keys, mail: str
) -> None:
    script_keys = [mail, keys.statuses(), *keys.job_record_keys("a")]
    args = [GROUP, "1-0", "a", status_shard("a")]
    assert run(scripts, "purge_stream", script_keys, args) == 0


def test_purge_sorted_deletes_waiting_jobs_and_leaves_taken_ones(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    q = keys.sorted_keys("mail")
    sorted_enqueue(scripts, keys, q, "run", "a", "b", "c")
    assert take(scripts, keys, q, limit=1) == [b"run"]
    ids = ["run", "a", "b"]
    script_keys = [q.waiting, q.payloads, q.ranks, q.deliveries, q.owners, keys.statuses()]
    records = [k for job_id in ids for k in keys.job_record_keys(job_id)]
    args = [v for job_id in ids for v in (job_id, status_shard(job_id))]
    assert run(scripts, "purge_sorted", [*script_keys, *records], args) == 2
    assert rclient.zrange(q.waiting, 0, -1) == [b"c"]
    assert rclient.zrange(q.inflight, 0, -1) == [b"run"]
    assert sorted(rclient.hkeys(q.payloads)) == [b"c", b"run"]
    assert sorted(rclient.hkeys(q.ranks)) == [b"c", b"run"]
    assert rclient.hkeys(q.owners) == [b"run"] and rclient.hkeys(q.deliveries) == [b"run"]
    assert [job_id for job_id in ("run", "a", "b", "c") if rclient.exists(keys.job(job_id))] == [
        "run", "c"
    ]  # fmt: skip
    # A second chunk of the same ids finds nothing left.
    assert run(scripts, "purge_sorted", [*script_keys, *records], args) == 0
