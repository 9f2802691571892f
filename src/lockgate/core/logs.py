"""lockgate's loggers, whose lines a user string cannot break (pure: no I/O).

Job ids, task names, queue names from a message and error texts are user strings, and
some reach log lines as ``%s`` arguments: a job id ``"x\\nERROR ... forged"`` would print
a second, forged line. Every module takes its logger from :func:`get_logger`, which
carries :class:`OneLine`: a record whose message holds a control character (a newline, a
carriage return, an escape, ...) gets it escaped the way ``repr`` shows it (``\\n``,
``\\r``, ``\\x1b``), so one call is one line, whatever its arguments and whatever the
handler. A filter on each logger rather than a wrapper on each argument: nothing to
forget at a new log call, and ``%r``, ``%s`` and exceptions alike are covered. (A filter
on the ``lockgate`` logger alone would not do: Python runs a logger's filters only for
records logged on it, not for those its children propagate.)

A traceback is the exception: it follows its line, as ``log.exception`` prints one (the
formatter's, from ``exc_info``, untouched). A task's traceback that a line reports (a
dead letter's) goes the same way: passed as ``extra=traceback_extra(text)``, the filter
makes it the record's ``exc_text``, which every formatter prints after the line (the JSON
one as its ``exception`` field).
"""

from __future__ import annotations

import logging
import re

# C0 and C1 controls, DEL, and the two Unicode line breaks some viewers honour.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_TRACEBACK = "lockgate_traceback"


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def one_line(text: str) -> str:
    """``text`` with each control character escaped as ``repr`` shows it."""
    return _CONTROL.sub(_escaped, text)


class OneLine(logging.Filter):
    """Escape control characters in a record's message (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if _CONTROL.search(message):
            record.msg, record.args = one_line(message), ()
        traceback = record.__dict__.pop(_TRACEBACK, "")
        if traceback and not record.exc_info and not record.exc_text:
            record.exc_text = traceback.rstrip()
        return True


def traceback_extra(traceback: str | None) -> dict[str, str]:
    """The ``extra`` of a log call that reports a traceback (see the module docstring)."""
    return {_TRACEBACK: traceback} if traceback else {}


_FILTER = OneLine()


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` carrying :class:`OneLine` (once)."""
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger
