"""The liveness timing (pure): how often a worker beats, and what silence is an outage."""

from __future__ import annotations

import pytest

from lockgate.backend.broker import Liveness


@pytest.mark.parametrize(
    ("lease", "beat", "gap"),
    [
        (30.0, 1.0, 15.0),  # the default: a beat a second, an outage past 15 s
        (3.0, 0.375, 1.5),
        (1.0, 0.125, 0.5),
        (0.1, 0.05, 0.15),  # a test's tiny lease: beats not faster than 50 ms
    ],
)
def test_beat_and_gap_follow_the_lease(lease: float, beat: float, gap: float) -> None:
    timing = Liveness.of(lease)
    assert (timing.lease, timing.beat) == (lease, beat)
    assert timing.gap == pytest.approx(gap)
    assert timing.args == [round(lease * 1000), round(gap * 1000)]


def test_an_outage_that_can_lapse_a_live_worker_is_always_seen_as_a_gap() -> None:
    """A worker may have beaten a beat before the latest one and retries every 0.1 s:
    a silence that lapses it (a lease less those) must be longer than the gap."""
    for lease in (0.4, 0.5, 1.0, 2.0, 3.0, 5.0, 30.0, 600.0):
        timing = Liveness.of(lease)
        assert timing.gap <= lease - timing.beat - 0.1, lease
        assert timing.gap >= 3 * timing.beat
