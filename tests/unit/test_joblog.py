"""How an ending is named for the metrics and the job lines, and the JSON log format."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from lockgate.backend.broker import Delivery
from lockgate.core.codec import Job
from lockgate.core.outcome import ALREADY_PROCESSED, CANCELLED, DONE, ErrorInfo, Outcome, dead, wait
from lockgate.worker.joblog import Ended, JsonFormatter, ended_as
from lockgate.worker.runner import Ending

JOB = Job(id="j1", task="charge", queue="default", level="normal")
FAILED = ErrorInfo("ValueError", "no")


@pytest.mark.parametrize(
    ("outcome", "name"),
    [
        (DONE, "succeeded"),
        (Outcome("done", reason=ALREADY_PROCESSED, claim="keep"), "skipped"),
        (CANCELLED, "cancelled"),
        (Outcome("done", reason="expired: waited 9 s", cancelled=True), "cancelled"),
        (Outcome("retry", delay=1.0, next_job=JOB, error=FAILED), "retried"),
        (wait(JOB, 0.5), "put_back"),  # another worker holds the claim
        (Outcome("retry", delay=0.1, next_job=JOB, reason="rate limited"), "put_back"),
        (dead("failed", FAILED), "dead_lettered"),
        (Outcome("abandoned", reason="stopped"), None),
    ],
)
def test_each_ending_has_one_name(outcome: Outcome, name: Ended | None) -> None:
    delivery = Delivery("default", 1, "stream", "1-0", JOB, job_id=JOB.id)
    assert ended_as(Ending(delivery, outcome)) == name


def record(**extra: object) -> logging.LogRecord:
    made = logging.LogRecord("lockgate.jobs", logging.INFO, __file__, 1, "job %s", ("j1",), None)
    made.__dict__.update(extra)
    return made


def test_a_json_line_has_the_message_and_the_extra_fields_at_the_top() -> None:
    line = json.loads(JsonFormatter().format(record(job_id="j1", level="normal", attempt=2)))
    assert line["message"] == "job j1"
    assert (line["severity"], line["logger"]) == ("INFO", "lockgate.jobs")
    assert (line["job_id"], line["level"], line["attempt"]) == ("j1", "normal", 2)
    assert line["time"].endswith("+00:00")
    assert "args" not in line and "msg" not in line  # a record's own attributes stay out


def test_a_traceback_stays_on_one_json_line() -> None:
    try:
        raise ValueError("bad\nworse")
    except ValueError:
        failed = record()
        failed.exc_info = sys.exc_info()
    text = JsonFormatter().format(failed)
    assert "\n" not in text
    assert "ValueError: bad\nworse" in json.loads(text)["exception"]
