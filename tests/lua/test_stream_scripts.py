"""The streams backend's scripts, called directly against real Redis.

Tests that need the server in a state the shared one must never be put in (out of memory)
run against a private ``redis-server`` of their own, started by :func:`private_redis`.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from conftest import LIVENESS_ARGS, wait_until_sync
from free_ports import free_port
from lockgate.backend.keys import GROUP, Keys
from lockgate.backend.lua import AsyncScripts, ScriptCall, SyncScripts, source

# Workers named here never beat: each counts as dead as it did before liveness.
pytestmark = pytest.mark.usefixtures("liveness_of_old")

LEVELS = ("critical", "normal", "low")
START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0
# Small enough that a 16 MiB junk key puts the server over it.
TIGHT_MEMORY = ("--maxmemory", "8mb", "--maxmemory-policy", "noeviction")
JUNK_BYTES = 16 * 2**20


@contextlib.contextmanager
def private_redis(directory: Path, *options: str) -> Iterator[redis.Redis]:
    """A ``redis-server`` child of the test on a free port, configured by ``options``.

    The shared server's configuration is never changed; a test that needs OOM (or any
    other server-wide state) gets its own server. Yields a client of it; on exit the
    client is closed and the server stopped with SIGTERM (SIGKILL if it hangs).
    """
    binary = shutil.which("redis-server")
    assert binary is not None, "redis-server is not on PATH"
    port = free_port()
    command = [
        binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--dir", str(directory), *options,
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10.0)

    def answers() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"redis-server exited with {process.returncode}: {command}")
        try:
            return bool(client.ping())
        except (redis.ConnectionError, redis.TimeoutError):
            return False

    try:
        wait_until_sync(answers, timeout=START_TIMEOUT, message="private redis-server answers")
        yield client
    finally:
        client.close()
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def fill_memory(client: redis.Redis, key: str) -> None:
    """Put a server started with :data:`TIGHT_MEMORY` over its limit; check it refuses.

    lockgate's library is loaded first, as a worker's first call would have: Redis refuses
    ``FUNCTION LOAD`` itself when over its limit.
    """
    SyncScripts(client).load()
    # A short command that allocates a lot: a SET of a big value would be refused, since its
    # query buffer counts as used memory; SETRANGE far out is checked while still under.
    client.setrange(key, JUNK_BYTES, b"x")
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        client.set(f"{key}:probe", b"1")


def run(scripts: SyncScripts, name: Any, keys: list[str], args: list[Any]) -> Any:
    return scripts.run_all([ScriptCall(name, keys, args)])[0]


def enqueue(
    scripts: SyncScripts, keys: Keys, *jobs: tuple[str, str, bytes] | tuple[str, str, bytes, int]
) -> list[Any]:
    """Enqueue (job id, level, payload[, delay ms]) on queue 'q'; no delay means now."""
    script_keys: list[str] = []
    args: list[Any] = []
    for job_id, level, payload, *delay in jobs:
        marker = keys.job(job_id)
        script_keys += [marker, keys.stream("q", level), keys.delayed("q", level), marker]
        args += [payload, delay[0] if delay else 0, 0]
    return run(scripts, "enqueue_stream", [*script_keys, keys.wake()], args)


Entries = list[tuple[int, str, dict[bytes, bytes]]]
NOT_CLAIMED = 2


def read_all(
    scripts: SyncScripts, keys: Keys, limit: int, quotas: list[int], consumer: str = "c1"
) -> tuple[list[int], Entries, list[bytes], int]:
    """read_stream over queue 'q', one stream per level: (dry, entries, last ids, next due ms).

    Entries come as (key index, id, fields); last ids end with the wake stream's. No job
    is claimed (no idempotent task is named).
    """
    streams = [keys.stream("q", level) for level in LEVELS]
    delayed = [keys.delayed("q", level) for level in LEVELS]
    args = [GROUP, consumer, limit, len(quotas), *quotas, 1, 2, 3, "q", "q", "q"]
    script_keys = [*streams, *delayed, keys.wake(), keys.paused()]
    dry, flat, last_ids, next_due = run(scripts, "read_stream", script_keys, args)
    entries = [
        (flat[i], flat[i + 1].decode(), dict(zip(flat[i + 2][::2], flat[i + 2][1::2], strict=True)))
        for i in range(0, len(flat), 5)
    ]
    assert all(state == NOT_CLAIMED for state in flat[3::5])
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
        "enqueue_stream", "read_stream", "reclaim_stream", "heartbeat_stream", "forget_consumers",
        "stats_stream",
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
    # The marker says where the job is: its entry id and its queue and level.
    assert rclient.get(keys.job("a")) == first[0] + b" q:low"
    assert rclient.get(keys.job("b")) == first[1] + b" q:critical"
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
    assert rclient.get(keys.job("d")) == b"delayed %d q:low" % due
    # A delayed id is taken, whether the duplicate asks for a delay or not.
    assert enqueue(scripts, keys, ("d", "low", b"D2", 0), ("d", "low", b"D3", 5)) == [0, 0]
    assert rclient.zrange(keys.delayed("q", "low"), 0, -1) == [b"D"]
    assert rclient.xlen(keys.stream("q", "low")) == 1


def test_a_retried_enqueue_answers_as_the_first_did_and_adds_nothing(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    """The same call again (its reply was lost, the client retried): its own jobs are
    there, byte for byte, so it gets the first reply (entry id, 'delayed'), not 0; another
    job under a taken id still gets 0."""
    jobs = [("a", "low", b"A"), ("d", "low", b"D", 60_000)]
    first = enqueue(scripts, keys, *jobs)
    assert enqueue(scripts, keys, *jobs) == first
    assert first[1] == b"delayed"
    assert enqueue(scripts, keys, ("a", "low", b"A2"), ("d", "low", b"D2", 60_000)) == [0, 0]
    assert rclient.xlen(keys.stream("q", "low")) == 1
    assert rclient.zcard(keys.delayed("q", "low")) == 1
    # An id twice in one call counts once, the retry included.
    twice = [("t", "low", b"T"), ("t", "low", b"T")]
    first_twice = enqueue(scripts, keys, *twice)
    assert first_twice[1] == 0 and enqueue(scripts, keys, *twice) == first_twice
    # A marker this backend did not write (the sorted backend's 'sorted'): a duplicate.
    rclient.set(keys.job("s"), "sorted")
    assert enqueue(scripts, keys, ("s", "low", b"S"), ("u", "low", b"U"))[0] == 0
    assert rclient.xlen(keys.stream("q", "low")) == 3


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
    assert last_ids == [ids[0], b"0-0", ids[1], b"0-0"]  # the wake stream does not exist
    # What a waiting worker would XREAD from: a new entry after these ids wakes it.
    levels = zip(LEVELS, last_ids[:-1], strict=True)
    streams = {keys.stream("q", level): last for level, last in levels}
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


def test_enqueue_stream_wakes_idle_workers_for_delayed_jobs_only(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, ("now", "low", b"N"))
    assert not rclient.exists(keys.wake())  # an immediate job wakes workers by its own stream
    enqueue(scripts, keys, ("d1", "low", b"D1", 60_000), ("d2", "normal", b"D2", 60_000))
    ((_, fields),) = rclient.xrange(keys.wake())  # one entry per call, not per job
    assert fields == {b"due": b"1"}
    enqueue(scripts, keys, ("d1", "low", b"again", 5))  # taken: nothing was scheduled
    assert rclient.xlen(keys.wake()) == 1
    for n in range(40):
        enqueue(scripts, keys, (f"n{n}", "low", b"N", 60_000))
    assert rclient.xlen(keys.wake()) == 16  # MAXLEN 16: the stream stays short


def test_read_promotes_every_due_job_by_the_server_clock(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    # Due long ago (scores are server ms), on two levels; one more not due for 10 minutes.
    rclient.zadd(keys.delayed("q", "low"), {b"L1": 1, b"L2": 2})
    rclient.zadd(keys.delayed("q", "critical"), {b"C": 3})
    later = now_ms(rclient) + 600_000
    rclient.zadd(keys.delayed("q", "normal"), {b"N": later})
    dry, entries, last_ids, next_due = read_all(scripts, keys, 8, [1, 1, 1])
    # Moved in due order, then read like any entry (critical first).
    assert [(index, fields[b"job"]) for index, _, fields in entries] == [
        (1, b"C"),
        (3, b"L1"),
        (3, b"L2"),
    ]
    assert rclient.zcard(keys.delayed("q", "low")) == 0
    assert rclient.zcard(keys.delayed("q", "critical")) == 0
    assert rclient.zrange(keys.delayed("q", "normal"), 0, -1) == [b"N"]
    assert 590_000 < next_due <= 600_000
    assert (dry, last_ids) == ([1, 1, 1], [])


def test_read_reports_the_wake_streams_last_id_to_block_on(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, ("d", "low", b"D", 600_000))
    ((wake_id, _),) = rclient.xrange(keys.wake())
    _, entries, last_ids, _ = read_all(scripts, keys, 8, [1, 1, 1])
    assert entries == []
    assert last_ids == [b"0-0", b"0-0", b"0-0", wake_id]
    # What an idle worker XREADs from: a later delayed job (or retry) wakes it, so it
    # re-reads the next due time instead of sleeping past it.
    streams = [*(keys.stream("q", level) for level in LEVELS), keys.wake()]
    after = dict(zip(streams, last_ids, strict=True))
    assert rclient.xread(after) == []
    enqueue(scripts, keys, ("e", "normal", b"E", 1_000))
    ((woken_by, (entry,)),) = rclient.xread(after)
    assert woken_by == keys.wake().encode()
    assert entry[0] > wake_id
    # Once something is read, no ids are reported (the worker does not block).
    enqueue(scripts, keys, ("n", "low", b"N"))
    assert read_all(scripts, keys, 8, [1, 1, 1])[2] == []


def test_read_under_oom_reads_what_is_queued_and_moves_due_jobs_in(tmp_path: Path) -> None:
    """Defect 6: with maxmemory + noeviction the read must go on (draining frees memory).
    It is an ``allow-oom`` function, so it also moves a due job into its stream: a move,
    the ZREM freeing about what the XADD takes, so the job runs on time instead of
    waiting for memory to be freed."""
    with private_redis(tmp_path, *TIGHT_MEMORY) as client:
        scripts, keys = SyncScripts(client), Keys("oom")
        ids = enqueue(scripts, keys, ("a", "low", b"A"), ("b", "normal", b"B"))
        # The groups exist (a worker has read before); a job became due meanwhile.
        for level in LEVELS:
            client.xgroup_create(keys.stream("q", level), GROUP, id="0", mkstream=True)
        client.zadd(keys.delayed("q", "low"), {b"DUE": 1})
        fill_memory(client, f"{keys.prefix}:junk")

        dry, entries, _, next_due = read_all(scripts, keys, 8, [1, 1, 1])
        assert [(index, entry_id) for index, entry_id, _ in entries[:2]] == [
            (2, ids[1].decode()),
            (3, ids[0].decode()),
        ]
        assert [(index, fields) for index, _, fields in entries[2:]] == [(3, {b"job": b"DUE"})]
        assert client.zcard(keys.delayed("q", "low")) == 0
        assert next_due == -1
        assert dry == [1, 1, 1]
        # Enqueueing more is still refused: producers feel the limit, workers drain.
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            enqueue(scripts, keys, ("c", "low", b"C"))


def test_read_under_oom_still_hands_out_an_idempotent_job(tmp_path: Path) -> None:
    """The read claims jobs of idempotent tasks as it reads them; a claim that a full
    memory refuses must not fail the read (draining frees memory): the job comes back
    unclaimed, or claimed when Redis let the script's writes through."""
    with private_redis(tmp_path, *TIGHT_MEMORY) as client:
        scripts, keys = SyncScripts(client), Keys("oom")
        payload = b'{"id":"pay-1","task":"charge","queue":"q","level":"low"}'
        (entry_id,) = enqueue(scripts, keys, ("pay-1", "low", payload))
        for level in LEVELS:
            client.xgroup_create(keys.stream("q", level), GROUP, id="0", mkstream=True)
        fill_memory(client, f"{keys.prefix}:junk")

        streams = [keys.stream("q", level) for level in LEVELS]
        delayed = [keys.delayed("q", level) for level in LEVELS]
        claims = [keys.claim(""), "tok", 30_000, keys.done_bucket_prefix, 0, "charge"]
        args = [GROUP, "c1", 8, 3, 1, 1, 1, 1, 2, 3, "q", "q", "q", *claims]
        script_keys = [*streams, *delayed, keys.wake(), keys.paused()]
        _, flat, _, _ = run(scripts, "read_stream", script_keys, args)
        assert flat[1] == entry_id
        state = flat[3]
        claim_key = keys.claim(Keys.job_claim_name("charge", "pay-1"))
        assert state in (1, NOT_CLAIMED)
        assert client.get(claim_key) == (
            f"c:tok:{entry_id.decode()}".encode() if state == 1 else None
        )


def reclaim(
    scripts: SyncScripts, keys: Keys, streams: list[str], consumer: str, min_idle_ms: int
) -> tuple[int, str, dict[bytes, bytes], int, int]:
    """reclaim_stream, every worker taken for dead once idle that long (serving_forever):
    (key index or 0, entry id, fields, delivery count, deleted dropped)."""
    alive = keys.liveness()
    args = [GROUP, consumer, min_idle_ms, *LIVENESS_ARGS]
    index, entry_id, fields, count, dropped = run(
        scripts, "reclaim_stream", [alive, *streams], args
    )
    values = dict(zip(fields[::2], fields[1::2], strict=True))
    return index, entry_id.decode(), values, count, dropped


def idle_ms(rclient: redis.Redis, stream: str, entry_id: bytes | str) -> int:
    """How long ago an entry was last delivered (or claimed), by XPENDING."""
    (row,) = rclient.xpending_range(stream, GROUP, min=entry_id, max=entry_id, count=1)
    return int(row["time_since_delivered"])


def pending_consumers(rclient: redis.Redis, stream: str) -> dict[bytes, int]:
    summary = rclient.xpending(stream, GROUP)
    return {row["name"]: int(row["pending"]) for row in summary["consumers"]}


def test_reclaim_finds_a_dead_workers_entry_behind_1000_live_ones(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    """Defect 2: XAUTOCLAIM from 0-0 COUNT 1 scans only 10 PEL entries per call, so ten
    live ones ahead of a dead worker's entry hid it. Here 1,000 are ahead of it."""
    stream = keys.stream("q", "low")
    live_ids = enqueue(scripts, keys, *[(f"live{n}", "low", b"L") for n in range(1000)])
    (dead_id,) = enqueue(scripts, keys, ("dead", "low", b"DEAD"))
    assert len(read(scripts, keys, 1000, [0, 0, 1000], consumer="live")[1]) == 1000
    assert read(scripts, keys, 1, [0, 0, 1], consumer="dead")[1][0][1] == dead_id.decode()
    # The dead worker's entry ages past the min idle (100 ms) ...
    wait_until_sync(lambda: idle_ms(rclient, stream, dead_id) >= 200, message="dead entry idle")
    # ... while the live worker heartbeats its 1,000 (XCLAIM JUSTID, as heartbeat_stream
    # does). Touch and reclaim run in one MULTI, so on a slow machine the live entries
    # cannot age past the min idle between the two.
    script = rclient.register_script(source("reclaim_stream"))
    with rclient.pipeline(transaction=True) as pipe:
        pipe.xclaim(stream, GROUP, "live", 0, live_ids, justid=True)
        script(
            keys=[keys.liveness(), stream],
            args=[GROUP, "rescuer", 100, *LIVENESS_ARGS],
            client=pipe,
        )
        touched, (index, entry_id, fields, count, dropped) = pipe.execute()
    assert len(touched) == 1000
    # One call finds it, however many live entries come first in the PEL.
    assert (index, entry_id, fields) == (1, dead_id, [b"job", b"DEAD"])
    assert count == 2  # delivered to the dead worker, then to the rescuer
    assert dropped == 0
    assert pending_consumers(rclient, stream) == {b"live": 1000, b"rescuer": 1}


def test_reclaim_takes_nothing_that_is_not_idle_long_enough(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    enqueue(scripts, keys, ("a", "low", b"A"), ("b", "low", b"B"))
    read(scripts, keys, 2, [0, 0, 2], consumer="c1")
    stream = keys.stream("q", "low")
    assert reclaim(scripts, keys, [stream], "c2", 600_000) == (0, "", {}, 0, 0)
    assert pending_consumers(rclient, stream) == {b"c1": 2}


def test_reclaim_skips_entries_deleted_while_pending(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    stream = keys.stream("q", "low")
    gone, kept = enqueue(scripts, keys, ("gone", "low", b"G"), ("kept", "low", b"K"))
    read(scripts, keys, 2, [0, 0, 2], consumer="dead")
    rclient.xdel(stream, gone)  # pending, but its entry no longer exists
    wait_until_sync(lambda: idle_ms(rclient, stream, kept) >= 100, message="entries idle")
    # Missing streams (NOGROUP) come first in KEYS and are passed over.
    missing = keys.stream("other", "low")
    index, entry_id, fields, count, dropped = reclaim(scripts, keys, [missing, stream], "c2", 50)
    assert (index, entry_id, fields, count) == (2, kept.decode(), {b"job": b"K"}, 2)
    assert dropped == 1
    # Redis 7 dropped the deleted entry from the PEL on the XCLAIM: it is not tried again.
    pending = rclient.xpending_range(stream, GROUP, "-", "+", 10)
    assert [(row["message_id"], row["consumer"]) for row in pending] == [(kept, b"c2")]
    assert reclaim(scripts, keys, [missing, stream], "c3", 600_000)[0] == 0


async def test_async_runner_runs_single_and_pipelined_calls(redis_url: str, keys: Keys) -> None:
    client = aioredis.Redis.from_url(redis_url)
    try:
        scripts = AsyncScripts(client)

        def call(job_id: str, payload: bytes) -> ScriptCall:
            script_keys = [
                keys.job(job_id), keys.stream("q", "low"), keys.delayed("q", "low"),
                keys.job(job_id), keys.wake(),
            ]  # fmt: skip
            return ScriptCall("enqueue_stream", script_keys, [payload, 0, 0])

        one = await scripts.run(call("a", b"A"))
        assert isinstance(one[0], bytes)
        many = await scripts.run_all([call("a", b"A2"), call("b", b"B")])
        assert many[0] == [0] and isinstance(many[1][0], bytes)
        entries = await client.xrange(keys.stream("q", "low"))
        assert [fields for _, fields in entries] == [{b"job": b"A"}, {b"job": b"B"}]
    finally:
        await client.aclose()
