"""Priority policies: pure decisions, tested against a model of the read script."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from lockgate.core.policy import StrictPolicy, WeightedPolicy, aging_boost_us, make_policy
from lockgate.errors import ConfigError

WEIGHTS = [10, 5, 1]
PLENTY = 10**9


def model_read(
    quotas: Sequence[int], free: int, available: list[int]
) -> tuple[list[int], list[bool]]:
    """What read_stream.lua takes from one stream per level, and which levels it saw run dry.

    Pass 1 takes each quota in precedence order, pass 2 fills the rest in precedence order
    from the levels not yet seen dry; a level is dry when a read returned fewer than asked.
    ``available`` is decremented in place.
    """
    taken = [0] * len(quotas)
    dry = [False] * len(quotas)
    remaining = free

    def read(level: int, count: int) -> None:
        nonlocal remaining
        got = min(count, available[level])
        available[level] -= got
        taken[level] += got
        remaining -= got
        dry[level] = dry[level] or got < count

    for level, quota in enumerate(quotas):
        if min(quota, remaining) > 0:
            read(level, min(quota, remaining))
    for level in range(len(quotas)):
        if remaining <= 0:
            break
        if not dry[level]:
            read(level, remaining)
    return taken, dry


def serve(
    policy: WeightedPolicy | StrictPolicy, available: list[int], slots: int, size: int
) -> list[int]:
    """Run ``slots`` slots of reads of ``size`` (the last may be smaller); per-level totals."""
    served = [0] * len(available)
    done = 0
    while done < slots:
        free = min(size, slots - done)
        quotas = policy.plan(free)
        assert sum(quotas) <= free
        taken, dry = model_read(quotas, free, available)
        policy.record(taken, dry)
        served = [a + b for a, b in zip(served, taken, strict=True)]
        done += free
    return served


@pytest.mark.parametrize("size", [1, 8])
@pytest.mark.parametrize("k", [1, 2, 3, 10, 100])
def test_weighted_shares_are_exact_when_every_level_has_work(size: int, k: int) -> None:
    policy = WeightedPolicy(WEIGHTS)
    assert serve(policy, [PLENTY] * 3, 16 * k, size) == [10 * k, 5 * k, 1 * k]


@pytest.mark.parametrize("size", [1, 8])
def test_weighted_plan_alone_follows_the_weights(size: int) -> None:
    policy = WeightedPolicy(WEIGHTS)
    totals = [0, 0, 0]
    for _ in range(16 * 20 // size):
        quotas = policy.plan(size)
        assert sum(quotas) == size
        policy.record(quotas, [False, False, False])
        totals = [a + b for a, b in zip(totals, quotas, strict=True)]
    assert totals == [200, 100, 20]


def test_weighted_plan_does_not_change_state() -> None:
    policy = WeightedPolicy(WEIGHTS)
    assert policy.plan(8) == policy.plan(8)
    assert policy.plan(1) == [1, 0, 0]  # ties go to the higher level


@pytest.mark.parametrize("size", [1, 8])
def test_weighted_serves_two_busy_levels_by_their_weights(size: int) -> None:
    """With critical dry, normal and low share 5:1; the error stays bounded over time."""
    for slots in (600, 60_000):
        served = serve(WeightedPolicy(WEIGHTS), [0, PLENTY, PLENTY], slots, size)
        assert served[0] == 0
        assert abs(served[1] - slots * 5 / 6) <= 4, (slots, served)


@pytest.mark.parametrize("size", [1, 8])
@pytest.mark.parametrize("level", [0, 1, 2])
def test_a_level_that_ran_dry_banks_no_credit(size: int, level: int) -> None:
    """Back after a long dry spell, a level gets its share, not a burst of saved-up credit.

    Fair sharing gives the returning level ``weight`` of every 16 slots from the moment it
    is back; one slot of slack allows for the phase of the cycle. The dry spells' lengths
    cover every phase of the 16-slot cycle.
    """
    weight = WEIGHTS[level]
    for dry_slots in range(1000, 1016):
        policy = WeightedPolicy(WEIGHTS)
        available = [PLENTY] * 3
        available[level] = 0
        assert serve(policy, available, dry_slots, size)[level] == 0
        first = serve(policy, [PLENTY] * 3, 16, size)
        second = serve(policy, [PLENTY] * 3, 16, size)
        context = f"dry for {dry_slots} slots, then served {first} and {second}"
        assert first[level] <= weight + 1, context
        assert 2 * weight - 1 <= first[level] + second[level] <= 2 * weight + 1, context


@pytest.mark.parametrize("size", [1, 8])
def test_credit_after_a_dry_spell_does_not_grow_with_its_length(size: int) -> None:
    """Whatever the dry spell's length, the level comes back to its share, not a backlog."""
    for dry_slots in (16, 1600, 160_000):
        policy = WeightedPolicy(WEIGHTS)
        serve(policy, [0, PLENTY, PLENTY], dry_slots, size)
        back = serve(policy, [PLENTY] * 3, 160, size)
        # 10 of 16 over 160 slots is 100; banked credit would take nearly all 160.
        assert 90 <= back[0] <= 111, (dry_slots, back)
        assert back[2] >= 8, (dry_slots, back)


def test_weighted_rejects_bad_weights() -> None:
    with pytest.raises(ConfigError):
        WeightedPolicy([])
    with pytest.raises(ConfigError):
        WeightedPolicy([3, 0])


def test_strict_leaves_every_slot_to_the_fill_pass() -> None:
    policy = StrictPolicy(3)
    assert policy.plan(8) == [0, 0, 0]
    assert serve(policy, [5, 6, PLENTY], 20, 8) == [5, 6, 9]
    assert serve(policy, [PLENTY, PLENTY, PLENTY], 64, 1) == [64, 0, 0]


def test_make_policy() -> None:
    assert isinstance(make_policy("strict", WEIGHTS), StrictPolicy)
    assert isinstance(make_policy("weighted", WEIGHTS), WeightedPolicy)
    with pytest.raises(ConfigError, match="unknown policy"):
        make_policy("fifo", WEIGHTS)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("index", "aging", "expected"),
    [
        (0, 60.0, 120_000_000),
        (1, 60.0, 60_000_000),
        (2, 60.0, 0),
        (0, 0.05, 100_000),
        (1, 0.05, 50_000),
    ],
)
def test_aging_boost_is_aging_per_step_of_precedence(
    index: int, aging: float, expected: int
) -> None:
    assert aging_boost_us(index, 3, aging) == expected


def test_aging_boost_of_a_single_level_is_zero() -> None:
    assert aging_boost_us(0, 1, 60.0) == 0
    assert isinstance(aging_boost_us(0, 3, 0.0000015), int)
