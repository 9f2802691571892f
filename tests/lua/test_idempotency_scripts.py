"""The idempotency scripts (claim, settle, mark done, incr once), called directly on Redis."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from conftest import wait_until_sync
from lockgate.keys import Keys
from lockgate.lua import ScriptCall, SyncScripts, source

OLD, NEW = "token-old", "token-new"


@pytest.fixture
def key(keys: Keys) -> str:
    return keys.claim("order:1")


def run(scripts: SyncScripts, name: Any, script_keys: list[str], args: list[Any]) -> Any:
    return scripts.run_all([ScriptCall(name, script_keys, args)])[0]


def claim(scripts: SyncScripts, key: str, token: str, lease_ms: int) -> list[int]:
    return list(run(scripts, "idem_claim", [key], [token, lease_ms]))


def settle(scripts: SyncScripts, key: str, token: str, action: str, ms: int) -> int:
    return int(run(scripts, "idem_settle", [key], [token, action, ms]))


def expired(rclient: redis.Redis, key: str) -> None:
    """Wait (polling, with a deadline) until a short lease has run out."""
    wait_until_sync(lambda: not rclient.exists(key), message=f"{key} expired")


@pytest.mark.parametrize("name", ["idem_claim", "idem_settle", "incr_once"])
def test_every_script_documents_its_keys_and_args(name: Any) -> None:
    text = source(name)
    assert text.startswith(f"-- {name}.lua")
    assert "-- KEYS" in text and "-- ARGV" in text


def test_claim_sets_an_owner_token_with_the_lease(
    scripts: SyncScripts, rclient: redis.Redis, key: str
) -> None:
    assert claim(scripts, key, OLD, 30_000) == [1, 0]
    assert rclient.get(key) == f"c:{OLD}".encode()
    assert 0 < rclient.pttl(key) <= 30_000


def test_a_live_claim_is_busy_with_the_time_left_on_its_lease(
    scripts: SyncScripts, rclient: redis.Redis, key: str
) -> None:
    claim(scripts, key, OLD, 30_000)
    state, remaining = claim(scripts, key, NEW, 30_000)
    assert state == -1
    assert 0 < remaining <= 30_000
    assert rclient.get(key) == f"c:{OLD}".encode()  # untouched


def test_a_done_marker_blocks_every_later_claim(
    scripts: SyncScripts, rclient: redis.Redis, key: str
) -> None:
    claim(scripts, key, OLD, 30_000)
    assert settle(scripts, key, OLD, "done", 86_400_000) == 1
    assert rclient.get(key) == f"d:{OLD}".encode()
    assert 86_000_000 < rclient.pttl(key) <= 86_400_000
    assert claim(scripts, key, NEW, 30_000) == [0, 0]
    assert claim(scripts, key, OLD, 30_000) == [0, 0]  # not even the owner again
    assert rclient.get(key) == f"d:{OLD}".encode()


def test_release_frees_the_key_for_a_retry(
    scripts: SyncScripts, rclient: redis.Redis, key: str
) -> None:
    claim(scripts, key, OLD, 30_000)
    assert settle(scripts, key, OLD, "release", 1_000) == 1
    assert not rclient.exists(key)
    assert claim(scripts, key, NEW, 30_000) == [1, 0]


def test_renew_extends_the_lease(scripts: SyncScripts, rclient: redis.Redis, key: str) -> None:
    claim(scripts, key, OLD, 1_000)
    assert settle(scripts, key, OLD, "renew", 60_000) == 1
    assert 1_000 < rclient.pttl(key) <= 60_000
    assert rclient.get(key) == f"c:{OLD}".encode()


def test_a_lapsed_lease_can_be_taken_over(
    scripts: SyncScripts, rclient: redis.Redis, key: str
) -> None:
    """The owner died (stopped renewing): its claim expires and another owner takes it."""
    claim(scripts, key, OLD, 50)
    expired(rclient, key)
    assert claim(scripts, key, NEW, 30_000) == [1, 0]
    assert rclient.get(key) == f"c:{NEW}".encode()


@pytest.mark.parametrize("action", ["done", "release", "renew"])
def test_the_old_owner_cannot_settle_the_new_owners_claim(
    scripts: SyncScripts, rclient: redis.Redis, key: str, action: str
) -> None:
    """Compare-and-set on the token: a late settle by a lapsed owner changes nothing."""
    claim(scripts, key, OLD, 50)
    expired(rclient, key)
    claim(scripts, key, NEW, 30_000)
    ttl_before = rclient.pttl(key)
    assert settle(scripts, key, OLD, action, 86_400_000) == 0
    assert rclient.get(key) == f"c:{NEW}".encode()
    assert 0 < rclient.pttl(key) <= ttl_before
    # The new owner still settles its own claim.
    assert settle(scripts, key, NEW, "done", 60_000) == 1
    assert rclient.get(key) == f"d:{NEW}".encode()


@pytest.mark.parametrize("action", ["done", "release", "renew"])
def test_settle_does_not_touch_a_done_marker_or_an_absent_key(
    scripts: SyncScripts, rclient: redis.Redis, key: str, action: str
) -> None:
    assert settle(scripts, key, OLD, action, 60_000) == 0
    assert not rclient.exists(key)
    claim(scripts, key, OLD, 30_000)
    settle(scripts, key, OLD, "done", 60_000)
    # Even the token that wrote the marker: a done marker is final.
    assert settle(scripts, key, OLD, action, 1) == 0
    assert rclient.get(key) == f"d:{OLD}".encode()
    assert rclient.pttl(key) > 1_000


def test_incr_once_counts_each_request_id_once(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys
) -> None:
    counter = keys.counter("views")

    def incr(request_id: str, amount: int = 1) -> list[int]:
        guard = keys.request("views", request_id)
        return list(run(scripts, "incr_once", [guard, counter], [60_000, amount]))

    assert incr("r1") == [1, 1]
    assert incr("r1") == [0, 1]  # a retry of the same request
    assert incr("r2", 5) == [1, 6]
    assert incr("r2", 5) == [0, 6]
    assert rclient.get(counter) == b"6"
    assert 0 < rclient.pttl(keys.request("views", "r1")) <= 60_000


def test_incr_once_reports_zero_for_a_repeat_on_a_missing_counter(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys
) -> None:
    guard, counter = keys.request("c", "r"), keys.counter("c")
    rclient.set(guard, "1")
    assert list(run(scripts, "incr_once", [guard, counter], [60_000, 1])) == [0, 0]
    assert not rclient.exists(counter)
