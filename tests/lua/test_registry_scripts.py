"""heartbeat_worker, leave_worker and server_time (the worker registry on the server's
clock), called directly on Redis with the pure builders of :mod:`lockgate.worker.registry`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from lockgate.backend.keys import Keys
from lockgate.backend.lua import ScriptCall, SyncScripts, source
from lockgate.backend.registry import (
    KEEP_MS,
    SWEEP_AFTER,
    WorkerInfo,
    heartbeat_call,
    leave_call,
    placed,
)
from lockgate.core.activity import Batch, minute_of

COUNTER = "done:normal:default"
# Far from the server's clock: the times a script writes are the server's, not these.
WORKER_NOW = datetime(2001, 1, 1, tzinfo=UTC)


def info(name: str = "w-1", started_ago: float = 5.0) -> WorkerInfo:
    return WorkerInfo(
        name=name, host="h", pid=1, queues=("default",), concurrency=2, running=1,
        started_at=WORKER_NOW - timedelta(seconds=started_ago), last_heartbeat=WORKER_NOW,
        version="9",
    )  # fmt: skip


def run(scripts: SyncScripts, call: ScriptCall) -> Any:
    return scripts.run_all([call])[0]


def server_s(rclient: redis.Redis) -> float:
    seconds, micros = rclient.time()
    return seconds + micros / 1e6


def test_the_scripts_document_their_keys_and_args() -> None:
    for name in ("heartbeat_worker", "leave_worker", "server_time"):
        text = source(name)
        assert text.startswith(f"-- {name}.lua")
        assert "-- KEYS" in text and "-- ARGV" in text


def test_a_heartbeat_writes_the_server_times_and_places_counts_by_their_age(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    now = server_s(rclient)
    minute = minute_of(now)
    # Counts 2 s old, offered the server's minute and its neighbours (as the store would
    # after a good guess), and a batch offered minutes an hour off (a bad guess).
    good = Batch(minute=1, age_ms=2000, first=minute_of(now - 2) - 1, counters={COUNTER: 3})
    bad = Batch(minute=2, age_ms=0, first=minute + 60, counters={COUNTER: 4})
    reply = run(scripts, heartbeat_call(keys, info(), 30, [good, bad]))
    now_ms, left = placed(reply, [good, bad])
    assert abs(now_ms / 1000 - now) < 2
    assert left == {2: {COUNTER: 4}}  # not added: none of its candidates was its minute
    placed_minute = minute_of(now_ms / 1000 - 2)
    assert rclient.zscore(keys.activity(placed_minute), COUNTER) == 3
    kept_until = rclient.pexpiretime(keys.activity(placed_minute))
    assert kept_until == (placed_minute + 1) * 60_000 + KEEP_MS
    for other in range(minute + 59, minute + 63):
        assert not rclient.exists(keys.activity(other))
    entry = json.loads(rclient.get(keys.worker("w-1")) or b"")
    assert entry["last_heartbeat"] == round(now_ms / 1000, 3)
    assert abs(entry["started_at"] - (now_ms / 1000 - 5)) < 0.01
    assert entry["name"] == "w-1" and entry["queues"] == ["default"]
    assert 0 < rclient.pttl(keys.worker("w-1")) <= 30_000
    score = rclient.zscore(keys.workers(), "w-1")
    assert score is not None and abs(score - (now_ms / 1000 + 30)) < 0.01
    index_expiry = rclient.pexpiretime(keys.workers())
    assert index_expiry == now_ms + 30_000 + round(SWEEP_AFTER * 1000)


def test_a_heartbeat_sweeps_names_long_expired_on_the_server_clock_only(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    now = server_s(rclient)
    rclient.zadd(keys.workers(), {"gone": now - SWEEP_AFTER - 5, "recent": now - 5})
    run(scripts, heartbeat_call(keys, info(), 30, []))
    assert rclient.zscore(keys.workers(), "gone") is None
    assert rclient.zscore(keys.workers(), "recent") is not None


def test_leaving_removes_the_entry_and_adds_the_last_counts(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    run(scripts, heartbeat_call(keys, info(), 30, []))
    minute = minute_of(server_s(rclient))
    last = Batch(minute=1, age_ms=0, first=minute - 1, counters={COUNTER: 1})
    now_ms, left = placed(run(scripts, leave_call(keys, "w-1", [last])), [last])
    assert left == {}
    assert not rclient.exists(keys.worker("w-1"))
    assert rclient.zscore(keys.workers(), "w-1") is None
    assert rclient.zscore(keys.activity(minute_of(now_ms / 1000)), COUNTER) == 1


def test_server_time_is_the_server_clock(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    before = server_s(rclient)
    now_ms = int(run(scripts, ScriptCall("server_time", [keys.workers()], [])))
    assert before - 0.001 <= now_ms / 1000 <= server_s(rclient)
    assert not rclient.exists(keys.workers())  # nothing written
