"""job_status and cancel_job, called directly against real Redis: each trusts only the
marker value its caller read, and answers 'moved' when the marker changed since."""

from __future__ import annotations

import json
from typing import Any

import redis

from lockgate.backend.keys import GROUP, Keys
from lockgate.backend.lua import ScriptCall, SyncScripts, source

PAYLOAD = b'{"id":"a","task":"t","queue":"q","level":"low"}'


def run(scripts: SyncScripts, name: Any, keys: list[str], args: list[Any]) -> Any:
    return scripts.run_all([ScriptCall(name, keys, args)])[0]


def status(scripts: SyncScripts, keys: Keys, placed: str) -> list[Any]:
    script_keys = [keys.job("a"), keys.result("a"), keys.status("a"), *keys.place_keys(placed)]
    return list(run(scripts, "job_status", script_keys, [GROUP, placed, "a"]))


def cancel(scripts: SyncScripts, keys: Keys, placed: str) -> bytes:
    script_keys = [keys.job("a"), keys.cancel_flag("a"), keys.status("a")]
    script_keys += keys.place_keys(placed)
    args = [GROUP, b'{"status":"cancelled"}', 60_000, 60_000, placed, "a"]
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
