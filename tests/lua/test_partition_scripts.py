"""The scripts a partitioned namespace adds, called directly on Redis: ``peek_stream`` (a
partition's due delayed jobs move, then the jobs waiting in each stream are counted),
``wake_workers`` (one wake-up item per job) and the done marker of a user claim, whose
prefix is its own bucket (``_done_marker.lua``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from conftest import unacked_reads
from lockgate.backend.keys import GROUP, Keys, done_marker_place
from lockgate.backend.lua import ScriptCall, SyncScripts, source
from lockgate.backend.partitions import Layout, partition_tags

PARTITIONS = 4
WAKE_TTL_MS = 600_000
HOUR_MS = 3_600_000


def run(scripts: SyncScripts, name: Any, script_keys: list[str], args: list[Any]) -> Any:
    return scripts.run_all([ScriptCall(name, script_keys, args)])[0]


@pytest.fixture
def part(namespace: str, rclient: redis.Redis) -> Iterator[Keys]:
    """The keys of partition 1 of the test namespace; at teardown every key under the
    namespace's partition and claim tags goes (the namespace fixture deletes only the
    namespace's own tag)."""
    yield Keys(namespace, partition_tags(namespace, PARTITIONS)[1])
    for key in list(rclient.scan_iter(match=f"lockgate:{{{namespace}/*", count=10_000)):
        rclient.unlink(key)


def enqueue(
    scripts: SyncScripts, keys: Keys, *jobs: tuple[str, str, str, int]
) -> list[Any]:  # fmt: skip
    """enqueue_stream of (job id, queue, level, delay ms) jobs; the payload is the job's
    JSON with its id (so a promotion can point its marker at the new entry)."""
    script_keys: list[str] = []
    args: list[Any] = []
    for job_id, queue, level, delay in jobs:
        marker = keys.job(job_id)
        script_keys += [marker, keys.stream(queue, level), keys.delayed(queue, level), marker]
        args += [f'{{"id": "{job_id}"}}', delay, 0]
    return list(run(scripts, "enqueue_stream", [*script_keys, keys.wake()], args))


def peek(scripts: SyncScripts, keys: Keys, places: list[tuple[str, str]]) -> tuple[list[int], int]:
    """peek_stream over (queue, level) streams: (waiting per stream, next due ms)."""
    streams = [keys.stream(queue, level) for queue, level in places]
    delayed = [keys.delayed(queue, level) for queue, level in places]
    queues = [queue for queue, _ in places]
    waiting, next_due = run(
        scripts, "peek_stream", [*streams, *delayed, keys.paused()], [GROUP, *queues]
    )
    return [int(n) for n in waiting], int(next_due)


def server_ms(rclient: redis.Redis) -> int:
    seconds, micros = rclient.time()
    return int(seconds) * 1000 + int(micros) // 1000


@pytest.mark.parametrize("name", ["peek_stream", "wake_workers"])
def test_every_script_documents_its_keys_and_args(name: Any) -> None:
    text = source(name)
    assert text.startswith(f"-- {name}.lua")
    assert "-- KEYS" in text and "-- ARGV" in text


# peek_stream


def test_peek_counts_the_entries_not_pending_in_the_group(
    scripts: SyncScripts, part: Keys, rclient: redis.Redis
) -> None:
    enqueue(scripts, part, *((f"l{n}", "q", "low", 0) for n in range(5)))
    enqueue(scripts, part, ("c0", "q", "critical", 0), ("c1", "q", "critical", 0))
    places = [("q", "critical"), ("q", "normal"), ("q", "low")]
    assert peek(scripts, part, places) == ([2, 0, 5], -1)
    low = part.stream("q", "low")
    taken = unacked_reads(rclient, low, count=2)  # running: pending in the group
    assert peek(scripts, part, places) == ([2, 0, 3], -1)
    # One of them finished as a settle ends it (XACK + XDEL): still 3 waiting of 4.
    rclient.xack(low, GROUP, taken[0])
    rclient.xdel(low, taken[0])
    assert rclient.xlen(low) == 4
    assert peek(scripts, part, places) == ([2, 0, 3], -1)
    # Another group's pending entries are not lockgate's: they change nothing.
    rclient.xgroup_create(low, "other", id="0")
    rclient.xreadgroup("other", "x", {low: ">"}, count=4)
    assert peek(scripts, part, places) == ([2, 0, 3], -1)
    # The peek read only: the normal stream it counted was not created.
    assert not rclient.exists(part.stream("q", "normal"))


def test_peek_counts_a_stream_with_no_group_yet(
    scripts: SyncScripts, part: Keys, rclient: redis.Redis
) -> None:
    enqueue(scripts, part, *((f"j{n}", "q", "normal", 0) for n in range(3)))
    assert peek(scripts, part, [("q", "normal"), ("q", "low")]) == ([3, 0], -1)
    # Counting makes no group: a worker's read creates it (at 0) later.
    assert rclient.xinfo_groups(part.stream("q", "normal")) == []


def test_peek_counts_nothing_of_a_paused_queue(
    scripts: SyncScripts, part: Keys, rclient: redis.Redis
) -> None:
    enqueue(scripts, part, ("p0", "paused", "low", 0), ("p1", "paused", "low", 0))
    enqueue(scripts, part, ("r0", "run", "low", 0))
    places = [("paused", "low"), ("run", "low")]
    assert peek(scripts, part, places) == ([2, 1], -1)
    rclient.zadd(part.paused(), {"paused": 0})
    assert peek(scripts, part, places) == ([0, 1], -1)
    # Another partition's pause is not this one's.
    other = Keys(part.namespace, partition_tags(part.namespace, PARTITIONS)[2])
    rclient.zadd(other.paused(), {"run": 0})
    assert peek(scripts, part, places) == ([0, 1], -1)
    rclient.zrem(part.paused(), "paused")
    assert peek(scripts, part, places) == ([2, 1], -1)


def test_peek_moves_due_delayed_jobs_first(
    scripts: SyncScripts, part: Keys, rclient: redis.Redis
) -> None:
    before = server_ms(rclient)
    replies = enqueue(
        scripts, part, ("d0", "q", "low", 60_000), ("d1", "q", "low", 60_000),
        ("d2", "q", "low", 60_000), ("n0", "q", "low", 0),
    )  # fmt: skip
    assert replies[:3] == [b"delayed"] * 3
    delayed = part.delayed("q", "low")
    # Two of them fall due (their due time moved into the past), d1 before d0.
    rclient.zadd(delayed, {'{"id": "d1"}': 1, '{"id": "d0"}': 2}, xx=True)
    waiting, next_due = peek(scripts, part, [("q", "low")])
    after = server_ms(rclient)
    assert waiting == [3]
    assert before + 60_000 - after <= next_due <= 60_000
    assert rclient.zrange(delayed, 0, -1) == [b'{"id": "d2"}']
    entries = rclient.xrange(part.stream("q", "low"))
    assert [fields[b"job"] for _, fields in entries] == [
        b'{"id": "n0"}', b'{"id": "d1"}', b'{"id": "d0"}'
    ]  # fmt: skip
    # The moved jobs' markers (in this partition) point at their new entries.
    for (entry_id, _), job_id in zip(entries[1:], ["d1", "d0"], strict=True):
        assert rclient.get(part.job(job_id)) == entry_id + b" q:low"
    assert bytes(rclient.get(part.job("d2")) or b"").startswith(b"delayed ")
    # The last delayed job moves too: then nothing is due any more.
    rclient.zadd(delayed, {'{"id": "d2"}': 3}, xx=True)
    assert peek(scripts, part, [("q", "low")]) == ([4], -1)
    assert not rclient.exists(delayed)


def test_peek_moves_a_paused_queues_due_jobs_without_counting_them(
    scripts: SyncScripts, part: Keys, rclient: redis.Redis
) -> None:
    enqueue(scripts, part, ("d0", "q", "low", 60_000))
    rclient.zadd(part.paused(), {"q": 0})
    rclient.zadd(part.delayed("q", "low"), {'{"id": "d0"}': 1}, xx=True)
    assert peek(scripts, part, [("q", "low")]) == ([0], -1)
    assert rclient.xlen(part.stream("q", "low")) == 1


# wake_workers


def test_wake_workers_pushes_one_item_per_job_up_to_the_most(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    lists = [keys.wakeup("a"), keys.wakeup("b"), keys.wakeup("c")]
    assert run(scripts, "wake_workers", lists, [5, 3, 9, 0]) == 3 + 5
    assert [rclient.llen(name) for name in lists] == [3, 5, 0]
    assert not rclient.exists(keys.wakeup("c"))  # nothing pushed, nothing made
    for name in lists[:2]:
        assert 0 < rclient.pttl(name) <= WAKE_TTL_MS
    # More items than the most a list keeps: trimmed to the most.
    assert run(scripts, "wake_workers", lists, [5, 4, 0, 1]) == 4 + 1
    assert [rclient.llen(name) for name in lists] == [5, 5, 1]
    assert 0 < rclient.pttl(keys.wakeup("c")) <= WAKE_TTL_MS
    # A push renews the expiry (it was lowered by hand here).
    rclient.pexpire(lists[0], 1_000)
    assert run(scripts, "wake_workers", lists[:1], [5, 1]) == 1
    assert rclient.pttl(lists[0]) > 1_000
    # Each item pushed is one BLPOP for one idle worker.
    assert rclient.blpop([lists[2]], timeout=1) == (lists[2].encode(), b"1")
    assert not rclient.exists(lists[2])


def test_wake_workers_with_nothing_to_push(scripts: SyncScripts, keys: Keys) -> None:
    assert run(scripts, "wake_workers", [keys.wakeup("a")], [64, 0]) == 0


# the done marker of a user claim: a prefix that is its bucket


def test_a_user_claims_done_marker_is_written_to_its_prefix_itself(
    scripts: SyncScripts, part: Keys, rclient: redis.Redis, namespace: str
) -> None:
    claim, prefix = Layout(namespace, PARTITIONS).claim_place("order:1")
    assert not prefix.endswith(":")
    token = "token-1"
    assert list(run(scripts, "idem_claim", [claim], [token, 30_000, "", prefix, 0])) == [1, 0]
    assert run(scripts, "idem_settle", [claim], [token, "done", HOUR_MS, "", prefix, 0]) == 1
    bucket, member = done_marker_place(prefix, claim)
    assert bucket == prefix
    now = server_ms(rclient)
    expiry = rclient.zscore(prefix, member)
    assert expiry is not None, "no done marker in the prefix's own key"
    assert now / 1000 < expiry <= (now + HOUR_MS) / 1000 + 1
    assert 0 < rclient.pttl(prefix) <= HOUR_MS + 1000
    # Nothing else under the claim's tag: no '<prefix><3 hex digits>' bucket, no claim.
    tag = claim.partition("}")[0] + "}"
    assert set(rclient.scan_iter(match=f"{tag}*", count=10_000)) == {prefix.encode()}
    # The claim script reads the marker from the same place: already done.
    assert list(run(scripts, "idem_claim", [claim], ["token-2", 30_000, "", prefix, 0])) == [0, 0]


def test_a_job_claims_done_marker_goes_to_a_bucket_of_its_partition(
    scripts: SyncScripts, part: Keys, rclient: redis.Redis, namespace: str
) -> None:
    layout = Layout(namespace, PARTITIONS)
    claim, prefix = layout.claim_place(Keys.job_claim_name("report", "j1"), "j1")
    assert prefix.endswith(":") and prefix == layout.for_job("j1").done_bucket_prefix
    assert list(run(scripts, "idem_claim", [claim], ["t", 30_000, "", prefix, 0])) == [1, 0]
    assert run(scripts, "idem_settle", [claim], ["t", "done", HOUR_MS, "", prefix, 0]) == 1
    bucket, member = done_marker_place(prefix, claim)
    assert bucket != prefix and bucket.startswith(prefix)
    assert rclient.zscore(bucket, member) is not None
    assert not rclient.exists(prefix.rstrip(":"))
