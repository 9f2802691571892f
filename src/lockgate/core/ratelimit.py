"""Task rate limits: ``@app.task(rate_limit="100/s")``. Pure, no I/O.

A limit is shared by every worker of a namespace: before a job starts, its worker asks one
Redis script (``lua/rate_limit.lua``) that keeps a GCRA limiter per task on the server's
clock. A job over the limit is put back delayed until its turn, spending no attempt, and
its worker slot takes other work meanwhile.

GCRA (the generic cell rate algorithm of ATM networks, ITU-T I.371, also used by
redis-cell) keeps one number per limiter, the theoretical arrival time (TAT) of the next
start: a start is allowed once the server's clock reaches ``TAT - (burst - 1) *
interval``, and moves the TAT one emission interval on. A refusal changes nothing and
says how long until the next start is allowed.

Burst 1: starts are spaced evenly, ``period / count`` apart, the strict reading of "at
most N per period": no window of one period, ``[t, t + period)``, holds more than N
starts. So "100/s" starts one job every 10 ms, never 100 at once and then none for a
second. The emission interval is rounded up to a whole microsecond, so rounding never
lets more through.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lockgate.errors import ConfigError

# Starts allowed at once when the limiter has been idle (see the module docstring).
BURST = 1
UNITS = {"s": 1, "m": 60, "h": 3600}
_RATE = re.compile(r"\s*(\d+)\s*/\s*([smh])\s*", re.ASCII)
US_PER_SECOND = 1_000_000


@dataclass(frozen=True, slots=True)
class Rate:
    """A rate limit: at most ``count`` starts per ``period`` seconds.

    Attributes:
        count: starts per period (at least 1).
        period: the period in seconds (1, 60 or 3600).
    """

    count: int
    period: int

    @property
    def interval_us(self) -> int:
        """The GCRA emission interval: microseconds between two starts, rounded up."""
        return -(-self.period * US_PER_SECOND // self.count)

    @property
    def burst(self) -> int:
        """Starts allowed at once after an idle spell (:data:`BURST`)."""
        return BURST

    def __str__(self) -> str:
        unit = next(name for name, length in UNITS.items() if length == self.period)
        return f"{self.count}/{unit}"


def parse_rate(text: object, task_name: str, option: str = "rate_limit") -> Rate:
    """Parse a task's ``rate_limit``: ``"N/s"``, ``"N/m"`` or ``"N/h"``.

    Whitespace around the parts is ignored (``" 5 / m "``). ``N`` is a whole number of at
    least 1.

    Args:
        text: the ``rate_limit`` as given.
        task_name: the task's name, for the error message.
        option: the option's name, for the error message.

    Returns:
        The rate.

    Raises:
        ConfigError: ``text`` is not a string of that form (a zero or negative count, a
            fraction, another unit), naming the task.
    """
    found = _RATE.fullmatch(text) if isinstance(text, str) else None
    if found is None or int(found.group(1)) < 1:
        zero = " (the count must be at least 1)" if found is not None else ""
        raise ConfigError(
            f'task {task_name!r}: {option} must look like "100/s", "5/m" or "1000/h", '
            f"got {text!r}{zero}"
        )
    return Rate(int(found.group(1)), UNITS[found.group(2)])
