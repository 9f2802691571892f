"""Final records (core.status): the packed form the worker writes and the JSON forms
(lockgate 0.3's keys, the cancel script's) read back as the same FinalRecord."""

from __future__ import annotations

import msgspec
import pytest

from lockgate.core.outcome import DONE, Outcome
from lockgate.core.status import FinalRecord, final_record, read_final


def test_a_packed_record_reads_back_to_the_millisecond_and_stays_small() -> None:
    data = final_record(
        "mail.send_welcome", 2, 1_765_000_000.1234, 1_765_000_003.5, 1_765_000_003.75, DONE
    )
    assert data[:1] != b"{" and len(data) <= 48  # a hash keeps listpacks up to 64 bytes
    assert read_final(data) == FinalRecord(
        status="done", task="mail.send_welcome", attempts=2, enqueued_at=1_765_000_000.123,
        started_at=1_765_000_003.5, finished_at=1_765_000_003.75,
    )  # fmt: skip


def test_a_job_that_never_ran_reads_no_start_and_keeps_its_reason() -> None:
    expired = Outcome("done", cancelled=True, reason="expired: past its deadline")
    record = read_final(final_record("t", 0, 100.0, 0.0, 105.0, expired))
    assert (record.status, record.started_at, record.finished_at) == ("cancelled", 0.0, 105.0)
    assert record.reason == "expired: past its deadline"


def test_the_json_records_of_lockgate_0_3_and_of_the_cancel_script_still_read() -> None:
    old = b'{"s":"dead","t":"charge","a":3,"e":10.5,"b":11.0,"f":12.25,"r":"failed"}'
    assert read_final(old) == FinalRecord(
        status="dead", task="charge", attempts=3, enqueued_at=10.5, started_at=11.0,
        finished_at=12.25, reason="failed",
    )  # fmt: skip
    with pytest.raises(msgspec.DecodeError):
        read_final(b"\xc1 not a record")
