"""Partitions, pure: the partition tags' slots, where a job id goes, the key layout of a
partitioned namespace (every key one script touches in one slot), the read planner across
partitions (``policy.spread_read``) and the merge of per-partition stats. No server: slots
are computed as Redis does (redis.crc.key_slot)."""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from lockgate.backend.broker import LevelStats
from lockgate.backend.keys import Keys, done_marker_place
from lockgate.backend.partitions import Layout, partition_of, partition_tags
from lockgate.backend.stream_broker import merge_stats
from lockgate.core.app_config import MAX_PARTITIONS, check_partitions
from lockgate.core.policy import WeightedPolicy, spread_read
from lockgate.errors import ConfigError

NS = "shop"
SLOTS = REDIS_CLUSTER_HASH_SLOTS
# Job ids, claim keys and names as users write them: braces, colons, non-ASCII, empty.
SAMPLES = ["job-1", "a", "order:42", "pay:{A1}", "ünïcode", "x}y{z", ""]


def slot(key: str) -> int:
    return int(key_slot(key.encode("utf-8", "surrogatepass")))


def job_ids(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.getrandbits(128):032x}" for _ in range(count)]


# partition_tags


@pytest.mark.parametrize("partitions", [2, 3, 4, 9, 16, 1024])
def test_each_partition_tag_lies_in_its_own_equal_slot_range(partitions: int) -> None:
    tags = partition_tags(NS, partitions)
    assert len(tags) == partitions
    assert len(set(tags)) == partitions
    for index, tag in enumerate(tags):
        # The p-th of P equal ranges: p * 16384 / P <= slot < (p + 1) * 16384 / P.
        assert index * SLOTS <= slot(tag) * partitions < (index + 1) * SLOTS, (index, tag)
        assert tag.startswith(f"{NS}/p{index}"), tag
    # Deterministic: the same tags again (computed afresh, not the cached tuple).
    assert partition_tags.__wrapped__(NS, partitions) == tags


def test_partition_tags_are_pinned() -> None:
    """Tags name where existing jobs live: a change strands them (a migration)."""
    assert partition_tags(NS, 4) == ("shop/p0.1", "shop/p1.3", "shop/p2.1", "shop/p3.3")
    assert partition_tags(NS, 9) == (
        "shop/p0.1", "shop/p1.2", "shop/p2.3", "shop/p3.1", "shop/p4.5", "shop/p5.9",
        "shop/p6.23", "shop/p7.2", "shop/p8.4",
    )  # fmt: skip


def test_one_partition_is_the_namespace_tag() -> None:
    assert partition_tags(NS, 1) == (NS,)
    assert partition_tags("other", 1) == ("other",)


def test_two_namespaces_never_share_a_partition_tag() -> None:
    names = ["shop", "shop2", "shop.p0", "shop-1", "sho"]
    owners: dict[str, str] = {}
    for name in names:
        for partitions in (1, 2, 4, 9):
            for tag in partition_tags(name, partitions):
                assert owners.setdefault(tag, name) == name, tag


# partition_of


def test_partition_of_is_pinned() -> None:
    """CRC32 of the id, the same in every process and version: a change of hash would
    send a job's duplicate, status and cancel to another partition than the job."""
    expected = {
        "job-1": [1, 2, 3, 5, 15, 575],
        "a": [1, 0, 3, 0, 3, 579],
        "order:42": [1, 2, 3, 8, 11, 811],
        "ünïcode": [0, 1, 2, 1, 10, 170],
        "0123456789abcdef0123456789abcdef": [0, 1, 2, 4, 14, 270],
    }
    for job_id, places in expected.items():
        assert [partition_of(job_id, p) for p in (2, 3, 4, 9, 16, 1024)] == places, job_id


def test_partition_of_one_partition_is_zero_and_always_in_range() -> None:
    # A lone surrogate too: ids are hashed with surrogatepass.
    for job_id in [*SAMPLES, "half\udc80", *job_ids(200)]:
        assert partition_of(job_id, 1) == 0
        for partitions in (2, 3, 9, MAX_PARTITIONS):
            assert 0 <= partition_of(job_id, partitions) < partitions


def test_partition_of_is_roughly_uniform() -> None:
    counts = Counter(partition_of(job_id, 9) for job_id in job_ids(10_000))
    assert sorted(counts) == list(range(9))
    share = 10_000 / 9
    for part, count in counts.items():
        assert 0.85 * share <= count <= 1.15 * share, (part, count)


# check_partitions


@pytest.mark.parametrize("value", [0, -1, MAX_PARTITIONS + 1, True, False, 2.0, "4", None])
def test_check_partitions_rejects(value: Any) -> None:
    with pytest.raises(ConfigError, match="partitions"):
        check_partitions(value)


@pytest.mark.parametrize("value", [1, 2, 9, MAX_PARTITIONS])
def test_check_partitions_accepts_whole_numbers_in_range(value: int) -> None:
    assert check_partitions(value) == value


# Layout with one partition: today's keys exactly


def test_one_partition_layout_is_the_old_layout() -> None:
    old = Keys(NS)
    layout = Layout(NS, 1)
    assert not layout.partitioned
    assert layout.parts == (old,)
    assert layout.base == old
    for key in SAMPLES:
        assert layout.claim_place(key) == (old.claim(key), old.done_bucket_prefix)
        assert layout.claim_place(key, job_id=key) == (old.claim(key), old.done_bucket_prefix)
        counter, requests = layout.counter_keys(key)
        assert counter == old.counter(key)
        assert requests + "req-1" == old.request(key, "req-1")
        assert layout.cooldown(key) == old.cooldown(key)
        assert layout.for_job(key) == old
        assert layout.for_job(key).job(key) == f"lockgate:{{{NS}}}:job:{key}"
    assert layout.patterns == [f"lockgate:{{{NS}}}:*"]
    assert Layout(NS) == layout  # the default is one partition


# Layout with partitions: one slot per script


def job_keys(layout: Layout, job_id: str) -> list[str]:
    """Every key a script about one job touches: its enqueue, read, settle, status,
    cancel, dead-lettering, cron tick and the claim of an idempotent task's job."""
    keys = layout.for_job(job_id)
    names = [
        keys.job(job_id), keys.status(job_id), keys.result(job_id), keys.cancel_flag(job_id),
        keys.dead(), keys.wake(), keys.paused(), keys.tick("report", "2024-01-31T03:00"),
        *keys.place_keys("1700000000000-3 emails:low"), *keys.job_record_keys(job_id),
    ]  # fmt: skip
    for level in ("critical", "low"):
        names += [keys.stream("emails", level), keys.delayed("emails", level)]
    for claim_name in (Keys.job_claim_name("report", job_id), Keys.legacy_job_claim_name(job_id)):
        claim, prefix = layout.claim_place(claim_name, job_id)
        names += [claim, done_marker_place(prefix, claim)[0]]
    return names


def test_every_key_about_a_job_lies_in_its_partitions_slot() -> None:
    layout = Layout(NS, 4)
    tags = partition_tags(NS, 4)
    used = set()
    for job_id in [*SAMPLES, *job_ids(300)]:
        part = partition_of(job_id, 4)
        used.add(part)
        assert layout.for_job(job_id) == layout.parts[part] == Keys(NS, tags[part])
        assert layout.index_of(layout.for_job(job_id)) == part
        names = job_keys(layout, job_id)
        assert {slot(name) for name in names} == {slot(tags[part])}, job_id
    assert used == {0, 1, 2, 3}


def test_a_job_claims_done_bucket_is_one_of_its_partitions_4096() -> None:
    layout = Layout(NS, 4)
    buckets = set()
    for job_id in job_ids(2000):
        claim, prefix = layout.claim_place(Keys.job_claim_name("t", job_id), job_id)
        assert prefix == layout.for_job(job_id).done_bucket_prefix
        assert prefix.endswith(":")
        bucket, member = done_marker_place(prefix, claim)
        assert re.fullmatch(re.escape(prefix) + "[0-9a-f]{3}", bucket)
        assert re.fullmatch("[0-9a-f]{24}", member)
        buckets.add(bucket)
    assert len(buckets) > 1000


def test_a_user_claim_and_its_done_bucket_share_a_tag_of_their_own() -> None:
    layout = Layout(NS, 4)
    tags = set()
    partition_slots = {slot(tag) for tag in partition_tags(NS, 4)}
    for key in [*SAMPLES, *(f"order:{n}" for n in range(20_000))]:
        claim, prefix = layout.claim_place(key)
        assert claim.endswith(f":idem:{key}")
        match = re.match(r"lockgate:\{(shop/c\.[0-9a-f]{3})\}:", claim)
        assert match, claim
        tags.add(match.group(1))
        # The prefix is the bucket itself (no ':' at its end): one bucket per tag.
        assert not prefix.endswith(":")
        bucket, member = done_marker_place(prefix, claim)
        assert bucket == prefix == f"lockgate:{{{match.group(1)}}}:done"
        assert re.fullmatch("[0-9a-f]{24}", member)
        assert slot(claim) == slot(bucket), key
    assert len(tags) <= 4096
    assert len(tags) > 4000  # 20,000 keys reach almost every one of the 4,096 tags
    # Not the partitions' slots: user claims spread over the whole cluster.
    assert len({slot(f"{{{tag}}}") for tag in tags} - partition_slots) > 3000


def test_a_counter_and_its_request_guards_share_a_slot() -> None:
    layout = Layout(NS, 4)
    slots = set()
    for name in [*SAMPLES, *(f"views:{n}" for n in range(100))]:
        counter, requests = layout.counter_keys(name)
        assert counter.endswith(f":counter:{name}")
        for request_id in ("r1", "req-{7}", "ü"):
            assert slot(requests + request_id) == slot(counter), (name, request_id)
        slots.add(slot(counter))
    assert len(slots) > 50  # counters spread over the cluster


def test_cooldowns_spread_by_their_own_key() -> None:
    layout = Layout(NS, 4)
    cooldowns = [layout.cooldown(f"user:{n}") for n in range(100)]
    assert all(re.match(r"lockgate:\{shop/k\.user:\d+\}:cooldown:user:\d+$", c) for c in cooldowns)
    assert len({slot(c) for c in cooldowns}) > 50


def test_namespace_wide_keys_keep_the_namespace_tag() -> None:
    layout = Layout(NS, 4)
    base = layout.base
    assert base == Keys(NS)
    for name in (
        base.partitions(), base.wakeup("emails"), base.workers(), base.worker("w1"),
        base.activity(28_424_160), base.rate_limit("report"),
    ):  # fmt: skip
        assert slot(name) == slot(f"{{{NS}}}"), name


# patterns


def redis_glob(pattern: str, key: str) -> bool:
    """Redis's MATCH for patterns whose only special character is '*' (asserted)."""
    assert not set(pattern) & set("?[]\\"), pattern
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    return re.fullmatch(regex, key, re.DOTALL) is not None


def all_keys(layout: Layout) -> Iterator[str]:
    for keys in (layout.base, *layout.parts):
        yield from (keys.stream("q", "low"), keys.dead(), keys.partitions(), keys.wakeup("q"))
        yield from (keys.done_bucket_prefix + "abc", keys.job("j"), keys.workers())
    for key in SAMPLES[:4]:
        claim, prefix = layout.claim_place(key)
        yield from (claim, done_marker_place(prefix, claim)[0])
        yield from layout.counter_keys(key)
        yield layout.cooldown(key)
    for job_id in job_ids(20):
        yield from job_keys(layout, job_id)


@pytest.mark.parametrize("partitions", [1, 4])
def test_patterns_match_every_key_of_the_namespace_and_no_other(partitions: int) -> None:
    layout = Layout(NS, partitions)
    for key in all_keys(layout):
        assert any(redis_glob(p, key) for p in layout.patterns), key
    # Namespaces whose names extend or share a prefix with this one, partitioned or not.
    for other in ("shop2", "shop.p0", "shop-1", "shop_", "sho", "xshop"):
        for other_partitions in (1, 4):
            for key in all_keys(Layout(other, other_partitions)):
                assert not any(redis_glob(p, key) for p in layout.patterns), (other, key)


# spread_read


def level_totals(plan: list[list[int]], stream_levels: list[int], levels: int) -> list[int]:
    totals = [0] * levels
    for counts in plan:
        for k, count in enumerate(counts):
            totals[stream_levels[k]] += count
    return totals


def read_script_totals(waiting: list[int], quotas: list[int], free: int) -> list[int]:
    """What read_stream.lua takes per level from one stream per level: each quota in
    precedence order, then what is left, still in precedence order."""
    left, got, remaining = list(waiting), [0] * len(waiting), free
    for pass_quotas in (quotas, [free] * len(quotas)):
        for level, quota in enumerate(pass_quotas):
            n = min(quota, left[level], remaining)
            got[level] += n
            left[level] -= n
            remaining -= n
    return got


Case = tuple[list[list[int]], list[int], list[int], int, int]


def random_cases(count: int, seed: int, *, strict: bool = False) -> Iterator[Case]:
    rng = random.Random(seed)
    for _ in range(count):
        parts, levels = rng.randint(1, 5), rng.randint(1, 4)
        # One or more streams (queues) per level, highest level first.
        stream_levels = [level for level in range(levels) for _ in range(rng.randint(1, 3))]
        waiting = [[rng.choice((0, 0, 1, 2, 3, 9)) for _ in stream_levels] for _ in range(parts)]
        free = rng.randint(0, 40)
        if strict:
            quotas = [0] * levels
        elif rng.random() < 0.5:
            quotas = WeightedPolicy([rng.randint(1, 10) for _ in range(levels)]).plan(free)
        else:
            quotas = [rng.randint(0, 8) for _ in range(levels)]
        yield waiting, stream_levels, quotas, free, rng.randrange(parts)


@pytest.mark.parametrize("strict", [False, True])
def test_spread_read_properties(strict: bool) -> None:
    for waiting, stream_levels, quotas, free, start in random_cases(500, 14, strict=strict):
        case = (waiting, stream_levels, quotas, free, start)
        plan = spread_read(waiting, stream_levels, quotas, free, start)
        levels = len(quotas)
        assert len(plan) == len(waiting) and all(len(c) == len(stream_levels) for c in plan)
        for counts, planned in zip(waiting, plan, strict=True):
            for count, take in zip(counts, planned, strict=True):
                assert 0 <= take <= count, case
        total_waiting = sum(map(sum, waiting))
        # Never more than the free slots, and no idle slot while work waits.
        assert sum(map(sum, plan)) == min(free, total_waiting), case
        got = level_totals(plan, stream_levels, levels)
        have = level_totals(waiting, stream_levels, levels)
        for high in range(levels):
            if got[high] < have[high]:  # a higher job left unplanned...
                for low in range(high + 1, levels):
                    # ...so a lower level got its quota at most (the fill pass is strict).
                    assert got[low] <= quotas[low], ("precedence", case, plan)
                    if strict:
                        assert got[low] == 0, ("strict precedence", case, plan)
        # Per level, the same as the read script would take from all of it in one place.
        assert got == read_script_totals(have, quotas, free), case


def test_spread_read_gives_each_level_its_quota_when_all_have_work() -> None:
    """The weighted shares: with every level busy, each level gets exactly its quota."""
    rng = random.Random(5)
    for _ in range(300):
        parts, levels = rng.randint(1, 6), rng.randint(1, 4)
        free = rng.randint(1, 30)
        quotas = WeightedPolicy([rng.randint(1, 10) for _ in range(levels)]).plan(free)
        stream_levels = list(range(levels))
        waiting = [[free] * levels for _ in range(parts)]
        plan = spread_read(waiting, stream_levels, quotas, free, rng.randrange(parts))
        assert level_totals(plan, stream_levels, levels) == quotas, (quotas, plan)


def test_spread_read_calls_few_partitions() -> None:
    """Within a level a partition gives all it can before the next in turn serves, and
    within a partition the level's streams (queues) take turns."""
    for waiting, stream_levels, quotas, free, start in random_cases(500, 21, strict=True):
        plan = spread_read(waiting, stream_levels, quotas, free, start)
        order = [(start + i) % len(waiting) for i in range(len(waiting))]
        for level in set(stream_levels):
            streams = [k for k, at in enumerate(stream_levels) if at == level]
            served = [p for p in order if any(plan[p][k] for k in streams)]
            for earlier in served[:-1]:
                # A later partition served: every one before it gave all it had.
                assert all(plan[earlier][k] == waiting[earlier][k] for k in streams)
            for p in served:
                undrained = [plan[p][k] for k in streams if plan[p][k] < waiting[p][k]]
                drained = [plan[p][k] for k in streams if plan[p][k] == waiting[p][k]]
                if undrained:
                    assert max(undrained) - min(undrained) <= 1, (waiting, plan)
                    assert all(d <= max(undrained) + 1 for d in drained), (waiting, plan)


def test_spread_read_rotation_picks_the_first_partition() -> None:
    waiting = [[3, 3], [3, 3], [3, 3], [3, 3]]
    for start in range(4):
        for quotas in ([0, 0], [1, 0], [1, 1]):
            plan = spread_read(waiting, [0, 1], quotas, 1, start)
            expected = [[0, 0] for _ in waiting]
            expected[start][0] = 1
            assert plan == expected, (start, quotas)
    # Two slots from partition 3, which has them; four: then partition 0 (wrapping).
    assert spread_read(waiting, [0, 1], [0, 0], 2, 3) == [[0, 0], [0, 0], [0, 0], [2, 0]]
    assert spread_read(waiting, [0, 1], [0, 0], 4, 3) == [[1, 0], [0, 0], [0, 0], [3, 0]]
    # A partition with nothing of the level is skipped; the next in turn serves.
    sparse = [[0, 3], [0, 3], [2, 3], [0, 3]]
    assert spread_read(sparse, [0, 1], [0, 0], 1, 0) == [[0, 0], [0, 0], [1, 0], [0, 0]]
    # Level 0 has two jobs in all: the third slot goes to level 1, from partition 3 on.
    assert spread_read(sparse, [0, 1], [0, 0], 3, 3) == [[0, 0], [0, 0], [2, 0], [0, 1]]


def test_spread_read_with_nothing_to_do() -> None:
    assert spread_read([[0, 0], [0, 0]], [0, 1], [1, 1], 5) == [[0, 0], [0, 0]]
    assert spread_read([[4, 4], [4, 4]], [0, 1], [1, 1], 0) == [[0, 0], [0, 0]]


# merge_stats


def stats(
    length: int, waiting: int, pending: int, delayed: int, consumers: int | None,
    age: int | None,
) -> LevelStats:  # fmt: skip
    return LevelStats("emails", "low", length, waiting, pending, delayed, consumers, age)


def test_merge_stats_sums_counts_and_keeps_the_oldest_wait() -> None:
    rows = [stats(5, 3, 2, 1, 2, 40), stats(7, 7, 0, 0, 3, None), stats(1, 0, 1, 4, 1, 900)]
    merged = merge_stats(rows)
    assert merged == LevelStats("emails", "low", 13, 10, 3, 5, 3, 900)


def test_merge_stats_of_idle_partitions_and_of_one() -> None:
    idle = merge_stats([stats(0, 0, 0, 0, 0, None), stats(2, 0, 2, 0, 1, None)])
    assert idle.oldest_wait_ms is None
    assert (idle.length, idle.pending, idle.consumers) == (2, 2, 1)
    one = stats(5, 3, 2, 1, 2, 40)
    assert merge_stats([one]) == one
