"""The settle scripts keep each task's recent ends (``lua/_history.lua``): one entry
pushed in the call that settles the job, on the list of its task and outcome, trimmed
back to the newest 1,000 once it passes 1,100, the task listed in the index when its
list is new; nothing for a settle that is not the owner's, nor without an entry."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from lockgate.backend.keys import GROUP, Keys, status_shard
from lockgate.backend.lua import ScriptCall, SyncScripts
from lockgate.core import history
from lockgate.core.outcome import DONE, ErrorInfo, Outcome
from lua.test_settle_scripts import LETTER, SortedJob, StreamJob

pytestmark = pytest.mark.usefixtures("liveness_of_old")


def entry(job_id: str = "a", attempt: int = 1, error: str = "") -> bytes:
    outcome = Outcome("dead", error=ErrorInfo("E", error)) if error else DONE
    return history.pack_end(job_id, outcome, attempt, 1000.0, 1000.25)


def ends(rclient: redis.Redis, keys: Keys, task: str, code: str) -> list[bytes]:
    return [bytes(e) for e in rclient.lrange(keys.history(task, code), 0, -1)]


def index(rclient: redis.Redis, keys: Keys) -> list[bytes]:
    return [bytes(name) for name in rclient.zrange(keys.history_tasks(), 0, -1)]


@pytest.fixture
def stream_job(scripts: SyncScripts, keys: Keys, rclient: redis.Redis) -> StreamJob:
    return StreamJob(scripts, keys, rclient)


@pytest.fixture
def sorted_job(scripts: SyncScripts, keys: Keys, rclient: redis.Redis) -> SortedJob:
    return SortedJob(scripts, keys, rclient)


@pytest.mark.parametrize(("kind", "code"), [("done", "d"), ("retry", "r"), ("dead", "x")])
def test_settle_stream_pushes_the_entry_on_its_tasks_list_of_its_outcome(
    stream_job: StreamJob, keys: Keys, rclient: redis.Redis, kind: str, code: str
) -> None:
    end = entry()
    letter = LETTER if kind == "dead" else None
    next_job = b"next" if kind == "retry" else b""
    reply = stream_job.settle(kind, ends=("charge", end), letter=letter, next_job=next_job)
    assert reply == [1, 0] and stream_job.settled()
    assert ends(rclient, keys, "charge", code) == [end]
    assert index(rclient, keys) == [b"charge"]
    assert rclient.pttl(keys.history("charge", code)) == -1  # no TTL: bounded by length
    if kind == "dead":  # the letter's fields still start after the history's ARGV
        ((_, fields),) = rclient.xrange(keys.dead())
        assert {k.decode(): v.decode() for k, v in fields.items()} == LETTER


def test_a_settle_that_is_not_the_owners_pushes_nothing(
    stream_job: StreamJob, keys: Keys, rclient: redis.Redis
) -> None:
    assert stream_job.settle("done", consumer="zombie", ends=("charge", entry())) == [0, 0]
    assert stream_job.untouched()
    assert not rclient.exists(keys.history("charge", "d"), keys.history_tasks())


def test_a_settle_without_an_entry_keeps_no_history(
    stream_job: StreamJob, keys: Keys, rclient: redis.Redis
) -> None:
    assert stream_job.settle("done") == [1, 0]
    assert not rclient.exists(keys.history_tasks())


def test_a_list_past_1100_entries_is_trimmed_to_the_newest_1000(
    stream_job: StreamJob, keys: Keys, rclient: redis.Redis
) -> None:
    listed = keys.history("charge", "d")
    older = [entry(f"old{n}") for n in range(history.KEEP + history.SLACK)]
    rclient.lpush(listed, *older)  # newest last pushed: old1099 at the head
    newest = entry("newest")
    stream_job.settle("done", ends=("charge", newest))
    kept = ends(rclient, keys, "charge", "d")
    assert len(kept) == history.KEEP
    assert kept[0] == newest and kept[1] == older[-1] and kept[-1] == older[-history.KEEP + 1]
    # The task's list was not new: the index was left alone (a reader lists it anyway).
    assert not rclient.exists(keys.history_tasks())


def test_a_list_at_1100_entries_is_not_trimmed_yet(
    stream_job: StreamJob, keys: Keys, rclient: redis.Redis
) -> None:
    listed = keys.history("charge", "d")
    rclient.lpush(listed, *[entry(f"old{n}") for n in range(history.KEEP + history.SLACK - 1)])
    stream_job.settle("done", ends=("charge", entry()))
    assert rclient.llen(listed) == history.KEEP + history.SLACK


@pytest.mark.parametrize(("kind", "code"), [("done", "d"), ("retry", "r"), ("dead", "x")])
def test_settle_sorted_pushes_the_entry_too(
    sorted_job: SortedJob, keys: Keys, rclient: redis.Redis, kind: str, code: str
) -> None:
    owner = sorted_job.take("w1")
    end = entry(error="boom" if kind != "done" else "")
    letter = LETTER if kind == "dead" else None
    next_job = b"next" if kind == "retry" else b""
    reply = sorted_job.settle(owner, kind, ends=("mail", end), letter=letter, next_job=next_job)
    assert reply == [1, 0]
    assert ends(rclient, keys, "mail", code) == [end]
    assert index(rclient, keys) == [b"mail"]
    if kind == "dead":
        ((_, fields),) = rclient.xrange(keys.dead())
        assert {k.decode(): v.decode() for k, v in fields.items()} == LETTER


def test_settle_many_compact_endings_build_the_history_keys_as_keys_does(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    """The compact form of a batch of done endings: each pushes on its own task's list
    ('<prefix>:ends:d:<task>'), one with no entry pushes nothing."""
    stream = keys.stream("q", "low")
    rclient.xgroup_create(stream, GROUP, id="0", mkstream=True)
    ids = [rclient.xadd(stream, {"job": "x"}).decode() for _ in range(3)]
    rclient.xreadgroup(GROUP, "c1", {stream: ">"}, count=3)
    shared = [GROUP, "c1", keys.prefix, keys.done_bucket_prefix, 60_000]
    plan: list[tuple[str, bytes]] = [("a:b", entry("j0")), ("c", entry("j1")), ("", b"")]
    values: list[Any] = []
    for n, (entry_id, (task, end)) in enumerate(zip(ids, plan, strict=True)):
        values += [entry_id, f"j{n}", b"", "", "", "", "keep", 0, end, task]
    call = ScriptCall(
        "settle_many", [stream, keys.delayed("q", "low"), keys.dead(), keys.wake()],
        ["stream_done", *shared, *values],
    )  # fmt: skip
    (replies,) = scripts.run_all([call])
    assert [list(map(int, r)) for r in replies] == [[1, 0]] * 3
    assert ends(rclient, keys, "a:b", "d") == [plan[0][1]]
    assert ends(rclient, keys, "c", "d") == [plan[1][1]]
    assert sorted(index(rclient, keys)) == [b"a:b", b"c"]
    assert status_shard("j0")  # the compact form's other values are as before


def test_an_entry_is_small() -> None:
    """A done entry of a 32-character id stays under 50 bytes; a failure's error is cut
    to 200 characters."""
    assert len(entry("0" * 32)) < 50
    failed = history.read_end(entry(error="e" * 500), "t", "dead")
    assert failed is not None and len(failed.error) == history.ERROR_CHARS
