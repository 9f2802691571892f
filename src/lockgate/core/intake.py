"""How many jobs a worker lets run at once, so its event loop answers within a budget.

Every running job adds callbacks to each turn of the event loop. Past some number of jobs
(which depends on the jobs: 1 ms sleeps, no-ops, I/O), the loop is saturated: each turn
grows to several milliseconds, and a critical job, which takes a few turns from its read
to its first line, waits behind all of them; more concurrency then adds no throughput,
only latency. The worker therefore measures the loop's lag (how long a callback scheduled
now waits to run) and lowers the number of jobs it lets run while the lag is over the
budget, raising it again, one by one, while the lag is well under it (additive increase,
multiplicative decrease, as TCP does with its window). It never goes below a floor, so a
worker whose jobs block the loop (CPU-heavy async code) still makes progress.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

# A callback scheduled now should run within this many seconds.
LAG_BUDGET = 0.0005
# How often the lag is sampled (seconds).
SAMPLE_EVERY = 0.002
# Concurrency that is never limited: a small worker's loop cannot saturate by itself.
FLOOR = 8


class IntakeLimit:
    """Additive-increase, multiplicative-decrease limit on running jobs. Pure.

    Args:
        concurrency: the worker's configured concurrency (the ceiling).
        budget: the loop lag, in seconds, above which the limit shrinks.
    """

    def __init__(self, concurrency: int, budget: float = LAG_BUDGET) -> None:
        self.ceiling = concurrency
        self.floor = min(concurrency, FLOOR)
        self.budget = budget
        self.limit = concurrency

    def observe(self, lag: float) -> bool:
        """Learn one lag sample (seconds).

        Returns:
            Whether the limit grew: a read that found no free slot may go on now.
        """
        if lag > self.budget:
            self.limit = max(self.floor, self.limit - max(1, self.limit // 8))
        elif lag < self.budget / 2 and self.limit < self.ceiling:
            self.limit += 1
            return True
        return False

    def free(self, running: int) -> int:
        """Slots a read may fill now, with ``running`` jobs running."""
        return max(0, self.limit - running)


async def sample_lag(
    observe: Callable[[float], object],
    stop: asyncio.Event,
    every: float = SAMPLE_EVERY,
    grew: Callable[[], object] = lambda: None,
) -> None:
    """Measure the loop's lag until ``stop`` is set: every ``every`` seconds, how long a
    callback scheduled with ``call_soon`` waits before it runs (the rest of the turn, the
    poll, and the callbacks ahead of it), given to ``observe``; ``grew`` is called when
    ``observe`` returns true (the limit grew: wake the reads that wait for a free slot,
    which no ending of a long run may come to do).

    The clock is ``perf_counter``: uvloop's ``loop.time()`` counts whole milliseconds,
    read once per turn.
    """
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        await asyncio.sleep(every)
        measured: asyncio.Future[float] = loop.create_future()
        loop.call_soon(_resolve, measured, time.perf_counter())
        if observe(await measured):
            grew()


def _resolve(measured: asyncio.Future[float], scheduled: float) -> None:
    if not measured.done():
        measured.set_result(time.perf_counter() - scheduled)
