"""lockgate's log lines: a user string cannot break one into two (issue 22, item 7)."""

from __future__ import annotations

import importlib
import logging
import pkgutil
from pathlib import Path

import pytest

import lockgate
from lockgate.core.logs import OneLine, get_logger, one_line, traceback_extra


def test_control_characters_are_escaped_as_repr_shows_them() -> None:
    assert one_line("a\nb\rc\td\x1b[31m\x00\x7f\u2028é") == (
        "a\\nb\\rc\\td\\x1b[31m\\x00\\x7f\\u2028é"
    )
    assert one_line("plain: a-b_c.d") == "plain: a-b_c.d"


def test_a_record_with_a_newline_in_its_arguments_becomes_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = get_logger("lockgate.test_logs")
    with caplog.at_level(logging.INFO, logger="lockgate.test_logs"):
        log.info("job %s (%r) failed: %s", "x\nERROR forged", "t\r", ValueError("a\nb"))
        log.info("job %s: %d tries", "plain", 3)
    first, second = (r.getMessage() for r in caplog.records)
    assert first == "job x\\nERROR forged ('t\\r') failed: a\\nb"
    assert second == "job plain: 3 tries"
    assert caplog.records[1].args == ("plain", 3)  # untouched when nothing needs escaping


def test_every_lockgate_module_logs_through_the_filter() -> None:
    """No module logs on a logger without it: a new module using logging.getLogger
    directly fails here."""
    unfiltered = []
    for info in pkgutil.walk_packages(lockgate.__path__, "lockgate."):
        if info.name.endswith("__main__"):
            continue  # runs the CLI
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an extra that is not installed
            continue
        log = getattr(module, "log", None)
        if isinstance(log, logging.Logger) and not any(isinstance(f, OneLine) for f in log.filters):
            unfiltered.append(info.name)
    assert unfiltered == []
    # Nor takes a logger of its own any other way (the job log's is ``lockgate.jobs``).
    sources = Path(lockgate.__file__).parent.rglob("*.py")
    direct = [p.name for p in sources if "getLogger(__name__)" in p.read_text() or
              "getLogger(JOBS_LOGGER)" in p.read_text()]  # fmt: skip
    assert direct == []


def test_a_traceback_passed_as_extra_follows_the_line_as_an_exceptions_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = get_logger("lockgate.test_logs")
    tb = 'Traceback (most recent call last):\n  File "t.py", line 1\nValueError: a\nb\n'
    with caplog.at_level(logging.INFO, logger="lockgate.test_logs"):
        log.error("job %s failed", "x\ny", extra=traceback_extra(tb))
        log.error("job %s failed", "z", extra=traceback_extra(None))
    first, second = caplog.records
    assert first.getMessage() == "job x\\ny failed"
    assert first.exc_text == tb.rstrip()
    assert not hasattr(first, "lockgate_traceback")
    text = logging.Formatter("%(message)s").format(first)
    assert text == "job x\\ny failed\n" + tb.rstrip()
    assert second.exc_text is None
