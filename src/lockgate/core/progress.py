"""A running job's progress: its checks, its stored form, and the board where runs leave
their latest value for the worker's writer. Pure, no I/O.

``current_job().set_progress(value, note)`` only records the latest value of its job on
the worker's :class:`ProgressBoard` (a dict under a lock: any thread may record); the
worker's writer (:mod:`lockgate.worker.progress`) takes what changed every
:data:`FLUSH_EVERY` seconds and writes it in one call per partition. However often a
task reports, its job costs at most one write per flush.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping
from typing import Any

import msgspec

MAX_NOTE = 200
"""The longest note kept, in characters: a longer one is cut to this length."""
FLUSH_EVERY = 0.05
"""Seconds between a worker's writes of the progress its runs recorded."""

Progress = tuple[float, str | None]
"""A job's progress: its value in 0.0-1.0 and its note (None: none)."""

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(tuple[float, str | None])


def check_progress(value: Any, note: Any = None) -> Progress:
    """A progress report, checked.

    Args:
        value: how far the job is, a real number from 0.0 to 1.0 (an ``int`` 0 or 1
            too; not a ``bool``, not NaN).
        note: a short text for people (None: none), cut to :data:`MAX_NOTE` characters.

    Returns:
        ``(value, note)``, the value as a ``float``.

    Raises:
        ValueError: the value is not a real number in 0.0-1.0, or the note not a str.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"progress must be a number from 0.0 to 1.0, not {value!r}")
    number = float(value)
    if math.isnan(number) or not 0.0 <= number <= 1.0:
        raise ValueError(f"progress must be from 0.0 to 1.0, not {value!r}")
    if note is not None and not isinstance(note, str):
        raise ValueError(f"a progress note must be a str or None, not {type(note).__name__}")
    return number, note[:MAX_NOTE] if note is not None else None


def encode_progress(progress: Progress) -> bytes:
    """A job's progress as stored: the JSON array ``[value, note]``."""
    return _encoder.encode(progress)


def decode_progress(data: Any) -> Progress | None:
    """A stored progress; None for none (``None``, ``b""``, ``False``) or an unreadable
    one."""
    if not data:
        return None
    try:
        return _decoder.decode(data)
    except (msgspec.DecodeError, TypeError):
        return None


class ProgressBoard:
    """The latest progress each run of one worker recorded, not yet written.

    Any thread of the worker's process may record (sync tasks run in a thread pool). In a
    child process (a job delivered too often runs in one, see
    :mod:`lockgate.process.isolation`) a record is dropped: nothing there writes it, and
    the lock may have been held by another thread when the child was forked.
    """

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._pending: dict[str, Progress] = {}

    def record(self, job_id: str, progress: Progress) -> None:
        """Keep ``progress`` as job ``job_id``'s latest (it replaces any not yet taken)."""
        if os.getpid() != self._pid:
            return
        with self._lock:
            self._pending[job_id] = progress

    def take(self) -> dict[str, Progress]:
        """What was recorded since the last take, by job id; the board is empty after."""
        with self._lock:
            pending, self._pending = self._pending, {}
        return pending

    def put_back(self, pending: Mapping[str, Progress]) -> None:
        """Return what a failed write took, where no newer value was recorded since."""
        with self._lock:
            for job_id, progress in pending.items():
                self._pending.setdefault(job_id, progress)

    def __len__(self) -> int:
        return len(self._pending)


MIN_TTL_MS = 600_000
"""The shortest time a progress is kept after its last write, in ms (ten minutes)."""


def progress_ttl_ms(status_ttl_ms: int) -> int:
    """How long a progress is kept after its last write, in ms: as long as the App keeps
    an ended job's status (``status_ttl``), ten minutes at least (it must outlast the
    pauses between reports of a running job too)."""
    return max(status_ttl_ms, MIN_TTL_MS)
