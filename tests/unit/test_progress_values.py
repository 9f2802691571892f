"""A progress report's checks, its stored form, and the board runs record on
(lockgate.core.progress)."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import pytest

from lockgate.core.context import JobContext
from lockgate.core.progress import (
    MAX_NOTE,
    MIN_TTL_MS,
    ProgressBoard,
    check_progress,
    decode_progress,
    encode_progress,
    progress_ttl_ms,
)
from lockgate.errors import ConnectionFailed
from lockgate.worker.progress import ProgressWriter


@pytest.mark.parametrize("value", [0, 1, 0.0, 0.5, 1.0])
def test_values_from_zero_to_one_are_floats(value: float) -> None:
    assert check_progress(value) == (float(value), None)
    assert type(check_progress(value)[0]) is float


@pytest.mark.parametrize(
    "value", [-0.01, 1.01, float("nan"), float("inf"), True, False, "0.5", None, [0.5]]
)
def test_anything_else_is_a_value_error_naming_the_range(value: object) -> None:
    with pytest.raises(ValueError, match=r"0\.0 to 1\.0"):
        check_progress(value)


def test_a_note_is_a_str_cut_to_its_limit() -> None:
    assert check_progress(0.5, "x" * (MAX_NOTE + 1)) == (0.5, "x" * MAX_NOTE)
    with pytest.raises(ValueError, match="note must be a str"):
        check_progress(0.5, b"bytes")


def test_the_stored_form_round_trips_and_bad_data_reads_as_none() -> None:
    data = encode_progress((0.42, "rows"))
    assert data == b'[0.42,"rows"]'
    assert decode_progress(data) == (0.42, "rows")
    assert decode_progress(encode_progress((1.0, None))) == (1.0, None)
    for bad in (None, b"", False, b"{", b'"x"'):
        assert decode_progress(bad) is None


def test_progress_is_kept_as_long_as_statuses_ten_minutes_at_least() -> None:
    assert progress_ttl_ms(0) == MIN_TTL_MS
    assert progress_ttl_ms(3_600_000) == 3_600_000


def test_the_board_keeps_the_latest_value_per_job_until_taken() -> None:
    board = ProgressBoard()
    for i in range(1000):
        board.record("a", (i / 1000, None))
    board.record("b", (1.0, "done"))
    assert board.take() == {"a": (0.999, None), "b": (1.0, "done")}
    assert board.take() == {}


def test_a_failed_write_puts_back_only_values_not_replaced_since() -> None:
    board = ProgressBoard()
    board.record("a", (0.1, None))
    board.record("b", (0.2, None))
    taken = board.take()
    board.record("a", (0.3, None))
    board.put_back(taken)
    assert board.take() == {"a": (0.3, None), "b": (0.2, None)}


def test_threads_record_at_once_without_losing_the_last_values() -> None:
    board = ProgressBoard()

    def report(job: str) -> None:
        for i in range(1, 2001):
            board.record(job, (i / 2000, None))

    threads = [threading.Thread(target=report, args=(f"j{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert board.take() == {f"j{n}": (1.0, None) for n in range(4)}


def test_a_context_records_on_its_board_and_checks_outside_a_worker() -> None:
    board = ProgressBoard()
    context = JobContext("j1", "t", "q", "normal", 1, 0.0, progress=board)
    context.set_progress(0.5, "half")
    assert board.take() == {"j1": (0.5, "half")}
    alone = JobContext("j2", "t", "q", "normal", 1, 0.0)
    alone.set_progress(0.5)  # no board: nothing recorded, nothing raised
    with pytest.raises(ValueError):
        alone.set_progress(2.0)


class FlakyStore:
    """Where a writer writes: refuses its first write, as Redis away would."""

    def __init__(self) -> None:
        self.writes: list[dict[str, bytes]] = []
        self.refused = 0

    async def write_progress(self, values: Mapping[str, bytes], ttl_ms: int) -> None:
        if not self.refused:
            self.refused += 1
            raise ConnectionFailed("redis://nowhere", "connection refused")
        assert ttl_ms == MIN_TTL_MS
        self.writes.append(dict(values))


async def test_a_failed_flush_raises_and_the_next_writes_the_latest_values() -> None:
    store = FlakyStore()
    writer = ProgressWriter(store, status_ttl_ms=0)
    writer.board.record("a", (0.1, None))
    with pytest.raises(ConnectionFailed):
        await writer.flush()  # the worker's supervisor logs it and runs the loop again
    writer.board.record("b", (0.2, "b"))
    assert await writer.flush() == 2
    assert store.writes == [{"a": b"[0.1,null]", "b": b'[0.2,"b"]'}]
    assert writer.written == 2 and await writer.flush() == 0
