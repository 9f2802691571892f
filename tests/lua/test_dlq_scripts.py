"""The dead-letter queue's scripts (purge in chunks, trim, replay), called directly against
real Redis."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from lockgate.backend.keys import Keys
from lockgate.backend.lua import ScriptCall, SyncScripts, source


def run(scripts: SyncScripts, name: Any, keys: list[str], args: list[Any]) -> Any:
    return scripts.run_all([ScriptCall(name, keys, args)])[0]


def node_entries(rclient: redis.Redis) -> int:
    """Entries per stream node: approximate trimming removes whole nodes only."""
    return int(rclient.config_get("stream-node-max-entries")["stream-node-max-entries"])


def now_ms(rclient: redis.Redis) -> int:
    seconds, micros = rclient.time()
    return seconds * 1000 + micros // 1000


def fill(rclient: redis.Redis, key: str, ids: list[str]) -> None:
    with rclient.pipeline(transaction=False) as pipe:
        for entry_id in ids:
            pipe.xadd(key, {"job_id": entry_id}, id=entry_id)
        pipe.execute()


def ids_of(rclient: redis.Redis, key: str) -> list[str]:
    return [entry_id.decode() for entry_id, _ in rclient.xrange(key)]


def test_the_scripts_document_their_keys_and_args() -> None:
    for name in ("dlq_purge", "dlq_trim", "dlq_replay_stream", "dlq_replay_sorted"):
        text = source(name)
        assert text.startswith(f"-- {name}.lua")
        assert "-- KEYS" in text and "-- ARGV" in text and "-- Returns" in text


def test_purge_deletes_the_oldest_chunk_up_to_the_bound(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    dead = keys.dead()
    ids = [f"{n}-0" for n in range(1, 11)]
    fill(rclient, dead, ids)
    # Bound at the 5th entry: letters added after a purge started are not its business.
    assert run(scripts, "dlq_purge", [dead], [3, ids[4]]) == 3
    assert ids_of(rclient, dead) == ids[3:]
    assert run(scripts, "dlq_purge", [dead], [3, ids[4]]) == 2
    assert run(scripts, "dlq_purge", [dead], [3, ids[4]]) == 0
    assert ids_of(rclient, dead) == ids[5:]
    # Unbounded: the last chunk empties the stream and the key goes.
    assert run(scripts, "dlq_purge", [dead], [4, "+"]) == 4
    assert rclient.exists(dead) == 1
    assert run(scripts, "dlq_purge", [dead], [4, "+"]) == 1
    assert rclient.exists(dead) == 0
    assert run(scripts, "dlq_purge", [dead], [4, "+"]) == 0


def test_trim_by_length_removes_whole_old_nodes_only(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    dead = keys.dead()
    ids = [f"{n}-0" for n in range(1, 2001)]
    fill(rclient, dead, ids)
    removed = run(scripts, "dlq_trim", [dead], [500, 0])
    left = ids_of(rclient, dead)
    assert removed == 2000 - len(left)
    assert 500 <= len(left) < 500 + node_entries(rclient)
    assert left == ids[-len(left) :]  # the newest stay


def test_trim_by_age_follows_the_server_clock(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    dead = keys.dead()
    now = now_ms(rclient)
    hour = 3_600_000
    old = [f"{now - 2 * hour}-{n}" for n in range(300)]
    young = [f"{now - hour // 2}-{n}" for n in range(300)]
    fill(rclient, dead, old + young)
    removed = run(scripts, "dlq_trim", [dead], [0, hour])
    left = ids_of(rclient, dead)
    assert removed == 600 - len(left)
    assert left[-300:] == young  # nothing younger than the age limit goes
    assert len(left) - 300 < node_entries(rclient)  # old entries sharing a node may stay
    assert removed >= 300 - node_entries(rclient)


def test_trim_with_no_limits_or_no_stream_does_nothing(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    dead = keys.dead()
    assert run(scripts, "dlq_trim", [dead], [10, 1000]) == 0
    assert rclient.exists(dead) == 0
    fill(rclient, dead, [f"{n}-0" for n in range(1, 1001)])
    assert run(scripts, "dlq_trim", [dead], [0, 0]) == 0
    assert rclient.xlen(dead) == 1000


def test_one_trim_call_removes_a_bounded_amount(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    """XTRIM ~ stops at its default LIMIT, so a huge backlog never blocks Redis for long."""
    dead = keys.dead()
    fill(rclient, dead, [f"{n}-0" for n in range(1, 25_001)])
    first = run(scripts, "dlq_trim", [dead], [100, 0])
    assert 0 < first <= 100 * node_entries(rclient)
    assert rclient.xlen(dead) == 25_000 - first


# --- replay: the letter goes and its job comes back in one call, or nothing happens -----


def stream_enqueue(keys: Keys, job_id: str, payload: bytes) -> tuple[list[str], list[Any]]:
    """enqueue_stream's KEYS and ARGV for one job on queue 'q', level 'low', now."""
    marker = keys.job(job_id)
    script_keys = [marker, keys.stream("q", "low"), keys.delayed("q", "low"), marker, keys.wake()]
    return script_keys, [payload, 0, 0]


def sorted_enqueue(keys: Keys, job_id: str, payload: bytes) -> tuple[list[str], list[Any]]:
    """enqueue_sorted's KEYS and ARGV for one job on queue 'q', now."""
    q = keys.sorted_keys("q")
    marker = keys.job(job_id)
    script_keys = [q.waiting, q.payloads, q.ranks, q.clock, q.wake, q.delayed, marker, marker]
    return script_keys, [job_id, 0, payload, 0, 0]


def queued(rclient: redis.Redis, keys: Keys, backend: str) -> list[bytes]:
    """The payloads waiting on queue 'q' (level 'low' for streams)."""
    if backend == "stream":
        return [fields[b"job"] for _, fields in rclient.xrange(keys.stream("q", "low"))]
    q = keys.sorted_keys("q")
    return [rclient.hget(q.payloads, job_id) for job_id in rclient.zrange(q.waiting, 0, -1)]


ENQUEUES = {"stream": stream_enqueue, "sorted": sorted_enqueue}


@pytest.mark.parametrize("backend", ["stream", "sorted"])
def test_replay_deletes_a_letter_and_enqueues_its_job_in_one_call(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis, backend: str
) -> None:
    dead, script = keys.dead(), f"dlq_replay_{backend}"
    letter = rclient.xadd(dead, {"job_id": "a"}).decode()
    other = rclient.xadd(dead, {"job_id": "z"}).decode()
    enqueue_keys, enqueue_args = ENQUEUES[backend](keys, "a", b"A")

    (reply,) = run(scripts, script, [dead, *enqueue_keys], [letter, *enqueue_args])

    assert reply != 0  # the enqueue's own reply for the job: an entry id, or 1
    assert ids_of(rclient, dead) == [other]  # only the replayed letter went
    assert queued(rclient, keys, backend) == [b"A"]
    assert rclient.exists(keys.job("a")) == 1


@pytest.mark.parametrize("backend", ["stream", "sorted"])
def test_replay_of_a_letter_already_gone_does_nothing(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis, backend: str
) -> None:
    dead, script = keys.dead(), f"dlq_replay_{backend}"
    letter = rclient.xadd(dead, {"job_id": "a"}).decode()
    other = rclient.xadd(dead, {"job_id": "z"}).decode()
    rclient.xdel(dead, letter)  # replayed or removed by someone else meanwhile
    enqueue_keys, enqueue_args = ENQUEUES[backend](keys, "a", b"A")

    assert run(scripts, script, [dead, *enqueue_keys], [letter, *enqueue_args]) == b"gone"

    assert ids_of(rclient, dead) == [other]
    assert queued(rclient, keys, backend) == []
    assert rclient.exists(keys.job("a")) == 0
    # Nor on an empty stream, or none at all.
    rclient.delete(dead)
    assert run(scripts, script, [dead, *enqueue_keys], [letter, *enqueue_args]) == b"gone"
    assert rclient.exists(dead, keys.job("a")) == 0


@pytest.mark.parametrize("backend", ["stream", "sorted"])
def test_replay_of_a_job_whose_id_is_taken_leaves_the_letter(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis, backend: str
) -> None:
    dead, script = keys.dead(), f"dlq_replay_{backend}"
    letter = rclient.xadd(dead, {"job_id": "a"}).decode()
    enqueue_keys, enqueue_args = ENQUEUES[backend](keys, "a", b"A")
    by_hand_keys, by_hand_args = ENQUEUES[backend](keys, "a", b"A2")
    assert run(scripts, f"enqueue_{backend}", by_hand_keys, by_hand_args) != [0]

    assert run(scripts, script, [dead, *enqueue_keys], [letter, *enqueue_args]) == [0]

    assert ids_of(rclient, dead) == [letter]
    assert queued(rclient, keys, backend) == [b"A2"]  # the job queued by hand, alone
