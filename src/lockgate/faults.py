"""Redis errors named once, at the seam: what each means and what a worker does about it.

The documented path of :mod:`lockgate.backend.faults`, which holds the code."""

from lockgate.backend.faults import (
    FATAL_CODES,
    MAX_TRIES_SEEN,
    REDIS_FAULTS,
    TRANSIENT_CODES,
    Fault,
    classify,
    may_have_landed,
    translate,
    translated,
)

__all__ = [
    "FATAL_CODES",
    "MAX_TRIES_SEEN",
    "REDIS_FAULTS",
    "TRANSIENT_CODES",
    "Fault",
    "classify",
    "may_have_landed",
    "translate",
    "translated",
]
