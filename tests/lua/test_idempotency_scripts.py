"""The idempotency scripts (claim, settle, mark done, incr once), called directly on Redis.

A done marker is a member of a bucketed sorted set (``Keys.done_marker``), scored by its
expiry in seconds: the tests read it where the scripts put it.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import redis

from conftest import wait_until_sync
from lockgate.backend.keys import GROUP, Keys
from lockgate.backend.lua import ScriptCall, SyncScripts, source

OLD, NEW = "token-old", "token-new"
DAY_MS = 86_400_000
HOUR_MS = 3_600_000


@pytest.fixture
def key(keys: Keys) -> str:
    return keys.claim("order:1")


def run(scripts: SyncScripts, name: Any, script_keys: list[str], args: list[Any]) -> Any:
    return scripts.run_all([ScriptCall(name, script_keys, args)])[0]


def claim(
    scripts: SyncScripts,
    keys: Keys,
    key: str,
    token: str,
    lease_ms: int,
    *,
    legacy: str | None = None,
    scope: str = "",
    mirror: bool = False,
) -> list[int]:
    """idem_claim with the ARGV layout of ``Claim.claim_call``."""
    script_keys = [key] if legacy is None else [key, legacy]
    args = [token, lease_ms, scope, keys.done_bucket_prefix, int(mirror)]
    return list(run(scripts, "idem_claim", script_keys, args))


def settle(
    scripts: SyncScripts,
    keys: Keys,
    key: str,
    token: str,
    action: str,
    ms: int,
    *,
    legacy: str | None = None,
    legacy_done: str = "",
    strings: bool = False,
) -> int:
    """idem_settle with the ARGV layout of ``Claim.settle_call``."""
    script_keys = [key] if legacy is None else [key, legacy]
    args = [token, action, ms, legacy_done, keys.done_bucket_prefix, int(strings)]
    return int(run(scripts, "idem_settle", script_keys, args))


def server_ms(rclient: redis.Redis) -> int:
    seconds, micros = rclient.time()
    return int(seconds) * 1000 + int(micros) // 1000


def marker(rclient: redis.Redis, keys: Keys, key: str) -> float | None:
    """The expiry (seconds) of a claim key's bucketed done marker, None when absent."""
    return rclient.zscore(*keys.done_marker(key))


def assert_marked(rclient: redis.Redis, keys: Keys, key: str, ttl_ms: int, since_ms: int) -> None:
    """The claim key's done marker expires ttl_ms after a moment between since_ms and
    now, rounded up to a whole second."""
    expiry = marker(rclient, keys, key)
    assert expiry is not None, "no done marker"
    assert (
        math.ceil((since_ms + ttl_ms) / 1000) <= expiry <= (server_ms(rclient) + ttl_ms) / 1000 + 1
    )


def same_bucket(keys: Keys, key: str, count: int) -> list[str]:
    """``count`` other claim keys whose done markers share ``key``'s bucket."""
    bucket, _ = keys.done_marker(key)
    found: list[str] = []
    n = 0
    while len(found) < count:
        other = keys.claim(f"other:{n}")
        n += 1
        if keys.done_marker(other)[0] == bucket:
            found.append(other)
    return found


def namespace_keys(rclient: redis.Redis, keys: Keys) -> set[bytes]:
    return set(rclient.scan_iter(match=f"{keys.prefix}:*", count=10_000))


def expired(rclient: redis.Redis, key: str) -> None:
    """Wait (polling, with a deadline) until a short lease has run out."""
    wait_until_sync(lambda: not rclient.exists(key), message=f"{key} expired")


@pytest.mark.parametrize("name", ["idem_claim", "idem_settle", "incr_once"])
def test_every_script_documents_its_keys_and_args(name: Any) -> None:
    text = source(name)
    assert text.startswith(f"-- {name}.lua")
    assert "-- KEYS" in text and "-- ARGV" in text


def test_claim_sets_an_owner_token_with_the_lease(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys, key: str
) -> None:
    assert claim(scripts, keys, key, OLD, 30_000) == [1, 0]
    assert rclient.get(key) == f"c:{OLD}".encode()
    assert 0 < rclient.pttl(key) <= 30_000


def test_a_live_claim_is_busy_with_the_time_left_on_its_lease(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys, key: str
) -> None:
    claim(scripts, keys, key, OLD, 30_000)
    state, remaining = claim(scripts, keys, key, NEW, 30_000)
    assert state == -1
    assert 0 < remaining <= 30_000
    assert rclient.get(key) == f"c:{OLD}".encode()  # untouched


def test_a_done_marker_blocks_every_later_claim(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys, key: str
) -> None:
    claim(scripts, keys, key, OLD, 30_000)
    since = server_ms(rclient)
    assert settle(scripts, keys, key, OLD, "done", DAY_MS) == 1
    assert not rclient.exists(key)  # the claim is gone; its marker lives in its bucket
    assert_marked(rclient, keys, key, DAY_MS, since)
    expiry = marker(rclient, keys, key)
    assert claim(scripts, keys, key, NEW, 30_000) == [0, 0]
    assert claim(scripts, keys, key, OLD, 30_000) == [0, 0]  # not even the owner again
    assert not rclient.exists(key)
    assert marker(rclient, keys, key) == expiry


def test_the_done_marker_is_a_member_of_a_compact_bucket_that_expires_with_it(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys, key: str
) -> None:
    claim(scripts, keys, key, OLD, 30_000)
    settle(scripts, keys, key, OLD, "done", DAY_MS)
    bucket, member = keys.done_marker(key)
    assert bucket.startswith(keys.done_bucket_prefix) and len(member) == 24
    assert namespace_keys(rclient, keys) == {bucket.encode()}  # nothing else is left
    assert rclient.zrange(bucket, 0, -1) == [member.encode()]
    assert rclient.object("encoding", bucket) == b"listpack"
    assert DAY_MS - 5_000 < rclient.pttl(bucket) <= DAY_MS + 1_000


def test_release_frees_the_key_for_a_retry(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys, key: str
) -> None:
    claim(scripts, keys, key, OLD, 30_000)
    assert settle(scripts, keys, key, OLD, "release", 1_000) == 1
    assert not rclient.exists(key)
    assert marker(rclient, keys, key) is None
    assert claim(scripts, keys, key, NEW, 30_000) == [1, 0]


def test_renew_extends_the_lease(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys, key: str
) -> None:
    claim(scripts, keys, key, OLD, 1_000)
    assert settle(scripts, keys, key, OLD, "renew", 60_000) == 1
    assert 1_000 < rclient.pttl(key) <= 60_000
    assert rclient.get(key) == f"c:{OLD}".encode()


def test_a_renewal_takes_back_a_claim_that_lapsed_while_redis_was_away(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys, key: str
) -> None:
    """Redis restarted from its AOF past the claim's expiry: the live holder's next
    renewal finds it gone, not done, and no one else's: the claim is its own again."""
    claim(scripts, keys, key, OLD, 50)
    expired(rclient, key)
    # A plain renewal does not (it may land after the claim's release) ...
    assert settle(scripts, keys, key, OLD, "renew", 30_000) == 0
    assert not rclient.exists(key)
    # ... the first after renewals failed does.
    assert settle(scripts, keys, key, OLD, "retake", 30_000) == 1
    assert rclient.get(key) == f"c:{OLD}".encode()
    assert 1_000 < rclient.pttl(key) <= 30_000
    assert claim(scripts, keys, key, NEW, 30_000)[0] == -1  # busy: held again


def test_a_lapsed_lease_can_be_taken_over(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys, key: str
) -> None:
    """The owner died (stopped renewing): its claim expires and another owner takes it."""
    claim(scripts, keys, key, OLD, 50)
    expired(rclient, key)
    assert claim(scripts, keys, key, NEW, 30_000) == [1, 0]
    assert rclient.get(key) == f"c:{NEW}".encode()


@pytest.mark.parametrize("action", ["done", "release", "renew"])
def test_the_old_owner_cannot_settle_the_new_owners_claim(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys, key: str, action: str
) -> None:
    """Compare-and-set on the token: a late settle by a lapsed owner changes nothing."""
    claim(scripts, keys, key, OLD, 50)
    expired(rclient, key)
    claim(scripts, keys, key, NEW, 30_000)
    ttl_before = rclient.pttl(key)
    assert settle(scripts, keys, key, OLD, action, DAY_MS) == 0
    assert rclient.get(key) == f"c:{NEW}".encode()
    assert 0 < rclient.pttl(key) <= ttl_before
    assert marker(rclient, keys, key) is None
    # The new owner still settles its own claim.
    since = server_ms(rclient)
    assert settle(scripts, keys, key, NEW, "done", 60_000) == 1
    assert not rclient.exists(key)
    assert_marked(rclient, keys, key, 60_000, since)


@pytest.mark.parametrize("action", ["done", "release", "renew"])
def test_settle_does_not_touch_a_done_marker_or_an_absent_key(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys, key: str, action: str
) -> None:
    assert settle(scripts, keys, key, OLD, action, 60_000) == 0
    assert namespace_keys(rclient, keys) == set()  # no claim, no marker written
    claim(scripts, keys, key, OLD, 30_000)
    settle(scripts, keys, key, OLD, "done", 60_000)
    expiry = marker(rclient, keys, key)
    # Even the token that wrote the marker: a done marker is final.
    assert settle(scripts, keys, key, OLD, action, 1) == 0
    assert not rclient.exists(key)
    assert marker(rclient, keys, key) == expiry
    assert rclient.pttl(keys.done_marker(key)[0]) > 1_000


def test_an_expired_marker_is_not_done_and_the_next_write_to_its_bucket_drops_it(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys, key: str
) -> None:
    bucket, member = keys.done_marker(key)
    rclient.zadd(bucket, {member: server_ms(rclient) // 1000 - 1})  # expired a second ago
    rclient.pexpire(bucket, HOUR_MS)
    assert claim(scripts, keys, key, OLD, 30_000) == [1, 0]
    assert rclient.zscore(bucket, member) is not None  # a read drops nothing
    (other,) = same_bucket(keys, key, 1)
    claim(scripts, keys, other, NEW, 30_000)
    assert settle(scripts, keys, other, NEW, "done", HOUR_MS) == 1
    assert rclient.zscore(bucket, member) is None  # dropped by the write to its bucket
    assert rclient.zscore(*keys.done_marker(other)) is not None
    assert rclient.zcard(bucket) == 1


def test_a_marker_keeps_the_later_of_two_expiries(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys, key: str
) -> None:
    """Written twice (a claim key set again, as a 0.2 worker might): the later expiry
    stands, for the member and for its bucket."""
    claim(scripts, keys, key, OLD, 30_000)
    since = server_ms(rclient)
    settle(scripts, keys, key, OLD, "done", 2 * HOUR_MS)
    expiry = marker(rclient, keys, key)
    rclient.set(key, f"c:{NEW}", px=30_000)
    assert settle(scripts, keys, key, NEW, "done", HOUR_MS) == 1
    assert marker(rclient, keys, key) == expiry
    assert_marked(rclient, keys, key, 2 * HOUR_MS, since)
    assert 2 * HOUR_MS - 60_000 < rclient.pttl(keys.done_marker(key)[0]) <= 2 * HOUR_MS + 1_000


def test_a_bucket_expires_with_its_latest_member(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys, key: str
) -> None:
    bucket, _ = keys.done_marker(key)
    second, third = same_bucket(keys, key, 2)
    # (claim key, its marker's TTL, the bucket's TTL after it was written)
    writes = [(key, HOUR_MS, HOUR_MS), (second, 2 * HOUR_MS, 2 * HOUR_MS),
              (third, HOUR_MS // 2, 2 * HOUR_MS)]  # fmt: skip
    for claim_key, ttl, lasting in writes:
        claim(scripts, keys, claim_key, OLD, 30_000)
        assert settle(scripts, keys, claim_key, OLD, "done", ttl) == 1
        assert lasting - 60_000 < rclient.pttl(bucket) <= lasting + 1_000
    assert rclient.zcard(bucket) == 3


def test_a_bucket_without_an_expiry_gets_one(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys, key: str
) -> None:
    """PEXPIREAT GT leaves a key without an expiry as it is: the write sets it plainly."""
    bucket, _ = keys.done_marker(key)
    (other,) = same_bucket(keys, key, 1)
    rclient.zadd(bucket, {keys.done_marker(other)[1]: server_ms(rclient) // 1000 + 60})
    assert rclient.pttl(bucket) == -1
    claim(scripts, keys, key, OLD, 30_000)
    settle(scripts, keys, key, OLD, "done", HOUR_MS)
    assert HOUR_MS - 60_000 < rclient.pttl(bucket) <= HOUR_MS + 1_000


@pytest.mark.parametrize(
    ("where", "value", "scope"),
    [
        pytest.param("key", f"d:{OLD}", "charge", id="0.2-string-marker"),
        pytest.param("legacy", f"d:{OLD}", "charge", id="0.1-marker"),
        pytest.param("legacy", f"d:{OLD}:t:charge", "charge", id="tagged-0.1-name-marker"),
    ],
)
def test_markers_written_by_older_releases_still_count_as_done(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys, where: str, value: str, scope: str
) -> None:
    key = keys.claim(Keys.job_claim_name("charge", "a"))
    legacy = keys.claim(Keys.legacy_job_claim_name("a"))
    rclient.set(key if where == "key" else legacy, value, px=HOUR_MS)
    before = namespace_keys(rclient, keys)
    assert claim(scripts, keys, key, NEW, 30_000, legacy=legacy, scope=scope) == [0, 0]
    assert namespace_keys(rclient, keys) == before  # nothing written
    assert rclient.get(key if where == "key" else legacy) == value.encode()


def test_by_default_a_job_claim_writes_nothing_under_the_0_1_name(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys
) -> None:
    """Without legacy_markers the 0.1 name is read (see above) but never written, and no
    string marker is left: the bucketed marker is the only trace of the done job."""
    key = keys.claim(Keys.job_claim_name("charge", "a"))
    legacy = keys.claim(Keys.legacy_job_claim_name("a"))
    assert claim(scripts, keys, key, OLD, 30_000, legacy=legacy, scope="charge") == [1, 0]
    assert not rclient.exists(legacy)
    assert settle(scripts, keys, key, OLD, "done", HOUR_MS) == 1  # Claim passes no 0.1 name
    assert namespace_keys(rclient, keys) == {keys.done_marker(key)[0].encode()}
    assert claim(scripts, keys, key, NEW, 30_000, legacy=legacy, scope="charge") == [0, 0]


def test_legacy_markers_also_write_the_forms_older_releases_read(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys
) -> None:
    key = keys.claim(Keys.job_claim_name("charge", "a"))
    legacy = keys.claim(Keys.legacy_job_claim_name("a"))
    taken = claim(scripts, keys, key, OLD, 30_000, legacy=legacy, scope="charge", mirror=True)
    assert taken == [1, 0]
    assert rclient.get(legacy) == f"c:{OLD}".encode()  # the claim mirrored for 0.1 workers
    since = server_ms(rclient)
    done = f"d:{OLD}:t:charge"
    assert settle(scripts, keys, key, OLD, "done", HOUR_MS, legacy=legacy, legacy_done=done,
                  strings=True) == 1  # fmt: skip
    assert rclient.get(key) == f"d:{OLD}".encode()  # what 0.2 workers read
    assert HOUR_MS - 60_000 < rclient.pttl(key) <= HOUR_MS
    assert rclient.get(legacy) == done.encode()  # what 0.1 workers read
    assert HOUR_MS - 60_000 < rclient.pttl(legacy) <= HOUR_MS
    assert_marked(rclient, keys, key, HOUR_MS, since)  # and the new form
    assert claim(scripts, keys, key, NEW, 30_000, legacy=legacy, scope="charge") == [0, 0]


def read_with_claims(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis, job_ids: list[str], mirror: bool
) -> dict[str, int]:
    """read_stream of entries of the idempotent task 'charge': each job id's claim state."""
    stream, delayed = keys.stream("q", "normal"), keys.delayed("q", "normal")
    for job_id in job_ids:
        rclient.xadd(stream, {"job": f'{{"id":"{job_id}","task":"charge","args":[]}}'})
    args = [
        GROUP, "c1", 10, 1, 10, 1, "q", keys.claim(""), "tok", 30_000,
        keys.done_bucket_prefix, int(mirror), "charge",
    ]  # fmt: skip
    script_keys = [stream, delayed, keys.wake(), keys.paused()]
    _, flat, _, _ = run(scripts, "read_stream", script_keys, args)
    return {job_id: flat[i + 3] for job_id, i in zip(job_ids, range(0, len(flat), 5), strict=True)}


@pytest.mark.parametrize("mirror", [False, True])
def test_a_read_claims_a_job_unless_its_bucketed_marker_says_it_is_done(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys, mirror: bool
) -> None:
    done = keys.claim(Keys.job_claim_name("charge", "done-1"))
    claim(scripts, keys, done, OLD, 30_000)
    settle(scripts, keys, done, OLD, "done", HOUR_MS)
    states = read_with_claims(scripts, keys, rclient, ["done-1", "new-1"], mirror)
    assert states == {"done-1": 0, "new-1": 1}
    new = keys.claim(Keys.job_claim_name("charge", "new-1"))
    assert rclient.get(new).startswith(b"c:tok:")
    # legacy_markers mirror the claim under the 0.1 and 0.2 names, where those look.
    for older in (
        Keys.legacy_job_claim_name("new-1"),
        Keys.older_job_claim_name("charge", "new-1"),
    ):
        assert rclient.get(keys.claim(older)) == (rclient.get(new) if mirror else None)
    assert not rclient.exists(keys.claim(Keys.legacy_job_claim_name("done-1")))


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


# --- the claim's other name: 0.2/0.3's ambiguous one, read only (issue 22, item 7) -------


def claim_with_other(
    scripts: SyncScripts, keys: Keys, key: str, other: str, token: str, legacy: str | None = None
) -> list[int]:
    """idem_claim with ``Claim.claim_call``'s layout for a claim that has an other name
    (the last key, ARGV[6] = 1), and a 0.1 name or not."""
    script_keys = [key, other] if legacy is None else [key, legacy, other]
    args = [token, 30_000, "charge", keys.done_bucket_prefix, 0, 1]
    return list(run(scripts, "idem_claim", script_keys, args))


@pytest.mark.parametrize("with_legacy", [False, True])
@pytest.mark.parametrize("state", ["bucket", "string", "live"])
def test_a_claim_honours_its_other_name_and_never_writes_there(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys, state: str, with_legacy: bool
) -> None:
    key = keys.claim(Keys.job_claim_name("charge", "a"))
    other = keys.claim(Keys.older_job_claim_name("charge", "a"))
    legacy = keys.claim(Keys.legacy_job_claim_name("a")) if with_legacy else None
    if state == "bucket":  # 0.3's done marker
        claim(scripts, keys, other, OLD, 30_000)
        settle(scripts, keys, other, OLD, "done", HOUR_MS)
    else:  # 0.2's done marker, or a 0.2/0.3 worker running it now
        rclient.set(other, f"{'d' if state == 'string' else 'c'}:{OLD}", px=HOUR_MS)
    before = namespace_keys(rclient, keys)
    reply = claim_with_other(scripts, keys, key, other, NEW, legacy)
    assert reply[0] == (-1 if state == "live" else 0)
    assert namespace_keys(rclient, keys) == before  # nothing written
    # Once the old name is gone, the claim is taken under the new name alone.
    rclient.delete(other, keys.done_marker(other)[0])
    assert claim_with_other(scripts, keys, key, other, NEW, legacy) == [1, 0]
    assert rclient.get(key) == f"c:{NEW}".encode()
    assert not rclient.exists(other)
    assert legacy is None or not rclient.exists(legacy)


def test_a_step_claim_with_an_other_name_and_no_0_1_name_reads_only_those(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys
) -> None:
    key = keys.claim(Keys.step_claim_name("t", "j", "email"))
    other = keys.claim(Keys.older_step_claim_name("t", "j", "email"))
    assert claim_with_other(scripts, keys, key, other, NEW) == [1, 0]
    assert namespace_keys(rclient, keys) == {key.encode()}


def test_incr_once_honours_the_guard_under_its_other_name(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys
) -> None:
    counter = keys.counter("views")
    guard, other = keys.request("views", "r1"), keys.older_request("views", "r1")

    def incr(mirror: bool = False) -> list[int]:
        args = [60_000, 1, int(mirror), "t:views"]
        return list(run(scripts, "incr_once", [guard, counter, other], args))

    rclient.set(other, "1", px=60_000)  # counted by 0.3
    assert incr() == [0, 0]
    assert not rclient.exists(guard)
    rclient.set(other, "t:views:2", px=60_000)  # tagged for counter views:2 (request r1)
    assert incr() == [1, 1]
    assert rclient.exists(guard) and rclient.get(other) == b"t:views:2"  # left as it was
    rclient.delete(guard, other)
    assert incr(mirror=True) == [1, 2]  # legacy_markers: guarded where 0.2 looks, tagged
    assert rclient.get(other) == b"t:views"
    rclient.delete(guard)
    assert incr() == [0, 2]  # its own tag counts


def test_a_read_honours_a_jobs_0_3_done_marker(
    scripts: SyncScripts, rclient: redis.Redis, keys: Keys
) -> None:
    old = keys.claim(Keys.older_job_claim_name("charge", "done-1"))
    claim(scripts, keys, old, OLD, 30_000)
    settle(scripts, keys, old, OLD, "done", HOUR_MS)  # as 0.3 marked it
    states = read_with_claims(scripts, keys, rclient, ["done-1", "new-1"], mirror=False)
    assert states == {"done-1": 0, "new-1": 1}
    assert not rclient.exists(keys.claim(Keys.job_claim_name("charge", "done-1")))
    assert not rclient.exists(keys.claim(Keys.older_job_claim_name("charge", "new-1")))
