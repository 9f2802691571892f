"""The recent ends' values and the per-task table's figures (pure): which endings go to
which history, the entries' encoding, the rates, the percentiles and the last error."""

from __future__ import annotations

import msgspec
import pytest

from lockgate.core import history
from lockgate.core.history import EndEntry, EndOutcome, PackedEnd
from lockgate.core.outcome import ALREADY_PROCESSED, CANCELLED, DONE, ErrorInfo, Outcome, dead


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (DONE, "done"),
        (CANCELLED, None),  # cancelled (and expired) jobs are not done
        (Outcome("done", reason=ALREADY_PROCESSED), None),  # a duplicate that did not run
        (Outcome("retry", error=ErrorInfo("E", "m")), "retried"),
        (Outcome("retry", reason="claim busy"), None),  # a put-back, not a failure
        (dead("failed", ErrorInfo("E", "m")), "dead"),
        (dead("expired"), "dead"),
        (Outcome("abandoned"), None),
    ],
)
def test_which_history_an_ending_goes_to(outcome: Outcome, expected: str | None) -> None:
    assert history.end_outcome(outcome) == expected


def test_an_entry_round_trips_and_a_failures_text_is_cut() -> None:
    failed = dead("retries exhausted", ErrorInfo("ValueError", "x" * 500))
    data = history.pack_end("j1", failed, 3, 100.0, 100.5)
    end = history.read_end(data, "charge", "dead")
    assert end == EndEntry("j1", "charge", "dead", 100.5, 500, 3, "ValueError: " + "x" * 188)
    never_ran = history.read_end(history.pack_end("j2", dead("expired"), 1, 0.0, 7.0), "t", "dead")
    assert never_ran is not None and never_ran.run_ms is None and never_ran.error == "expired"
    done = history.read_end(history.pack_end("j3", DONE, 1, 1.0, 1.002), "t", "done")
    assert done is not None and done.error == "" and done.run_ms == 2
    assert history.read_end(msgspec.msgpack.encode({"x": 1}), "t", "done") is None


def end(at: float, ran: int | None = 10, error: str = "") -> PackedEnd:
    return PackedEnd("j", round(at * 1000), ran, 1, error)


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert history.percentile(values, 0.5) == 50
    assert history.percentile(values, 0.99) == 99
    assert history.percentile([7.0], 0.99) == 7
    assert history.percentile([], 0.5) is None


def test_a_rate_runs_from_the_oldest_kept_end_to_now() -> None:
    assert history.rate([end(90.0), end(95.0), end(100.0)], now=100.0) == 3 / 10
    assert history.rate([end(100.0)], now=100.0) == 1.0  # at least one second
    assert history.rate([], now=100.0) == 0.0


def test_a_tasks_row_sums_its_ends() -> None:
    ends: dict[EndOutcome, list[PackedEnd]] = {
        "done": [end(100.0, 10), end(99.0, 30)],
        "retried": [end(98.0, 5, "E: one")],
        "dead": [end(97.0, None, "E: two")],
    }
    row = history.task_row("t", ends, now=100.0)
    assert (row.done, row.retried, row.dead) == (2, 1, 1)
    assert row.done_rate == 2 / 1.0
    assert row.failed_rate == 1 / 2.0 + 1 / 3.0
    assert (row.p50_ms, row.p99_ms) == (10, 30)  # of the ends that ran: 5, 10, 30
    assert (row.last_error, row.last_error_at, row.last_ended_at) == ("E: one", 98.0, 100.0)
    empty = history.task_row("u", {}, now=100.0)
    assert empty.p50_ms is None and empty.last_error == "" and empty.last_ended_at is None


def test_partitions_lists_merge_newest_first_and_cut() -> None:
    first, second = [end(5.0), end(3.0), end(1.0)], [end(4.0), end(2.0)]
    assert [e.ended for e in history.merged([first, second], 4)] == [5000, 4000, 3000, 2000]
    assert history.merged([first], 2) == first[:2]


def test_undecodable_entries_are_skipped() -> None:
    good = history.pack_end("j1", DONE, 1, 1.0, 2.0)
    assert [e.job_id for e in history.unpack_ends([b"\xc1", good, b"{}"])] == ["j1"]


def test_an_error_with_a_lone_surrogate_is_kept_escaped() -> None:
    name = b"report-\xff.csv".decode("utf-8", "surrogateescape")  # a file name as read
    failed = dead("failed", ErrorInfo("ValueError", f"cannot parse {name}"))
    entry = history.read_end(history.pack_end("j1", failed, 1, 1.0, 2.0), "t", "dead")
    assert entry is not None
    assert entry.error == "ValueError: cannot parse report-\\udcff.csv"
