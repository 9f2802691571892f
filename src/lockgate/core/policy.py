"""Priority decisions: which levels the next read takes from. Pure, no I/O.

A policy plans a read of ``free`` messages as a quota per level (index 0 is the highest
level). The read script takes each quota in precedence order, then fills what is left,
still in precedence order, so a free slot is never left idle while any level has work.
The policy then learns what the read really took and which levels ran dry.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Protocol

from lockgate.core.config import PolicyName
from lockgate.errors import ConfigError


class ReadPolicy(Protocol):
    """Decides how many messages each level should get in the next read."""

    def plan(self, free: int) -> list[int]:
        """Quota per level for a read of ``free`` messages (sum <= free)."""

    def record(self, taken: Sequence[int], exhausted: Sequence[bool]) -> None:
        """Learn what a read took per level and which levels had no more work."""


class StrictPolicy:
    """Always the highest non-empty level first (the lesson's first pattern).

    Every quota is zero: the read script's fill pass, which walks the levels in
    precedence order, does the whole job. Low levels starve while high ones are busy,
    by design.
    """

    def __init__(self, levels: int) -> None:
        self._levels = levels

    def plan(self, free: int) -> list[int]:
        return [0] * self._levels

    def record(self, taken: Sequence[int], exhausted: Sequence[bool]) -> None:
        return None


class WeightedPolicy:
    """Weighted fair sharing by virtual time (start-time fair queueing).

    Each level has a virtual clock that advances by ``1 / weight`` for every message it
    is served; the next slot goes to the level whose clock would be lowest after serving
    it, ties to the higher level. While every level has work the served shares converge
    to the weights (10:5:1 gives 10, 5 and 1 of every 16), at any read size, 1 included.

    A level that ran dry may not bank credit while idle and then monopolise the worker
    when work returns: its clock is lifted to the virtual start time of the latest job
    served, the usual WFQ rule for a flow that becomes active again.
    """

    def __init__(self, weights: Sequence[int]) -> None:
        if not weights or any(w < 1 for w in weights):
            raise ConfigError(f"weights must be >= 1, got {list(weights)!r}")
        self._step = [1.0 / w for w in weights]
        self._clock = [0.0] * len(weights)

    def plan(self, free: int) -> list[int]:
        quotas = [0] * len(self._step)
        # Each level's clock after serving it once more, ties to the higher level: a heap
        # of (that clock, level), one pop and push per slot.
        step = self._step
        heap = [(clock + step[i], i) for i, clock in enumerate(self._clock)]
        heapq.heapify(heap)
        for _ in range(free):
            after, best = heap[0]
            quotas[best] += 1
            heapq.heapreplace(heap, (after + step[best], best))
        return quotas

    def record(self, taken: Sequence[int], exhausted: Sequence[bool]) -> None:
        for i, count in enumerate(taken):
            self._clock[i] += count * self._step[i]
        # The virtual start time of the latest job served: the system's virtual time.
        served = [self._clock[i] - self._step[i] for i, count in enumerate(taken) if count]
        if served:
            floor = max(served)
            for i, dry in enumerate(exhausted):
                if dry and self._clock[i] < floor:
                    self._clock[i] = floor
        base = min(self._clock)
        if base > 1e6:  # keep the clocks small; only their differences matter
            self._clock = [c - base for c in self._clock]


def make_policy(name: PolicyName, weights: Sequence[int]) -> ReadPolicy:
    """Build the named policy for levels with these weights (highest level first)."""
    if name == "strict":
        return StrictPolicy(len(weights))
    if name == "weighted":
        return WeightedPolicy(weights)
    raise ConfigError(f"unknown policy {name!r}; choose 'weighted' or 'strict'")


def aging_boost_us(level_index: int, levels: int, aging_seconds: float) -> int:
    """Sorted backend: head start of a level, in microseconds of waiting.

    A job ranks by its enqueue stamp minus this boost, lowest first. A level is worth
    ``aging_seconds`` of waiting per step of precedence, so a low job that has waited
    that much longer than a critical one runs first: aging, and nothing starves.
    """
    return round((levels - 1 - level_index) * aging_seconds * 1_000_000)


def reconnect_delay(failures: int, *, base: float = 0.1, cap: float = 5.0) -> float:
    """Seconds to wait before the next try after ``failures`` consecutive failures."""
    return float(min(cap, base * 2.0 ** min(failures, 16)))


def spread_read(
    waiting: Sequence[Sequence[int]],
    stream_levels: Sequence[int],
    quotas: Sequence[int],
    free: int,
    start: int = 0,
) -> list[list[int]]:
    """A read of ``free`` jobs planned over the partitions of a namespace (pure).

    The read script's two passes, taken across partitions from counts of the jobs waiting
    in each: first each level's quota, then what is left in precedence order, so the plan
    takes no more than ``free``, nor a lower job while a higher one waits anywhere. Within
    a level it takes what it can from one partition before the next, partitions in turn
    from ``start`` (a rotation, so none is always first), so a read calls few partitions;
    within a partition, the level's streams (queues) give one job each in turn.

    Args:
        waiting: per partition, the jobs waiting in each stream.
        stream_levels: each stream's level index (the same streams in every partition).
        quotas: the policy's quota per level.
        free: free slots.
        start: the partition served first.

    Returns:
        Per partition, how many jobs to read from each stream.
    """
    parts = len(waiting)
    left = [list(counts) for counts in waiting]
    plan = [[0] * len(stream_levels) for _ in range(parts)]
    order = [(start + i) % parts for i in range(parts)]

    def take(level: int, want: int) -> int:
        streams = [k for k, at in enumerate(stream_levels) if at == level]
        given = 0
        for p in order:
            while given < want and any(left[p][k] > 0 for k in streams):
                for k in streams:
                    if given < want and left[p][k] > 0:
                        left[p][k] -= 1
                        plan[p][k] += 1
                        given += 1
        return given

    remaining = free
    for level, quota in enumerate(quotas):
        remaining -= take(level, min(quota, remaining))
    for level in range(len(quotas)):
        if remaining <= 0:
            break
        remaining -= take(level, remaining)
    return plan
