"""The intake limit (pure) and the loop-lag sampler (a real event loop)."""

from __future__ import annotations

import asyncio
import time

from lockgate.core.intake import FLOOR, IntakeLimit, sample_lag


def test_the_limit_shrinks_while_the_lag_is_over_budget_but_not_below_the_floor() -> None:
    intake = IntakeLimit(100, budget=0.001)
    intake.observe(0.002)
    assert intake.limit == 88  # one eighth less
    for _ in range(100):
        intake.observe(0.010)
    assert intake.limit == FLOOR
    assert intake.free(running=FLOOR) == 0
    assert intake.free(running=3) == FLOOR - 3


def test_the_limit_grows_one_by_one_while_the_lag_is_well_under_budget() -> None:
    intake = IntakeLimit(100, budget=0.001)
    for _ in range(10):
        intake.observe(0.010)
    shrunk = intake.limit
    intake.observe(0.0007)  # under budget, but not well under: held
    assert intake.limit == shrunk
    intake.observe(0.0001)
    assert intake.limit == shrunk + 1
    for _ in range(200):
        intake.observe(0.0)
    assert intake.limit == 100  # never above the configured concurrency


def test_a_small_worker_is_never_limited() -> None:
    intake = IntakeLimit(4, budget=0.001)
    for _ in range(10):
        intake.observe(1.0)
    assert intake.limit == 4
    assert intake.free(running=1) == 3


async def test_the_sampler_sees_a_blocked_loop_and_stops_when_told() -> None:
    lags: list[float] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_lag(lags.append, stop, every=0.001))
    for _ in range(10):
        time.sleep(0.02)  # a callback that blocks the loop, as CPU-heavy async code does
        await asyncio.sleep(0)
    await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(sampler, timeout=5)
    assert lags
    assert max(lags) >= 0.015
