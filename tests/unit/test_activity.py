"""Activity counts (lockgate.worker.activity): wait buckets, percentiles from buckets, what the
recorder counts, and the rolling window read back. Pure: no Redis, times injected."""

from __future__ import annotations

import itertools
import math
import random
from datetime import UTC, datetime
from typing import Any

import pytest

from lockgate.backend.broker import Delivery
from lockgate.core.activity import (
    BOUNDS,
    KEEP_MINUTES,
    MINUTE,
    batches,
    bucket_of,
    counter_name,
    minute_of,
    parse_counter,
    percentile,
    summarize,
)
from lockgate.core.codec import Job
from lockgate.core.outcome import ALREADY_PROCESSED, DONE, ErrorInfo, Outcome
from lockgate.worker.activity import ActivityRecorder
from lockgate.worker.runner import Ending

LEVELS = ("critical", "normal", "low")
NOW = 1_700_000_010.0  # 30 s into a minute
STEP = BOUNDS[1] / BOUNDS[0]  # neighbouring bounds' ratio: a percentile's precision


def delivery(attempt: int = 1, *, level: int = 1, enqueued: float = NOW - 2.0,
             deliveries: int = 1, waits: int = 0, queue: str = "default") -> Delivery:  # fmt: skip
    job = Job(id="j1", task="t", queue=queue, level=LEVELS[level], attempt=attempt,
              enqueued=enqueued, waits=waits)  # fmt: skip
    return Delivery(queue, level, "src", "1-0", job, job_id="j1", deliveries=deliveries)


def ending(outcome: Outcome, finished: float = NOW, **kwargs: Any) -> Ending:
    return Ending(delivery(**kwargs), outcome, started=finished - 0.1, finished=finished)


ERROR = ErrorInfo("ValueError", "boom")


# buckets and percentiles


def test_buckets_are_log_spaced_from_a_millisecond() -> None:
    assert BOUNDS[0] == pytest.approx(0.001)
    assert BOUNDS[10] == pytest.approx(0.01)
    assert BOUNDS[-1] == pytest.approx(100_000.0)
    ratios = {round(upper / lower, 9) for lower, upper in itertools.pairwise(BOUNDS)}
    assert ratios == {round(10**0.1, 9)}


@pytest.mark.parametrize(
    ("seconds", "bucket"),
    [(0.0, 0), (0.0005, 0), (BOUNDS[0], 0), (BOUNDS[0] * 1.0001, 1), (BOUNDS[30], 30),
     (BOUNDS[30] * 1.01, 31), (BOUNDS[-1], len(BOUNDS) - 1), (1e9, len(BOUNDS))],
)  # fmt: skip
def test_a_wait_falls_in_the_bucket_whose_upper_bound_holds_it(seconds: float, bucket: int) -> None:
    assert bucket_of(seconds) == bucket


def test_the_percentile_of_nothing_is_none() -> None:
    assert percentile({}, 0.5) is None
    assert percentile({3: 0}, 0.99) is None


def test_a_percentile_lies_inside_the_bucket_that_holds_it() -> None:
    histogram = {20: 100}  # every wait in (BOUNDS[19], BOUNDS[20]]
    for q in (0.01, 0.5, 0.99, 1.0):
        value = percentile(histogram, q)
        assert value is not None
        assert BOUNDS[19] <= value <= BOUNDS[20]
    assert percentile(histogram, 1.0) == pytest.approx(BOUNDS[20])
    # Log-interpolated: the median is the bucket's geometric middle.
    assert percentile(histogram, 0.5) == pytest.approx(math.sqrt(BOUNDS[19] * BOUNDS[20]))


def test_the_first_bucket_is_linear_from_zero_and_the_overflow_is_the_last_bound() -> None:
    assert percentile({0: 10}, 0.5) == pytest.approx(BOUNDS[0] / 2)
    assert percentile({len(BOUNDS): 5}, 0.5) == BOUNDS[-1]


def test_percentiles_pick_the_right_bucket_across_several() -> None:
    histogram = {bucket_of(0.01): 50, bucket_of(1.0): 49, bucket_of(60.0): 1}
    p50, p99, p100 = (percentile(histogram, q) for q in (0.5, 0.99, 1.0))
    assert p50 is not None and p99 is not None and p100 is not None
    assert 0.01 / STEP < p50 <= 0.01
    assert 1.0 / STEP < p99 <= 1.0
    assert 60.0 / STEP < p100 <= 60.0 * STEP


def test_percentiles_from_buckets_are_within_one_bucket_of_the_exact_ones() -> None:
    rng = random.Random(7)
    waits = sorted(rng.lognormvariate(-2.0, 1.5) for _ in range(20_000))
    histogram: dict[int, int] = {}
    for wait in waits:
        histogram[bucket_of(wait)] = histogram.get(bucket_of(wait), 0) + 1
    for q in (0.5, 0.9, 0.99):
        exact = waits[math.ceil(q * len(waits)) - 1]
        estimate = percentile(histogram, q)
        assert estimate is not None
        assert exact / STEP <= estimate <= exact * STEP, (q, exact, estimate)


# what the recorder counts


def test_counter_names_round_trip() -> None:
    assert parse_counter(counter_name("done", "emails", "low")) == ("done", "emails", "low")
    assert parse_counter(counter_name("w12", "a.b-c_d", "x")) == ("w12", "a.b-c_d", "x")
    assert parse_counter("done:low") is None
    assert parse_counter("::") is None


def counted(recorder: ActivityRecorder) -> dict[str, int]:
    """Every counter the recorder holds, minutes added up."""
    total: dict[str, int] = {}
    for fields in recorder.take().values():
        for name, amount in fields.items():
            total[name] = total.get(name, 0) + amount
    return total


def test_the_recorder_counts_done_retried_dead_and_cancelled_runs() -> None:
    recorder = ActivityRecorder(LEVELS)
    recorder.settled(ending(DONE), owned=True)
    recorder.settled(ending(DONE), owned=True)
    recorder.settled(ending(Outcome("retry", delay=1.0, error=ERROR)), owned=True)
    recorder.settled(ending(Outcome("dead", reason="retries exhausted", error=ERROR)), True)
    recorder.settled(ending(Outcome("done", cancelled=True), level=0), owned=True)
    assert counted(recorder) == {
        "done:normal:default": 2, "retried:normal:default": 1, "dead:normal:default": 1,
        "cancelled:critical:default": 1,
    }  # fmt: skip


def test_put_backs_duplicates_zombies_and_abandoned_runs_are_not_counted() -> None:
    recorder = ActivityRecorder(LEVELS)
    recorder.settled(ending(Outcome("retry", delay=0.05)), owned=True)  # busy claim, rate limit
    recorder.settled(ending(Outcome("done", reason=ALREADY_PROCESSED)), owned=True)
    recorder.settled(ending(DONE), owned=False)  # another worker had taken it over
    recorder.settled(ending(Outcome("abandoned")), owned=True)
    assert counted(recorder) == {}


def test_a_first_attempt_that_ends_unrun_counts_its_wait_when_settled() -> None:
    recorder = ActivityRecorder(LEVELS)
    expired = Outcome("done", reason="expired: waited 9 s", cancelled=True)
    recorder.settled(Ending(delivery(enqueued=NOW - 9.0), expired, finished=NOW), owned=True)
    recorder.settled(Ending(delivery(), Outcome("retry", delay=1)), owned=True)  # a put-back
    recorder.settled(Ending(delivery(), expired, finished=NOW), owned=False)  # a zombie's
    assert recorder.take() == {
        minute_of(NOW): {f"w{bucket_of(9.0)}:normal:default": 1, "cancelled:normal:default": 1}
    }


def test_the_wait_of_first_attempts_only_is_counted_in_the_minute_it_ended() -> None:
    recorder = ActivityRecorder(LEVELS)
    recorder.started(delivery(enqueued=NOW - 2.0), NOW)
    recorder.started(delivery(attempt=2), NOW)  # a retry: its wait includes the backoff
    recorder.started(delivery(deliveries=2), NOW)  # a redelivery after a crash
    # Put back first (a busy claim, a rate limit): its run begins now, its wait ends now.
    recorder.started(delivery(waits=1, enqueued=NOW - 0.3), NOW)
    recorder.started(delivery(enqueued=0.0), NOW)  # no enqueue time
    recorder.started(delivery(enqueued=NOW + 5.0), NOW)  # the producer's clock is ahead: 0 s
    assert recorder.take() == {
        minute_of(NOW): {
            f"w{bucket_of(2.0)}:normal:default": 1,
            f"w{bucket_of(0.3)}:normal:default": 1,
            "w0:normal:default": 1,
        }
    }


def test_counts_go_to_the_minute_the_run_ended_in() -> None:
    recorder = ActivityRecorder(LEVELS)
    recorder.settled(ending(DONE, finished=NOW - MINUTE), owned=True)
    recorder.settled(ending(DONE, finished=NOW), owned=True)
    counts = recorder.take()
    assert counts == {
        minute_of(NOW) - 1: {"done:normal:default": 1}, minute_of(NOW): {"done:normal:default": 1}
    }  # fmt: skip
    assert recorder.take() == {}  # taken: forgotten


def test_counts_given_back_are_kept_but_never_past_the_keep_window() -> None:
    recorder = ActivityRecorder(LEVELS)
    recorder.count("done", "default", "normal", NOW)
    recorder.give_back({
        minute_of(NOW): {"done:normal:default": 2},
        minute_of(NOW) - KEEP_MINUTES - 1: {"done:normal:default": 5},  # its key is gone
    }, now=NOW)  # fmt: skip
    assert recorder.take() == {minute_of(NOW): {"done:normal:default": 3}}
    # A long outage: the memory held stays bounded by the window, however many minutes.
    for minute in range(3 * KEEP_MINUTES):
        recorder.give_back({minute_of(NOW) - minute: {"done:normal:default": 1}}, now=NOW)
    assert len(recorder) == KEEP_MINUTES + 1


# the rolling window read back


def test_the_window_holds_the_last_minutes_up_to_now_and_nothing_older() -> None:
    last = minute_of(NOW)
    counts = {
        last - minutes_ago: {"done:normal:default": 1, "dead:normal:default": minutes_ago % 2}
        for minutes_ago in range(20)
    }
    counts[last + 1] = {"done:normal:default": 100}  # a worker's clock ahead: not yet
    activity = summarize(counts, minutes=15, now=NOW)
    assert activity.minutes == 15
    assert activity.start == datetime.fromtimestamp((last - 14) * MINUTE, UTC)
    assert activity.end == datetime.fromtimestamp(NOW, UTC)
    assert activity.seconds == pytest.approx(14 * MINUTE + 30)
    row = activity.of("default", "normal")
    assert [m.start for m in row.minutes] == [
        datetime.fromtimestamp((last - 14 + i) * MINUTE, UTC) for i in range(15)
    ]
    assert [m.done for m in row.minutes] == [1] * 15
    assert row.totals.done == 15
    assert row.totals.dead == 7  # odd minutes ago among 0..14
    assert row.totals.done_per_second == pytest.approx(15 / (14 * MINUTE + 30))
    assert row.totals.failed_per_second == pytest.approx(7 / (14 * MINUTE + 30))


def test_a_minute_later_the_oldest_minute_leaves_the_window() -> None:
    last = minute_of(NOW)
    counts = {last - 14: {"done:normal:default": 4}, last: {"done:normal:default": 1}}
    assert summarize(counts, minutes=15, now=NOW).of("default", "normal").totals.done == 5
    later = summarize(counts, minutes=15, now=NOW + MINUTE)
    assert later.of("default", "normal").totals.done == 1


def test_wait_percentiles_per_minute_and_over_the_window() -> None:
    last = minute_of(NOW)
    fast, slow = bucket_of(0.01), bucket_of(5.0)
    counts = {
        last - 1: {f"w{fast}:critical:mail": 199, f"w{slow}:critical:mail": 1},
        last: {f"w{slow}:critical:mail": 100},
    }
    row = summarize(counts, minutes=2, now=NOW).of("mail", "critical")
    before, now = row.minutes
    assert before.wait_p50 is not None and before.wait_p50 <= 0.01
    assert before.wait_p99 is not None and before.wait_p99 <= 0.01
    assert now.wait_p50 is not None and 5.0 / STEP < now.wait_p50 <= 5.0
    assert row.totals.wait_p50 is not None and row.totals.wait_p50 <= 0.01
    assert row.totals.wait_p99 is not None and 5.0 / STEP < row.totals.wait_p99 <= 5.0
    assert row.totals.done == 0 and row.minutes[0].done == 0


def test_a_level_with_nothing_counted_reads_as_zeros() -> None:
    activity = summarize({}, minutes=3, now=NOW)
    row = activity.of("default", "low")
    assert (row.queue, row.level, len(row.minutes)) == ("default", "low", 3)
    assert row.totals.done == row.totals.dead == 0
    assert row.totals.done_per_second == 0.0
    assert row.totals.wait_p50 is None and row.minutes[-1].wait_p99 is None


def test_levels_combine_into_their_queue_and_queues_into_everything() -> None:
    last = minute_of(NOW)
    counts = {last: {
        "done:critical:default": 2, "done:low:default": 3, "retried:low:default": 1,
        "done:normal:mail": 10, f"w{bucket_of(0.5)}:low:default": 1,
        "bogus": 9, "x:y": 1, "done:low:default:extra": 0,
    }}  # fmt: skip
    activity = summarize(counts, minutes=5, now=NOW)
    assert set(activity.levels) == {("default", "critical"), ("default", "low"),
                                    ("mail", "normal")}  # fmt: skip
    queue = activity.combined("default")
    assert (queue.queue, queue.level) == ("default", "*")
    assert (queue.totals.done, queue.totals.retried) == (5, 1)
    assert queue.minutes[-1].done == 5
    assert queue.totals.wait_p50 is not None and 0.5 / STEP < queue.totals.wait_p50 <= 0.5
    everything = activity.combined()
    assert (everything.queue, everything.totals.done) == ("*", 15)
    assert everything.as_dict()["totals"]["done"] == 15


def test_the_activity_is_json_ready() -> None:
    last = minute_of(NOW)
    activity = summarize({last: {"done:normal:default": 3, "w5:normal:default": 1}},
                         minutes=2, now=NOW)  # fmt: skip
    shown = activity.as_dict()
    assert shown["minutes"] == 2
    (level,) = shown["levels"]
    assert (level["queue"], level["level"], level["totals"]["done"]) == ("default", "normal", 3)
    assert [m["done"] for m in level["minutes"]] == [0, 3]
    assert level["minutes"][1]["start"] == datetime.fromtimestamp(last * MINUTE, UTC).isoformat()
    assert level["totals"]["wait_p99"] is not None


def test_batches_carry_ages_on_the_worker_clock_and_minutes_guessed_on_the_server_one() -> None:
    now = 1_000 * 60 + 20.5  # 20.5 s into the worker's minute 1000
    counts = {998: {"done:normal:q": 1}, 1000: {"done:normal:q": 2}, 999: {}}
    # The server's clock is 10 minutes ahead, as last seen.
    early, current = batches(counts, now, offset=600.0)  # the empty minute is left out
    assert (early.minute, current.minute) == (998, 1000)
    # A past minute's counts are as old as its end at most; the current one's, now.
    assert early.age_ms == round((now - (999 * 60 - 0.001)) * 1000)
    assert current.age_ms == 0
    # Candidates: the guessed server minute and one on each side.
    assert current.first + 1 == 1010 and early.first + 1 == 1008
    assert dict(current.counters) == {"done:normal:q": 2}
