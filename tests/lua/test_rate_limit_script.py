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
    return int(scripts.run_all([ScriptCall("rate_limit", [key], [interval_us, burst])])[0])


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
