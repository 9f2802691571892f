"""The settle scripts (one owner-checked call per job end) and the claims they write.

settle_stream and settle_sorted apply a run's outcome (done, retry, dead, abandoned) only
while the entry or take is still this worker's, and act on the idempotency claim in the
same call. The claim rules (a done marker over a lapsed claim, never over another owner's
live one) are the same for both, so the cases are shared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from conftest import LIVENESS_ARGS, kept_status, wait_until_sync
from lockgate.backend.broker import Delivery, Settlement, safe_call
from lockgate.backend.keys import GROUP, Keys, SortedKeys, status_shard
from lockgate.backend.lua import ScriptCall, SyncScripts, source
from lockgate.backend.settling import batched_settles, unbatched
from lockgate.backend.settling import compact as is_compact
from lockgate.backend.stream_consumer import StreamConsumer
from lockgate.core import history
from lockgate.core.config import Levels
from lockgate.core.outcome import Outcome
from lua.test_stream_scripts import TIGHT_MEMORY, fill_memory, private_redis

# Workers named here never beat: each counts as dead as it did before liveness.
pytestmark = pytest.mark.usefixtures("liveness_of_old")

TTL_MS = 3_600_000
LEASE_MS = 60_000
TOKEN, OTHER = "tok", "other"
LETTER = {"job_id": "a", "reason": "boom"}


def run(scripts: SyncScripts, name: Any, script_keys: list[str], args: list[Any]) -> Any:
    return scripts.run_all([ScriptCall(name, script_keys, args)])[0]


def now_ms(rclient: redis.Redis) -> int:
    seconds, micros = rclient.time()
    return seconds * 1000 + micros // 1000


def now_us(rclient: redis.Redis) -> int:
    seconds, micros = rclient.time()
    return seconds * 1_000_000 + micros


@pytest.fixture
def claim(keys: Keys) -> str:
    return keys.claim(Keys.job_claim_name("charge", "a"))


def hold(rclient: redis.Redis, claim: str, value: str | None) -> None:
    """Put a claim in a state: 'c:<token>' (live, with a lease), 'd:<token>', or absent."""
    if value is not None:
        rclient.set(claim, value, px=LEASE_MS)


def marked_done(rclient: redis.Redis, claim: str) -> bool:
    """The claim's bucketed done marker is there, expiring about TTL_MS from now."""
    keys = Keys(claim.split("{", 1)[1].split("}", 1)[0])
    expiry = rclient.zscore(*keys.done_marker(claim))
    return expiry is not None and abs(expiry * 1000 - (now_ms(rclient) + TTL_MS)) < 60_000


def assert_done_marker(rclient: redis.Redis, claim: str, token: str, strings: bool = False) -> None:
    """The claim is done: gone, its marker in its bucket; with strings (legacy_markers)
    also the string marker 'd:<token>' that lockgate 0.2 wrote and reads."""
    assert marked_done(rclient, claim)
    if strings:
        assert rclient.get(claim) == f"d:{token}".encode()
        assert TTL_MS - 60_000 < rclient.pttl(claim) <= TTL_MS  # the done marker's TTL
    else:
        assert not rclient.exists(claim)


def history_keys(keys: Keys, kind: str, ends: tuple[str, bytes] | None) -> list[str]:
    """The history keys a settle call of ``kind`` carries with a history entry."""
    if ends is None:
        return []
    return [keys.history(ends[0], history.KIND_CODES[kind]), keys.history_tasks()]


def test_the_scripts_document_their_keys_and_args() -> None:
    for name in ("settle_stream", "settle_sorted"):
        text = source(name)
        assert text.startswith(f"-- {name}.lua")
        assert "-- KEYS" in text and "-- ARGV" in text


class StreamJob:
    """Job 'a' as one stream entry of queue 'q' (level 'low'), delivered to consumer c1."""

    def __init__(self, scripts: SyncScripts, keys: Keys, rclient: redis.Redis) -> None:
        self.scripts, self.keys, self.rclient = scripts, keys, rclient
        self.stream = keys.stream("q", "low")
        self.delayed = keys.delayed("q", "low")
        self.marker = keys.job("a")
        rclient.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
        self.entry_id = rclient.xadd(self.stream, {"job": "A"}).decode()
        self.placed = f"{self.entry_id} q:low".encode()
        rclient.set(self.marker, self.placed)  # what enqueue_stream writes
        rclient.xreadgroup(GROUP, "c1", {self.stream: ">"}, count=1)

    def settle(
        self,
        kind: str,
        *,
        consumer: str = "c1",
        claim: str | None = None,
        token: str = "",
        action: str = "keep",
        next_job: bytes = b"",
        delay_ms: int = 0,
        max_len: int = 0,
        max_age_ms: int = 0,
        letter: dict[str, str] | None = None,
        legacy: str | None = None,
        legacy_done: str = "",
        strings: bool = False,
        final: bytes = b"",
        final_ttl_ms: int = 0,
        result: bytes = b"",
        result_ttl_ms: int = 0,
        ends: tuple[str, bytes] | None = None,
    ) -> list[int]:
        """settle_stream with the ARGV layout of ``StreamConsumer.settle_call`` (legacy and
        strings: what ``App(legacy_markers=True)`` passes; ends: the history's task and
        entry)."""
        keys = self.keys
        script_keys = [
            self.stream, self.marker, self.delayed, keys.dead(), keys.wake(), keys.result("a"),
            keys.statuses(),
        ]  # fmt: skip
        if claim is not None:
            script_keys.append(claim)
            if legacy is not None:
                script_keys.append(legacy)
        script_keys += history_keys(keys, kind, ends)
        task, entry = ends or ("", b"")
        args: list[Any] = [
            GROUP, consumer, self.entry_id, kind, token, action, TTL_MS, legacy_done,
            keys.done_bucket_prefix, int(strings), next_job, delay_ms, max_len, max_age_ms,
            final, final_ttl_ms, "a", status_shard("a"), result, result_ttl_ms, "", "", entry,
            task,
        ]  # fmt: skip
        for name, value in (letter or {}).items():
            args += [name, value]
        return list(run(self.scripts, "settle_stream", script_keys, args))

    def pending(self) -> list[tuple[str, bytes]]:
        rows = self.rclient.xpending_range(self.stream, GROUP, "-", "+", 10)
        return [(row["message_id"].decode(), row["consumer"]) for row in rows]

    def in_stream(self) -> bool:
        return bool(self.rclient.xrange(self.stream, self.entry_id, self.entry_id))

    def settled(self) -> bool:
        """The entry is acked and deleted."""
        return not self.in_stream() and self.pending() == []

    def untouched(self, owner: bytes = b"c1") -> bool:
        """The entry is still in the stream, pending for ``owner``, its marker intact."""
        return (
            self.in_stream()
            and self.pending() == [(self.entry_id, owner)]
            and self.rclient.get(self.marker) == self.placed
        )


@pytest.fixture
def job(scripts: SyncScripts, keys: Keys, rclient: redis.Redis) -> StreamJob:
    return StreamJob(scripts, keys, rclient)


# (claim before the settle, claim action applied?; applied: the claim is marked done, else
# it is left as it was and no marker is written)
DONE_CLAIMS = [
    pytest.param(f"c:{TOKEN}", 1, id="ours"),
    pytest.param(None, 1, id="lapsed"),
    pytest.param(f"c:{OTHER}", 0, id="another-owners-live-claim"),
    pytest.param(f"d:{OTHER}", 0, id="another-owners-0.2-done-marker"),
]


def assert_claim_settled(
    rclient: redis.Redis, claim: str, before: str | None, applied: int, strings: bool = False
) -> None:
    if applied:
        assert_done_marker(rclient, claim, TOKEN, strings)
    else:
        assert before is not None and rclient.get(claim) == before.encode()
        assert not marked_done(rclient, claim)


@pytest.mark.parametrize("strings", [False, True])
@pytest.mark.parametrize(("before", "applied"), DONE_CLAIMS)
def test_settle_stream_done_acks_deletes_frees_and_marks_done(
    job: StreamJob,
    rclient: redis.Redis,
    claim: str,
    before: str | None,
    applied: int,
    strings: bool,
) -> None:
    hold(rclient, claim, before)
    reply = job.settle("done", claim=claim, token=TOKEN, action="done", strings=strings)
    assert reply == [1, applied]
    assert job.settled()
    assert not rclient.exists(job.marker)  # the job id is free for a new enqueue
    assert_claim_settled(rclient, claim, before, applied, strings)
    assert not rclient.exists(job.delayed, job.keys.dead(), job.keys.wake())


@pytest.mark.parametrize("strings", [False, True])
def test_settle_stream_done_again_reports_the_done_marker_already_written(
    job: StreamJob, rclient: redis.Redis, claim: str, strings: bool
) -> None:
    """The first reply was lost (connection cut after the call ran): the retried call
    finds the entry gone and the claim done, and says the claim action applied."""
    hold(rclient, claim, f"c:{TOKEN}")
    reply = job.settle("done", claim=claim, token=TOKEN, action="done", strings=strings)
    assert reply == [1, 1]
    expiry = rclient.zscore(*job.keys.done_marker(claim))
    reply = job.settle("done", claim=claim, token=TOKEN, action="done", strings=strings)
    assert reply == [0, 1]
    assert_done_marker(rclient, claim, TOKEN, strings)
    assert rclient.zscore(*job.keys.done_marker(claim)) == expiry  # not written again


def test_settle_stream_done_without_a_claim(job: StreamJob, rclient: redis.Redis) -> None:
    assert job.settle("done") == [1, 0]
    assert job.settled() and not rclient.exists(job.marker)


@pytest.mark.parametrize(
    ("before", "applied"), [pytest.param(f"c:{TOKEN}", 1, id="ours"), (f"c:{OTHER}", 0)]
)
def test_settle_stream_retry_schedules_the_next_attempt(
    job: StreamJob, rclient: redis.Redis, claim: str, before: str, applied: int
) -> None:
    hold(rclient, claim, before)
    start = now_ms(rclient)
    reply = job.settle(
        "retry", claim=claim, token=TOKEN, action="release", next_job=b"NEXT", delay_ms=5_000
    )
    end = now_ms(rclient)
    assert reply == [1, applied]
    assert job.settled()
    ((payload, due),) = rclient.zrange(job.delayed, 0, -1, withscores=True)
    assert payload == b"NEXT"
    assert start + 5_000 <= due <= end + 5_000  # by the server's clock
    # Idle workers blocked on the wake stream re-read their next due time.
    ((_, fields),) = rclient.xrange(job.keys.wake())
    assert fields == {b"due": b"5000"}
    # The id stays taken, and its marker says where the next attempt waits.
    assert rclient.get(job.marker) == b"delayed %d q:low" % due
    assert rclient.get(claim) == (None if applied else before.encode())


def test_settle_stream_dead_writes_the_letter_and_frees_the_job(
    job: StreamJob, rclient: redis.Redis, claim: str
) -> None:
    hold(rclient, claim, f"c:{TOKEN}")
    reply = job.settle("dead", claim=claim, token=TOKEN, action="release", letter=LETTER)
    assert reply == [1, 1]
    assert job.settled()
    ((_, fields),) = rclient.xrange(job.keys.dead())
    assert fields == {k.encode(): v.encode() for k, v in LETTER.items()}
    assert not rclient.exists(job.marker, claim)
    assert not rclient.exists(job.delayed, job.keys.wake())


def fill_dead_letters(rclient: redis.Redis, dead: str, count: int, *, old: bool) -> None:
    """Add letters to a dead-letter stream: new ones, or ones with ids from 1970."""
    with rclient.pipeline(transaction=False) as pipe:
        for n in range(count):
            pipe.xadd(dead, {"job_id": f"old{n}"}, id=f"1-{n + 1}" if old else "*")
        pipe.execute()


def test_settle_stream_dead_trims_the_letters_by_length(
    job: StreamJob, rclient: redis.Redis
) -> None:
    dead = job.keys.dead()
    fill_dead_letters(rclient, dead, 999, old=False)
    assert job.settle("dead", max_len=10, letter=LETTER) == [1, 0]
    # MAXLEN ~ drops whole macro nodes only (100 entries each by default): far fewer than
    # 1,000 are left, never fewer than 10, and the newest letter is kept.
    assert 10 <= rclient.xlen(dead) < 500
    ((_, fields),) = rclient.xrevrange(dead, count=1)
    assert fields[b"reason"] == b"boom"


def test_settle_stream_dead_trims_the_letters_by_age(job: StreamJob, rclient: redis.Redis) -> None:
    dead = job.keys.dead()
    fill_dead_letters(rclient, dead, 1000, old=True)
    assert job.settle("dead", max_age_ms=60_000, letter=LETTER) == [1, 0]
    assert rclient.xlen(dead) < 500  # MINID ~ dropped the old letters' nodes
    ((_, fields),) = rclient.xrevrange(dead, count=1)
    assert fields[b"reason"] == b"boom"


def test_settle_stream_dead_with_no_limits_keeps_every_letter(
    job: StreamJob, rclient: redis.Redis
) -> None:
    fill_dead_letters(rclient, job.keys.dead(), 999, old=True)
    assert job.settle("dead", letter=LETTER) == [1, 0]
    assert rclient.xlen(job.keys.dead()) == 1000


@pytest.mark.parametrize("kind", ["done", "retry", "dead"])
def test_a_zombies_settle_leaves_the_entry_another_worker_reclaimed(
    job: StreamJob, rclient: redis.Redis, claim: str, kind: str
) -> None:
    """Defect 7: c1 was paused past the visibility timeout; c2 reclaimed the entry and runs
    it (holding the claim). c1 wakes and settles: nothing of c2's job may change."""
    rclient.xclaim(job.stream, GROUP, "c2", 0, [job.entry_id])  # what reclaim_stream does
    hold(rclient, claim, f"c:{OTHER}")
    reply = job.settle(
        kind, claim=claim, token=TOKEN, action="done" if kind == "done" else "release",
        next_job=b"NEXT", delay_ms=1, max_len=10, letter=LETTER,
    )  # fmt: skip
    assert reply == [0, 0]
    assert job.untouched(owner=b"c2")
    assert rclient.get(claim) == f"c:{OTHER}".encode()
    assert not rclient.exists(job.delayed, job.keys.wake(), job.keys.dead())
    # c2, the owner, settles it.
    assert job.settle("done", consumer="c2", claim=claim, token=OTHER, action="done") == [1, 1]
    assert job.settled()
    assert_done_marker(rclient, claim, OTHER)


def test_a_zombies_settle_of_a_finished_and_requeued_job_frees_nothing(
    job: StreamJob, rclient: redis.Redis
) -> None:
    """c2 reclaimed the entry and finished it; the id was enqueued again. c1's late settle
    must not free the id of the newer job."""
    rclient.xclaim(job.stream, GROUP, "c2", 0, [job.entry_id])
    assert job.settle("done", consumer="c2") == [1, 0]
    newer = rclient.xadd(job.stream, {"job": "A again"})
    rclient.set(job.marker, newer)
    assert job.settle("done") == [0, 0]
    assert rclient.get(job.marker) == newer
    assert [entry_id for entry_id, _ in rclient.xrange(job.stream)] == [newer]


@pytest.mark.parametrize(
    ("action", "before", "applied", "after"),
    [
        pytest.param("release", f"c:{TOKEN}", 1, None, id="release-ours"),
        pytest.param("release", f"c:{OTHER}", 0, f"c:{OTHER}", id="release-another-owners"),
        pytest.param("keep", f"c:{TOKEN}", 0, f"c:{TOKEN}", id="keep"),
    ],
)
def test_settle_stream_abandoned_touches_only_the_claim(
    job: StreamJob,
    rclient: redis.Redis,
    claim: str,
    action: str,
    before: str,
    applied: int,
    after: str | None,
) -> None:
    hold(rclient, claim, before)
    assert job.settle("abandoned", claim=claim, token=TOKEN, action=action) == [0, applied]
    assert job.untouched()  # another worker reclaims it once this one stops heartbeating
    assert rclient.get(claim) == (after.encode() if after else None)


def test_settle_stream_after_the_group_is_gone_settles_nothing_but_the_claim(
    job: StreamJob, rclient: redis.Redis, claim: str
) -> None:
    rclient.delete(job.stream)  # as FLUSHALL or a restart without persistence would
    hold(rclient, claim, f"c:{TOKEN}")
    assert job.settle("done", claim=claim, token=TOKEN, action="done") == [0, 1]
    assert_done_marker(rclient, claim, TOKEN)


@pytest.mark.parametrize("kind", ["done", "retry", "dead"])
def test_settle_stream_lands_under_oom(tmp_path: Path, kind: str) -> None:
    """With maxmemory + noeviction, Redis refuses a script's first memory-growing write but
    not one after a write: the XACK comes first, so a settle lands and frees memory."""
    with private_redis(tmp_path, *TIGHT_MEMORY) as client:
        keys = Keys("oom")
        job = StreamJob(SyncScripts(client), keys, client)
        claim = keys.claim(Keys.job_claim_name("charge", "a"))
        hold(client, claim, f"c:{TOKEN}")
        fill_memory(client, f"{keys.prefix}:junk")
        action = "done" if kind == "done" else "release"
        reply = job.settle(
            kind, claim=claim, token=TOKEN, action=action, next_job=b"NEXT", delay_ms=1,
            letter=LETTER,
        )  # fmt: skip
        assert reply == [1, 1]
        assert job.settled()
        assert client.zcard(job.delayed) == (1 if kind == "retry" else 0)
        assert client.xlen(keys.dead()) == (1 if kind == "dead" else 0)
        assert not client.exists(claim)
        assert (client.zscore(*keys.done_marker(claim)) is not None) == (kind == "done")


class SortedJob:
    """Job 'a' of sorted-backend queue 'q', enqueued (rank boosted by nothing)."""

    def __init__(self, scripts: SyncScripts, keys: Keys, rclient: redis.Redis) -> None:
        self.scripts, self.keys, self.rclient = scripts, keys, rclient
        self.q: SortedKeys = keys.sorted_keys("q")
        self.marker = keys.job("a")
        q = self.q
        script_keys = [
            q.waiting, q.payloads, q.ranks, q.clock, q.wake, q.delayed, self.marker, self.marker
        ]  # fmt: skip
        assert run(scripts, "enqueue_sorted", script_keys, ["a", 0, "PA", 0, 0]) == [1]

    def take(self, consumer: str, lease_ms: int = LEASE_MS) -> bytes:
        """take_sorted by one worker; the owner token of its take of 'a'."""
        q = self.q
        taken, _, _, _ = run(
            self.scripts,
            "take_sorted",
            [q.waiting, q.inflight, q.payloads, q.ranks, q.delayed, q.deliveries, q.owners, q.wake,
             self.keys.paused(), self.keys.liveness()],
            [1, lease_ms, consumer, *LIVENESS_ARGS, 0, 0],
        )  # fmt: skip
        assert taken[0] == b"a", taken
        return bytes(taken[3])

    def settle(
        self,
        owner: bytes,
        kind: str,
        *,
        claim: str | None = None,
        token: str = "",
        action: str = "keep",
        next_job: bytes = b"",
        delay_ms: int = 0,
        boost_us: int = 0,
        max_len: int = 0,
        letter: dict[str, str] | None = None,
        strings: bool = False,
        final: bytes = b"",
        final_ttl_ms: int = 0,
        result: bytes = b"",
        result_ttl_ms: int = 0,
        ends: tuple[str, bytes] | None = None,
    ) -> list[int]:
        """settle_sorted with the ARGV layout of ``SortedConsumer.settle_call``."""
        q = self.q
        script_keys = [
            q.inflight, q.payloads, q.ranks, q.deliveries, q.owners, q.delayed,
            self.keys.dead(), q.wake, self.marker, self.keys.result("a"), self.keys.statuses(),
        ]  # fmt: skip
        if claim is not None:
            script_keys.append(claim)
        script_keys += history_keys(self.keys, kind, ends)
        task, entry = ends or ("", b"")
        args: list[Any] = [
            "a", owner, kind, token, action, TTL_MS, "", self.keys.done_bucket_prefix,
            int(strings), next_job, delay_ms, boost_us, max_len, 0,
            final, final_ttl_ms, "a", status_shard("a"), result, result_ttl_ms, "", "", entry,
            task,
        ]  # fmt: skip
        for name, value in (letter or {}).items():
            args += [name, value]
        return list(run(self.scripts, "settle_sorted", script_keys, args))

    def state(self) -> dict[str, Any]:
        """Everything a settle may change about job 'a' (besides its claim)."""
        r, q = self.rclient, self.q
        return {
            "inflight": r.zscore(q.inflight, "a"),
            "waiting": r.zscore(q.waiting, "a"),
            "delayed": r.zscore(q.delayed, "a"),
            "payload": r.hget(q.payloads, "a"),
            "rank": r.hget(q.ranks, "a"),
            "deliveries": r.hget(q.deliveries, "a"),
            "owner": r.hget(q.owners, "a"),
            "marker": r.get(self.marker),
            "wake": r.xlen(q.wake),
            "dead": r.xlen(self.keys.dead()),
        }

    def gone(self) -> bool:
        """Nothing of job 'a' is left but (maybe) its dead letter and claim."""
        state = self.state()
        return all(state[name] is None for name in state if name not in ("wake", "dead"))


@pytest.fixture
def sorted_job(scripts: SyncScripts, keys: Keys, rclient: redis.Redis) -> SortedJob:
    return SortedJob(scripts, keys, rclient)


@pytest.mark.parametrize("strings", [False, True])
@pytest.mark.parametrize(("before", "applied"), DONE_CLAIMS)
def test_settle_sorted_done_finishes_the_job_and_marks_it_done(
    sorted_job: SortedJob,
    rclient: redis.Redis,
    claim: str,
    before: str | None,
    applied: int,
    strings: bool,
) -> None:
    owner = sorted_job.take("w1")
    hold(rclient, claim, before)
    settle = {"claim": claim, "token": TOKEN, "action": "done", "strings": strings}
    assert sorted_job.settle(owner, "done", **settle) == [1, applied]
    assert sorted_job.gone()  # the job id is free for a new enqueue
    assert_claim_settled(rclient, claim, before, applied, strings)
    # A lost reply: the retried call settles nothing more, and reports its done marker.
    assert sorted_job.settle(owner, "done", **settle) == [0, applied]
    assert_claim_settled(rclient, claim, before, applied, strings)


@pytest.mark.parametrize(
    ("before", "applied"), [pytest.param(f"c:{TOKEN}", 1, id="ours"), (f"c:{OTHER}", 0)]
)
def test_settle_sorted_retry_schedules_the_next_attempt(
    sorted_job: SortedJob, rclient: redis.Redis, claim: str, before: str, applied: int
) -> None:
    owner = sorted_job.take("w1")
    hold(rclient, claim, before)
    wakes = rclient.xlen(sorted_job.q.wake)
    start_us = now_us(rclient)
    reply = sorted_job.settle(
        owner, "retry", claim=claim, token=TOKEN, action="release", next_job=b"NEXT",
        delay_ms=5_000, boost_us=60_000_000,
    )  # fmt: skip
    end_us = now_us(rclient)
    assert reply == [1, applied]
    state = sorted_job.state()
    assert (state["inflight"], state["owner"], state["deliveries"]) == (None, None, None)
    assert state["payload"] == b"NEXT"
    # due in ms, kept to the microsecond (a keyed job's lane score, see take_sorted.lua)
    assert start_us / 1000 + 5_000 <= state["delayed"] <= end_us / 1000 + 5_000
    # Its rank, once due: the due stamp, less its level's head start.
    rank = int(state["rank"])
    assert start_us + 5_000_000 - 60_000_000 <= rank <= end_us + 5_000_000 - 60_000_000
    assert state["marker"] == b"sorted q"  # the id stays taken
    assert state["wake"] == wakes + 1
    ((_, fields),) = rclient.xrevrange(sorted_job.q.wake, count=1)
    assert fields == {b"due": b"5000"}
    assert rclient.get(claim) == (None if applied else before.encode())


def test_settle_sorted_dead_writes_the_letter_trims_and_frees_the_job(
    sorted_job: SortedJob, rclient: redis.Redis, claim: str
) -> None:
    owner = sorted_job.take("w1")
    hold(rclient, claim, f"c:{TOKEN}")
    dead = sorted_job.keys.dead()
    fill_dead_letters(rclient, dead, 999, old=False)
    reply = sorted_job.settle(
        owner, "dead", claim=claim, token=TOKEN, action="release", max_len=10, letter=LETTER
    )
    assert reply == [1, 1]
    assert sorted_job.gone()
    assert not rclient.exists(claim)
    assert 10 <= rclient.xlen(dead) < 500
    ((_, fields),) = rclient.xrevrange(dead, count=1)
    assert fields == {k.encode(): v.encode() for k, v in LETTER.items()}


@pytest.mark.parametrize("kind", ["done", "retry", "dead"])
def test_a_settle_by_a_worker_whose_lease_lapsed_changes_nothing(
    sorted_job: SortedJob, rclient: redis.Redis, claim: str, kind: str
) -> None:
    """w1 was paused past its lease; w2 took the job and runs it (holding the claim). w1
    wakes and settles: nothing of w2's take may change."""
    stale = sorted_job.take("w1", lease_ms=50)
    deadline = rclient.zscore(sorted_job.q.inflight, "a")
    wait_until_sync(lambda: now_ms(rclient) > deadline, message="w1's lease over")
    current = sorted_job.take("w2")
    assert current != stale
    hold(rclient, claim, f"c:{OTHER}")
    before = sorted_job.state()
    reply = sorted_job.settle(
        stale, kind, claim=claim, token=TOKEN, action="done" if kind == "done" else "release",
        next_job=b"NEXT", delay_ms=1, letter=LETTER,
    )  # fmt: skip
    assert reply == [0, 0]
    assert sorted_job.state() == before
    assert rclient.get(claim) == f"c:{OTHER}".encode()
    # w2, the owner, settles it.
    assert sorted_job.settle(current, "done", claim=claim, token=OTHER, action="done") == [1, 1]
    assert sorted_job.gone()
    assert_done_marker(rclient, claim, OTHER)


def test_a_settle_after_the_lease_lapsed_and_the_job_went_back_changes_nothing(
    sorted_job: SortedJob, scripts: SyncScripts, rclient: redis.Redis
) -> None:
    """The lease lapsed and a take put the job back in waiting; nobody runs it yet. The old
    owner's settle must not finish it: it will run again (as a redelivery)."""
    owner = sorted_job.take("w1")
    rclient.zadd(sorted_job.q.inflight, {"a": 1})  # w1's lease ended long ago
    q = sorted_job.q
    run(
        scripts,
        "take_sorted",
        [q.waiting, q.inflight, q.payloads, q.ranks, q.delayed, q.deliveries, q.owners, q.wake,
         sorted_job.keys.paused(), sorted_job.keys.liveness()],
        [0, LEASE_MS, "w2", *LIVENESS_ARGS, 0, 0],
    )  # fmt: skip
    before = sorted_job.state()
    assert before["waiting"] is not None
    assert sorted_job.settle(owner, "done") == [0, 0]
    assert sorted_job.state() == before


@pytest.mark.parametrize(
    ("action", "before", "applied", "after"),
    [
        pytest.param("release", f"c:{TOKEN}", 1, None, id="release-ours"),
        pytest.param("release", f"c:{OTHER}", 0, f"c:{OTHER}", id="release-another-owners"),
        pytest.param("keep", f"c:{TOKEN}", 0, f"c:{TOKEN}", id="keep"),
    ],
)
def test_settle_sorted_abandoned_touches_only_the_claim(
    sorted_job: SortedJob,
    rclient: redis.Redis,
    claim: str,
    action: str,
    before: str,
    applied: int,
    after: str | None,
) -> None:
    owner = sorted_job.take("w1")
    hold(rclient, claim, before)
    state = sorted_job.state()
    reply = sorted_job.settle(owner, "abandoned", claim=claim, token=TOKEN, action=action)
    assert reply == [0, applied]
    assert sorted_job.state() == state  # its lease lapses; another worker takes it
    assert rclient.get(claim) == (after.encode() if after else None)


def test_settle_sorted_lands_under_oom(tmp_path: Path) -> None:
    with private_redis(tmp_path, *TIGHT_MEMORY) as client:
        keys = Keys("oom")
        job = SortedJob(SyncScripts(client), keys, client)
        owner = job.take("w1")
        claim = keys.claim(Keys.job_claim_name("charge", "a"))
        hold(client, claim, f"c:{TOKEN}")
        fill_memory(client, f"{keys.prefix}:junk")
        assert job.settle(owner, "done", claim=claim, token=TOKEN, action="done") == [1, 1]
        assert job.gone()
        assert not client.exists(claim)
        assert client.zscore(*keys.done_marker(claim)) is not None


def idem_claim(
    scripts: SyncScripts, keys: Keys, legacy: bool = True, mirror: bool = False
) -> list[int]:
    """idem_claim of job 'a' of task 'charge' (mirror: with ``legacy_markers``)."""
    script_keys = [keys.claim(Keys.job_claim_name("charge", "a"))]
    if legacy:
        script_keys.append(keys.claim(Keys.legacy_job_claim_name("a")))
    args = [TOKEN, LEASE_MS, "charge", keys.done_bucket_prefix, int(mirror)]
    return list(run(scripts, "idem_claim", script_keys, args))


def test_idem_claim_honours_a_legacy_done_marker(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    rclient.set(keys.claim(Keys.legacy_job_claim_name("a")), "d:x", px=TTL_MS)
    assert idem_claim(scripts, keys) == [0, 0]
    assert not rclient.exists(keys.claim(Keys.job_claim_name("charge", "a")))
    assert rclient.get(keys.claim(Keys.legacy_job_claim_name("a"))) == b"d:x"


def test_idem_claim_honours_a_legacy_live_claim(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    rclient.set(keys.claim(Keys.legacy_job_claim_name("a")), "c:x", px=5_000)
    busy, left = idem_claim(scripts, keys)
    assert busy == -1
    assert 0 < left <= 5_000  # the time left on the old worker's lease
    assert not rclient.exists(keys.claim(Keys.job_claim_name("charge", "a")))


@pytest.mark.parametrize("mirror", [False, True])
def test_idem_claim_claims_when_no_legacy_key_exists(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis, mirror: bool
) -> None:
    assert idem_claim(scripts, keys, mirror=mirror) == [1, 0]
    key = keys.claim(Keys.job_claim_name("charge", "a"))
    assert rclient.get(key) == f"c:{TOKEN}".encode()
    assert LEASE_MS - 10_000 < rclient.pttl(key) <= LEASE_MS
    legacy = keys.claim(Keys.legacy_job_claim_name("a"))
    if mirror:
        # Mirrored under the 0.1 name (legacy_markers), so a 0.1 worker of a rolling
        # deploy sees it is run.
        assert rclient.get(legacy) == f"c:{TOKEN}".encode()
        assert LEASE_MS - 10_000 < rclient.pttl(legacy) <= LEASE_MS
    else:
        assert not rclient.exists(legacy)
    assert idem_claim(scripts, keys)[0] == -1  # the new key is honoured first


def test_the_0_1_name_follows_a_job_claim_renewed_released_and_done(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    """With legacy_markers: the claim passes its 0.1 name to idem_settle."""
    key = keys.claim(Keys.job_claim_name("charge", "a"))
    legacy = keys.claim(Keys.legacy_job_claim_name("a"))
    assert idem_claim(scripts, keys, mirror=True) == [1, 0]

    def settle(action: str, ms: int) -> int:
        args = [TOKEN, action, ms, f"d:{TOKEN}:t:charge", keys.done_bucket_prefix, 1]
        return int(run(scripts, "idem_settle", [key, legacy], args))

    assert settle("renew", 600_000) == 1
    assert rclient.pttl(legacy) > LEASE_MS
    assert settle("release", 0) == 1
    assert not rclient.exists(key) and not rclient.exists(legacy)
    assert idem_claim(scripts, keys, mirror=True) == [1, 0]
    assert settle("done", 3_600_000) == 1
    assert rclient.get(key) == f"d:{TOKEN}".encode()
    assert rclient.zscore(*keys.done_marker(key)) is not None
    assert rclient.get(legacy) == f"d:{TOKEN}:t:charge".encode()
    rclient.set(legacy, "c:someone-else", px=5_000)  # a 0.1 worker's live claim
    assert settle("done", 3_600_000) == 0  # ours is done already: nothing touched
    assert rclient.get(legacy) == b"c:someone-else"


def test_idem_claim_without_a_legacy_key_ignores_the_legacy_claim(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    rclient.set(keys.claim(Keys.legacy_job_claim_name("a")), "d:x", px=TTL_MS)
    assert idem_claim(scripts, keys, legacy=False) == [1, 0]


# A rolling deploy: 0.1 workers read idempotent job claims under idem:job:{id} alone.
LEGACY_DONE = f"d:{TOKEN}:t:charge"


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param(None, LEGACY_DONE, id="absent"),
        pytest.param(f"d:{OTHER}", LEGACY_DONE, id="a-0.1-done-marker"),
        pytest.param(f"c:{OTHER}", f"c:{OTHER}", id="a-live-0.1-claim-is-left"),
    ],
)
def test_settle_stream_done_also_marks_the_0_1_name_for_old_workers(
    job: StreamJob, rclient: redis.Redis, claim: str, before: str | None, after: str
) -> None:
    """With legacy_markers: the 0.1 name and the strings flag are passed."""
    legacy = job.keys.claim("job:legacy-id")
    hold(rclient, claim, f"c:{TOKEN}")
    if before is not None:
        rclient.set(legacy, before)
    reply = job.settle(
        "done", claim=claim, token=TOKEN, action="done", legacy=legacy, legacy_done=LEGACY_DONE,
        strings=True,
    )  # fmt: skip
    assert reply == [1, 1]
    assert rclient.get(legacy) == after.encode()
    if after == LEGACY_DONE:
        assert 0 < rclient.pttl(legacy) <= TTL_MS
    assert_done_marker(rclient, claim, TOKEN, strings=True)


@pytest.mark.parametrize("before", [None, f"d:{OTHER}", f"c:{OTHER}"])
def test_settle_stream_done_by_default_writes_nothing_under_the_0_1_name(
    job: StreamJob, rclient: redis.Redis, claim: str, before: str | None
) -> None:
    """Without legacy_markers no 0.1 name is passed: only the bucketed marker is written."""
    legacy = job.keys.claim(Keys.legacy_job_claim_name("a"))
    hold(rclient, claim, f"c:{TOKEN}")
    if before is not None:
        rclient.set(legacy, before)
    assert job.settle("done", claim=claim, token=TOKEN, action="done") == [1, 1]
    assert rclient.get(legacy) == (before.encode() if before is not None else None)
    assert_done_marker(rclient, claim, TOKEN)


def test_settle_stream_retry_leaves_the_0_1_name_alone(
    job: StreamJob, rclient: redis.Redis, claim: str
) -> None:
    legacy = job.keys.claim("job:legacy-id")
    hold(rclient, claim, f"c:{TOKEN}")
    job.settle("retry", claim=claim, token=TOKEN, action="release", legacy=legacy,
               legacy_done=LEGACY_DONE, next_job=b"NEXT", delay_ms=10)  # fmt: skip
    assert rclient.get(legacy) is None


@pytest.mark.parametrize(
    ("legacy_value", "scope", "answer"),
    [
        pytest.param(LEGACY_DONE, "charge", [0, 0], id="tagged-for-this-task"),
        pytest.param(LEGACY_DONE, "send_receipt", [1, 0], id="tagged-for-another-task"),
        pytest.param(f"d:{OTHER}", "send_receipt", [0, 0], id="untagged-0.1-marker"),
    ],
)
def test_idem_claim_reads_the_task_tag_of_a_0_1_name_marker(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis, legacy_value: str, scope: str,
    answer: list[int],
) -> None:  # fmt: skip
    legacy = keys.claim("job:order:42")
    rclient.set(legacy, legacy_value)
    claim = keys.claim(f"job:{scope}:order:42")
    args = [TOKEN, 5000, scope, keys.done_bucket_prefix, 0]
    reply = list(run(scripts, "idem_claim", [claim, legacy], args))
    assert reply == answer
    assert rclient.get(legacy) == legacy_value.encode()  # never written by a claim


def test_settle_many_applies_each_call_in_order_and_keeps_a_failing_one_apart(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    """Three endings of one stream in one settle_many call: the two that can land do, the
    one that raises (its wake stream is a string: XADD fails) comes back as its own error,
    as it would from a pipeline of three calls."""
    stream, wrong_wake = keys.stream("q", "low"), keys.wake() + ":not-a-stream"
    rclient.xgroup_create(stream, GROUP, id="0", mkstream=True)
    rclient.set(wrong_wake, "x")
    ids = [rclient.xadd(stream, {"job": name}).decode() for name in "abc"]
    rclient.xreadgroup(GROUP, "c1", {stream: ">"}, count=3)
    calls = []
    for n, (job, entry) in enumerate(zip("abc", ids, strict=True)):
        kind, wake = ("retry", wrong_wake) if n == 1 else ("done", keys.wake())
        script_keys = [
            stream, keys.job(job), keys.delayed("q", "low"), keys.dead(), wake,
            keys.result(job), keys.statuses(),
        ]  # fmt: skip
        args: list[Any] = [
            GROUP, "c1", entry, kind, "", "keep", TTL_MS, "", keys.done_bucket_prefix, 0,
            b"next" if kind == "retry" else b"", 0, 0, 0, b"", 0, job, "", b"", 0, "",
        ]  # fmt: skip
        calls.append(ScriptCall("settle_stream", script_keys, args))
    batches, spans = batched_settles(calls)
    # Whole calls of one stream: one batch, in their order.
    assert [(call.script, call.args[0]) for call in batches] == [
        ("settle_many", "settle_stream")
    ] and spans == [[0, 1, 2]]  # fmt: skip
    replies = unbatched(batches, scripts.run_each(batches), spans, 3)
    assert [int(v) for v in replies[0]] == [1, 0] and [int(v) for v in replies[2]] == [1, 0]
    assert isinstance(replies[1], redis.ResponseError) and "WRONGTYPE" in str(replies[1])
    pending = rclient.xpending_range(stream, GROUP, "-", "+", 10)
    # The failed call acked its entry before its XADD raised (a script error is not
    # rolled back, in a batch or alone); the others settled whole.
    assert pending == [] and rclient.xlen(stream) == 0


def test_the_compact_form_of_a_done_ending_leaves_what_the_whole_call_leaves(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    """Endings built by the consumer itself, one with a claim and one without: settled in
    settle_many's compact form (StreamConsumer.settle_call), the server holds exactly what
    the whole calls (whole_settle_call) sent one by one leave (entry, marker, status
    record, claim, done marker), key for key."""
    levels = Levels(weights={"low": 1})
    consumer = StreamConsumer(
        None, url="redis://", keys=keys, levels=levels, queues=["q"], consumer="c1"
    )  # type: ignore[arg-type]
    stream = keys.stream("q", "low")

    def endings(suffix: str) -> list[ScriptCall]:
        rclient.xgroup_create(stream + suffix, GROUP, id="0", mkstream=True)
        calls = []
        for job_id, claimed in (("a" + suffix, True), ("b" + suffix, False)):
            entry = rclient.xadd(stream + suffix, {"job": "A"}).decode()
            rclient.set(keys.job(job_id), f"{entry} q:low")
            claim = keys.claim(Keys.job_claim_name("charge", job_id))
            if claimed:
                rclient.set(claim, "c:tok", px=LEASE_MS)
            delivery = Delivery("q", 0, stream + suffix, entry, None, job_id=job_id)
            settlement = Settlement(
                delivery, Outcome("done", claim="done"), claim_key=claim if claimed else None,
                claim_token="tok" if claimed else "", claim_ttl=TTL_MS / 1000,
                done_prefix=keys.done_bucket_prefix, final=b'{"s":"done"}',
                final_ttl_ms=TTL_MS,
            )  # fmt: skip
            build = consumer.settle_call if suffix else consumer.whole_settle_call
            calls.append(safe_call(build(settlement)))
        rclient.xreadgroup(GROUP, "c1", {stream + suffix: ">"}, count=2)
        return calls

    consumer._places[stream + ":2"] = ("q", 0)  # a second stream of the same level
    whole, compact = endings(""), endings(":2")
    assert all(call.script == "settle_stream" for call in whole)
    assert all(is_compact(call) for call in compact)
    replies_whole = scripts.run_each(whole)
    batches, spans = batched_settles(compact)
    assert [call.args[0] for call in batches] == ["stream_done"]
    replies_compact = unbatched(batches, scripts.run_each(batches), spans, 2)
    assert [list(map(int, r)) for r in replies_whole] == [[1, 1], [1, 0]]
    assert [list(map(int, r)) for r in replies_compact] == [[1, 1], [1, 0]]
    for job in ("a", "b"):
        for key in (keys.job, keys.result):
            assert rclient.get(key(job)) == rclient.get(key(job + ":2"))
            assert (rclient.pttl(key(job)) > 0) == (rclient.pttl(key(job + ":2")) > 0)
        assert kept_status(rclient, keys, job) == kept_status(rclient, keys, job + ":2")
        assert not rclient.exists(keys.claim(Keys.job_claim_name("charge", job)))
        assert not rclient.exists(keys.claim(Keys.job_claim_name("charge", job + ":2")))
    assert kept_status(rclient, keys, "a") == b'{"s":"done"}'
    assert marked_done(rclient, keys.claim(Keys.job_claim_name("charge", "a")))
    assert marked_done(rclient, keys.claim(Keys.job_claim_name("charge", "a:2")))
    for name in (stream, stream + ":2"):
        assert rclient.xlen(name) == 0 and rclient.xpending(name, GROUP)["pending"] == 0


@pytest.mark.serial  # commandstats are the whole server's: other tests' TIMEs would count
def test_a_settle_many_call_reads_the_server_clock_once_for_all_its_endings(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    """Through the library (FCALL), the settle bodies settle_many runs share one clock:
    one TIME for a batch of endings that each keep a final record, not one each."""
    stream = keys.stream("q", "low")
    rclient.xgroup_create(stream, GROUP, id="0", mkstream=True)
    ids = [rclient.xadd(stream, {"job": "x"}).decode() for _ in range(20)]
    rclient.xreadgroup(GROUP, "c1", {stream: ">"}, count=20)
    shared = [GROUP, "c1", keys.prefix, keys.done_bucket_prefix, 60_000]
    values: list[Any] = []
    for n, entry in enumerate(ids):
        values += [entry, f"j{n}", b"rec", status_shard(f"j{n}"), "", "", "keep", 0, b"", ""]
    call = ScriptCall(
        "settle_many", [stream, keys.delayed("q", "low"), keys.dead(), keys.wake()],
        ["stream_done", *shared, *values],
    )  # fmt: skip
    scripts.run_all([ScriptCall("server_time", [], [])])  # the library loaded first

    def time_calls() -> int:
        return int(rclient.info("commandstats").get("cmdstat_time", {}).get("calls", 0))

    before = time_calls()
    replies = scripts.run_all([call])[0]
    assert [list(map(int, r)) for r in replies] == [[1, 0]] * 20
    assert time_calls() - before == 1
    assert all(kept_status(rclient, keys, f"j{n}") == b"rec" for n in range(20))
