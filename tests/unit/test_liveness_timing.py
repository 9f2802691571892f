"""The liveness timing (pure): how often a worker beats, and what silence is an outage."""

from __future__ import annotations

import pytest

from lockgate.broker import Liveness


@pytest.mark.parametrize(
    ("lease", "beat", "gap"),
    [
        (30.0, 1.0, 15.0),  # the default: a beat a second, an outage past 15 s
        (3.0, 0.75, 3.0),  # four beats' silence at least
        (1.0, 0.25, 1.0),
        (0.1, 0.05, 0.25),  # a test's tiny lease: beats not faster than 50 ms
    ],
)
def test_beat_and_gap_follow_the_lease(lease: float, beat: float, gap: float) -> None:
    timing = Liveness.of(lease)
    assert (timing.lease, timing.beat, timing.gap) == (lease, beat, gap)
    assert timing.args == [round(lease * 1000), round(gap * 1000)]


def test_a_worker_beats_at_least_four_times_within_its_gap() -> None:
    for lease in (0.1, 0.5, 2.0, 30.0, 600.0):
        timing = Liveness.of(lease)
        assert timing.gap >= 4 * timing.beat
        assert timing.beat <= max(lease / 4, 0.05)
