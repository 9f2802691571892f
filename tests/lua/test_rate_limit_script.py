"""rate_limit.lua (GCRA on the server clock), called directly on Redis.

Intervals are long (seconds) where the answer is compared, so the few milliseconds
between two calls never change it; the expiry is watched with a short one.
"""

from __future__ import annotations

import uuid

import redis

from conftest import wait_until_sync
from lockgate.backend.keys import Keys
from lockgate.backend.lua import ScriptCall, SyncScripts

TEN_S_US = 10_000_000


def ask(scripts: SyncScripts, key: str, interval_us: int, burst: int = 1) -> int:
    ms, reserved = scripts.run_all([ScriptCall("rate_limit", [key], [interval_us, burst])])[0]
    assert reserved == 1
    return int(ms)


def test_a_start_is_recorded_and_the_next_waits_one_interval(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    key = keys.rate_limit("charge")
    assert ask(scripts, key, TEN_S_US) == 0
    server_us = int(rclient.get(key) or 0)
    seconds, micros = rclient.time()
    assert 0 < server_us - (seconds * 1_000_000 + micros) <= TEN_S_US
    assert 9_000 < rclient.pttl(key) <= 10_000
    wait_ms = ask(scripts, key, TEN_S_US)
    assert 9_000 < wait_ms <= 10_000
    # A refusal reserves the next start for its caller: the one after waits twice as long.
    assert int(rclient.get(key) or 0) == server_us + TEN_S_US
    assert 19_000 < ask(scripts, key, TEN_S_US) <= wait_ms + 10_000


def test_a_burst_allows_that_many_starts_at_once(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    key = keys.rate_limit("charge")
    assert [ask(scripts, key, TEN_S_US, burst=3) for _ in range(3)] == [0, 0, 0]
    assert 29_000 < rclient.pttl(key) <= 30_000
    assert 9_000 < ask(scripts, key, TEN_S_US, burst=3) <= 10_000  # reserved: one more
    assert 39_000 < rclient.pttl(key) <= 40_000


def test_limiters_are_per_task_and_namespace(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    assert ask(scripts, keys.rate_limit("charge"), TEN_S_US) == 0
    assert ask(scripts, keys.rate_limit("refund"), TEN_S_US) == 0
    elsewhere = Keys(uuid.uuid4().hex).rate_limit("charge")
    try:
        assert ask(scripts, elsewhere, TEN_S_US) == 0
    finally:
        rclient.delete(elsewhere)
    assert ask(scripts, keys.rate_limit("charge"), TEN_S_US) > 0


def test_an_idle_limiter_expires_and_then_allows_a_start(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    key = keys.rate_limit("charge")
    assert ask(scripts, key, 50_000) == 0
    assert ask(scripts, key, 50_000) > 0
    wait_until_sync(lambda: not rclient.exists(key), timeout=5, message="limiter expired")
    assert ask(scripts, key, 50_000) == 0


def test_a_keys_limiter_reserves_alone_and_the_tasks_is_asked_after(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    """A key's limit (10 s apart) asked before its task's (1 s apart): a start both allow
    is recorded in both; when the key's refuses, only the key's reserves (a start reserved
    10 s ahead in the task's limiter would hold back every other key's jobs that long),
    and the task's is asked when the job comes back."""
    key, task = keys.key_rate_limit("sync", "acme"), keys.rate_limit("sync")
    args = [TEN_S_US, 1, TEN_S_US // 10, 1]

    def ask_both() -> list[int]:
        return [int(v) for v in scripts.run_all([ScriptCall("rate_limit", [key, task], args)])[0]]

    assert ask_both() == [0, 2]  # recorded in both
    task_tat = int(rclient.get(task) or 0)
    wait_ms, reserved = ask_both()
    assert 9_000 < wait_ms <= 10_000 and reserved == 1  # the key's turn, 10 s on
    assert int(rclient.get(task) or 0) == task_tat  # the task's limiter untouched
    # Another key's job of the task waits only for the task's own limiter: about 1 s.
    assert 0 < ask(scripts, task, TEN_S_US // 10) <= 1_000
