"""The streams backend's scripts, called directly against real Redis."""

from __future__ import annotations

from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from conftest import wait_until_sync
from lockgate.keys import GROUP, Keys
from lockgate.lua import AsyncScripts, ScriptCall, SyncScripts, source

LEVELS = ("critical", "normal", "low")


def run(scripts: SyncScripts, name: Any, keys: list[str], args: list[Any]) -> Any:
    return scripts.run_all([ScriptCall(name, keys, args)])[0]


def enqueue(
    scripts: SyncScripts, keys: Keys, *jobs: tuple[str, str, bytes] | tuple[str, str, bytes, int]
) -> list[Any]:
    """Enqueue (job id, level, payload[, delay ms]) on queue 'q'; no delay means now."""
    script_keys: list[str] = []
    args: list[Any] = []
    for job_id, level, payload, *delay in jobs:
        script_keys += [keys.job(job_id), keys.stream("q", level), keys.delayed("q", level)]
        args += [payload, delay[0] if delay else 0]
    return run(scripts, "enqueue_stream", script_keys, args)


Entries = list[tuple[int, str, dict[bytes, bytes]]]


def read_all(
    scripts: SyncScripts, keys: Keys, limit: int, quotas: list[int], consumer: str = "c1"
) -> tuple[list[int], Entries, list[bytes], int]:
    """read_stream over queue 'q', one stream per level: (dry, entries, last ids, next due ms).

    Entries come as (key index, id, fields).
    """
    streams = [keys.stream("q", level) for level in LEVELS]
    delayed = [keys.delayed("q", level) for level in LEVELS]
    args = [GROUP, consumer, limit, len(quotas), *quotas, 1, 2, 3]
    dry, flat, last_ids, next_due = run(scripts, "read_stream", streams + delayed, args)
    entries = [
        (flat[i], flat[i + 1].decode(), dict(zip(flat[i + 2][::2], flat[i + 2][1::2], strict=True)))
        for i in range(0, len(flat), 3)
    ]
    return dry, entries, last_ids, next_due


def read(
    scripts: SyncScripts, keys: Keys, limit: int, quotas: list[int], consumer: str = "c1"
) -> tuple[list[int], Entries, list[bytes]]:
    """:func:`read_all` with nothing delayed: asserts that no delayed job is reported."""
    dry, entries, last_ids, next_due = read_all(scripts, keys, limit, quotas, consumer)
    assert next_due == -1
    return dry, entries, last_ids


def now_ms(rclient: redis.Redis) -> int:
    seconds, micros = rclient.time()
    return seconds * 1000 + micros // 1000


def test_every_script_documents_its_keys_and_args() -> None:
    names = (
        "enqueue_stream", "read_stream", "ack_stream", "retry_stream", "dead_letter_stream",
        "reclaim_stream", "heartbeat_stream", "forget_consumers", "stats_stream",
    )  # fmt: skip
    for name in names:
        text = source(name)
        assert text.startswith(f"-- {name}.lua")
        assert "-- KEYS" in text and "-- ARGV" in text


def test_enqueue_stream_adds_and_dedups(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    first = enqueue(scripts, keys, ("a", "low", b"A"), ("b", "critical", b"B"))
    assert all(isinstance(entry_id, bytes) for entry_id in first)
    assert rclient.get(keys.job("a")) == first[0]
    assert rclient.get(keys.job("b")) == first[1]
    again = enqueue(scripts, keys, ("a", "normal", b"A2"), ("c", "low", b"C"))
    assert again[0] == 0
    assert isinstance(again[1], bytes)
    assert rclient.xlen(keys.stream("q", "normal")) == 0
    low = rclient.xrange(keys.stream("q", "low"))
    assert [(entry_id, fields) for entry_id, fields in low] == [
        (first[0], {b"job": b"A"}),
        (again[1], {b"job": b"C"}),
    ]
    assert rclient.zcard(keys.delayed("q", "low")) == 0


def test_enqueue_stream_delays_into_the_delayed_set_and_dedups(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    before = now_ms(rclient)
    replies = enqueue(scripts, keys, ("d", "low", b"D", 60_000), ("n", "low", b"N", 0))
    after = now_ms(rclient)
    assert replies[0] == b"delayed" and isinstance(replies[1], bytes) and replies[1] != 0
    # Not in the stream yet: in the delayed set, due by the server's clock.
    assert [fields for _, fields in rclient.xrange(keys.stream("q", "low"))] == [{b"job": b"N"}]
    ((payload, due),) = rclient.zrange(keys.delayed("q", "low"), 0, -1, withscores=True)
    assert payload == b"D"
    assert before + 60_000 <= due <= after + 60_000
    assert rclient.get(keys.job("d")) == b"delayed"
    # A delayed id is taken, whether the duplicate asks for a delay or not.
    assert enqueue(scripts, keys, ("d", "low", b"D2", 0), ("d", "low", b"D3", 5)) == [0, 0]
    assert rclient.zrange(keys.delayed("q", "low"), 0, -1) == [b"D"]
    assert rclient.xlen(keys.stream("q", "low")) == 1


def test_enqueue_stream_dedups_inside_one_call(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    replies = enqueue(scripts, keys, ("x", "low", b"1"), ("x", "low", b"2"), ("x", "high", b"3"))
    assert replies[0] != 0 and replies[1:] == [0, 0]
    assert rclient.xlen(keys.stream("q", "low")) == 1


def test_read_creates_the_group_at_zero(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    ids = enqueue(scripts, keys, ("a", "normal", b"A"), ("b", "normal", b"B"))
    assert not rclient.exists(keys.stream("q", "critical"))
    dry, entries, _ = read(scripts, keys, 8, [0, 0, 0])
    assert [(index, entry_id) for index, entry_id, _ in entries] == [
        (2, ids[0].decode()),
        (2, ids[1].decode()),
    ]
    assert [fields for _, _, fields in entries] == [{b"job": b"A"}, {b"job": b"B"}]
    for level in LEVELS:  # every stream now exists with the group
        groups = rclient.xinfo_groups(keys.stream("q", level))
        assert [group["name"] for group in groups] == [GROUP.encode()]
    assert dry == [1, 1, 1]


def fill(scripts: SyncScripts, keys: Keys, per_level: int) -> None:
    jobs = [
        (f"{level}-{n}", level, f"{level}-{n}".encode())
        for level in LEVELS
        for n in range(per_level)
    ]
    enqueue(scripts, keys, *jobs)


def levels_of(entries: list[tuple[int, str, dict[bytes, bytes]]]) -> list[int]:
    return [index for index, _, _ in entries]


def test_read_takes_quotas_then_fills_in_precedence_order(scripts: SyncScripts, keys: Keys) -> None:
    fill(scripts, keys, 10)
    dry, entries, last_ids = read(scripts, keys, 8, [2, 1, 1])
    # Pass 1: 2 critical, 1 normal, 1 low. Pass 2: the 4 left go to critical.
    assert levels_of(entries) == [1, 1, 2, 3, 1, 1, 1, 1]
    assert [fields[b"job"] for _, _, fields in entries][:2] == [b"critical-0", b"critical-1"]
    assert [fields[b"job"] for _, _, fields in entries][4:] == [
        b"critical-2",
        b"critical-3",
        b"critical-4",
        b"critical-5",
    ]
    assert dry == [0, 0, 0]
    assert last_ids == []


def test_read_fills_past_a_dry_level(scripts: SyncScripts, keys: Keys) -> None:
    fill(scripts, keys, 3)
    dry, entries, _ = read(scripts, keys, 8, [5, 2, 1])
    assert levels_of(entries) == [1, 1, 1, 2, 2, 3, 2, 3]
    # critical and normal returned fewer than asked; low gave all that was asked of it.
    assert dry == [1, 1, 0]


@pytest.mark.parametrize(
    ("limit", "quotas"), [(3, [5, 5, 5]), (1, [0, 0, 1]), (4, [0, 0, 0]), (2, [1, 1, 1])]
)
def test_read_never_returns_more_than_the_limit(
    scripts: SyncScripts, keys: Keys, limit: int, quotas: list[int]
) -> None:
    fill(scripts, keys, 10)
    _, entries, _ = read(scripts, keys, limit, quotas)
    assert len(entries) == limit
    expected = {
        (3, (5, 5, 5)): [1, 1, 1],
        (1, (0, 0, 1)): [3],
        (4, (0, 0, 0)): [1, 1, 1, 1],
        (2, (1, 1, 1)): [1, 2],
    }[(limit, tuple(quotas))]
    assert levels_of(entries) == expected


def test_read_moves_due_delayed_jobs_into_their_streams_first(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, ("soon", "normal", b"S", 1), ("later", "low", b"L", 600_000))
    dry, entries, last_ids, next_due = read_all(scripts, keys, 8, [1, 1, 1])
    # Depending on the server clock, "soon" may already be due; "later" never is.
    assert 0 < next_due <= 600_000
    assert [fields for _, _, fields in entries] in ([], [{b"job": b"S"}])
    due = rclient.zscore(keys.delayed("q", "normal"), "S")
    if due is not None:
        wait_until_sync(lambda: now_ms(rclient) > due, message="'soon' due")
        dry, entries, last_ids, next_due = read_all(scripts, keys, 8, [1, 1, 1])
    assert [(index, fields) for index, _, fields in entries] == [(2, {b"job": b"S"})]
    assert last_ids == []
    assert 590_000 < next_due <= 600_000
    assert rclient.zcard(keys.delayed("q", "normal")) == 0
    assert rclient.zrange(keys.delayed("q", "low"), 0, -1) == [b"L"]
    assert rclient.xlen(keys.stream("q", "low")) == 0
    # Moved, then delivered like any entry: pending until acked.
    assert rclient.xpending(keys.stream("q", "normal"), GROUP)["pending"] == 1
    assert dry == [1, 1, 1]


def test_read_reports_dry_and_last_ids_when_empty(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    ids = enqueue(scripts, keys, ("a", "critical", b"A"), ("b", "low", b"B"))
    _, entries, _ = read(scripts, keys, 8, [1, 1, 1])
    assert len(entries) == 2
    dry, entries, last_ids = read(scripts, keys, 8, [1, 1, 1])
    assert entries == []
    assert dry == [1, 1, 1]
    assert last_ids == [ids[0], b"0-0", ids[1]]
    # What a waiting worker would XREAD from: a new entry after these ids wakes it.
    streams = {keys.stream("q", level): last for level, last in zip(LEVELS, last_ids, strict=True)}
    assert rclient.xread(streams, count=1) == []
    new = enqueue(scripts, keys, ("c", "normal", b"C"))[0]
    woken = rclient.xread(streams, count=1)
    assert woken[0][0] == keys.stream("q", "normal").encode()
    assert woken[0][1][0][0] == new


def test_read_delivers_each_entry_to_one_consumer(scripts: SyncScripts, keys: Keys) -> None:
    fill(scripts, keys, 2)
    _, first, _ = read(scripts, keys, 4, [0, 0, 0], consumer="c1")
    _, second, _ = read(scripts, keys, 4, [0, 0, 0], consumer="c2")
    assert len(first) == 4 and len(second) == 2
    # Entry ids repeat across streams; (stream, id) identifies an entry.
    assert not {e[:2] for e in first} & {e[:2] for e in second}


def test_read_leaves_entries_pending_until_acked(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    ids = enqueue(scripts, keys, ("a", "low", b"A"))
    read(scripts, keys, 1, [0, 0, 1])
    pending = rclient.xpending_range(keys.stream("q", "low"), GROUP, "-", "+", 10)
    assert [(p["message_id"], p["consumer"]) for p in pending] == [(ids[0], b"c1")]


def test_ack_stream_acks_deletes_and_frees_ids(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    ids = enqueue(scripts, keys, ("a", "low", b"A"), ("b", "low", b"B"), ("c", "low", b"C"))
    read(scripts, keys, 3, [0, 0, 3])
    stream = keys.stream("q", "low")
    acked = run(
        scripts,
        "ack_stream",
        [stream, keys.job("a"), keys.job("b")],
        [GROUP, ids[0].decode(), ids[1].decode()],
    )
    assert acked == 2
    assert [entry_id for entry_id, _ in rclient.xrange(stream)] == [ids[2]]
    assert rclient.xpending(stream, GROUP)["pending"] == 1
    assert not rclient.exists(keys.job("a"), keys.job("b"))
    assert rclient.get(keys.job("c")) == ids[2]
    assert enqueue(scripts, keys, ("a", "low", b"A again"))[0] != 0


def test_a_late_ack_keeps_the_marker_of_a_newer_job(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    """c1 stalls; c2 takes its entry over and finishes it; the id is enqueued again.

    c1's late ack must not free the id of the newer job: only an ack that really
    acknowledged its entry deletes the marker.
    """
    stream = keys.stream("q", "low")
    ids = enqueue(scripts, keys, ("a", "low", b"A"))
    read(scripts, keys, 1, [0, 0, 1], consumer="c1")
    rclient.xclaim(stream, GROUP, "c2", 0, [ids[0]])
    assert run(scripts, "ack_stream", [stream, keys.job("a")], [GROUP, ids[0]]) == 1  # c2
    newer = enqueue(scripts, keys, ("a", "low", b"A again"))[0]
    assert isinstance(newer, bytes) and newer != ids[0]
    assert run(scripts, "ack_stream", [stream, keys.job("a")], [GROUP, ids[0]]) == 0  # c1
    assert rclient.get(keys.job("a")) == newer
    assert [entry_id for entry_id, _ in rclient.xrange(stream)] == [newer]
    assert enqueue(scripts, keys, ("a", "low", b"A third"))[0] == 0


def test_ack_stream_of_an_unknown_entry_acks_nothing(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    ids = enqueue(scripts, keys, ("a", "low", b"A"))
    read(scripts, keys, 1, [0, 0, 1])
    acked = run(scripts, "ack_stream", [keys.stream("q", "low"), keys.job("z")], [GROUP, "1-1"])
    assert acked == 0
    assert rclient.get(keys.job("a")) == ids[0]
    assert rclient.xpending(keys.stream("q", "low"), GROUP)["pending"] == 1


async def test_async_runner_runs_single_and_pipelined_calls(redis_url: str, keys: Keys) -> None:
    client = aioredis.Redis.from_url(redis_url)
    try:
        scripts = AsyncScripts(client)

        def call(job_id: str, payload: bytes) -> ScriptCall:
            script_keys = [keys.job(job_id), keys.stream("q", "low"), keys.delayed("q", "low")]
            return ScriptCall("enqueue_stream", script_keys, [payload, 0])

        one = await scripts.run(call("a", b"A"))
        assert isinstance(one[0], bytes)
        many = await scripts.run_all([call("a", b"A"), call("b", b"B")])
        assert many[0] == [0] and isinstance(many[1][0], bytes)
        entries = await client.xrange(keys.stream("q", "low"))
        assert [fields for _, fields in entries] == [{b"job": b"A"}, {b"job": b"B"}]
    finally:
        await client.aclose()
