"""The dead-letter queue's scripts (purge in chunks, trim), called directly against real Redis."""

from __future__ import annotations

from typing import Any

import redis

from lockgate.keys import Keys
from lockgate.lua import ScriptCall, SyncScripts, source


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
    for name in ("dlq_purge", "dlq_trim"):
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
