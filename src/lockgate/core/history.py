"""Recent ends per task, as values (pure, no I/O): what the settle scripts keep of the
last jobs of each task and outcome, and the per-task figures drawn from them.

The worker's one settle call of a run also pushes one short entry (:class:`PackedEnd`, a
msgpack array of about 45 bytes: job id, when it ended, run time, attempt, and for a
failure its error cut to :data:`ERROR_CHARS`) onto a capped list of its task and outcome
(see ``lua/_history.lua``), so the history costs no round trip of its own. Arguments and
results are never kept there.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Literal

import msgspec

from lockgate.core.outcome import ALREADY_PROCESSED, Outcome

EndOutcome = Literal["done", "retried", "dead"]
OUTCOMES: tuple[EndOutcome, ...] = ("done", "retried", "dead")
# One letter per outcome in the lists' names (Keys.history).
CODES: dict[EndOutcome, str] = {"done": "d", "retried": "r", "dead": "x"}
# The same by the kind of the outcome that writes it.
KIND_CODES = {"done": "d", "retry": "r", "dead": "x"}
KEEP = 1000  # ends kept per task, outcome and partition
# The scripts trim a list once it holds KEEP + SLACK entries, back to KEEP: one LTRIM per
# SLACK pushes instead of one per push. Readers read the newest KEEP.
SLACK = 100
ERROR_CHARS = 200  # an error's text kept ("Type: message", cut)
UNKNOWN_TASK = "?"  # the history name of a job whose task is not registered or unreadable


class PackedEnd(msgspec.Struct, array_like=True, omit_defaults=True):
    """One end as the worker writes it: a msgpack array, times in whole ms."""

    job_id: str
    ended: int  # ms since the epoch (the worker's clock)
    ran: int | None = None  # ms the run took; None: it never ran
    attempt: int = 0
    error: str = ""  # retried and dead: "Type: message" cut to ERROR_CHARS


@dataclass(frozen=True, slots=True)
class EndEntry:
    """One recent end of a task (``lockgate.ops.history.recent_ends``).

    Attributes:
        job_id: the job's id.
        task: its task's name (``"?"``: not a task the worker knew).
        outcome: done, retried (a run that failed and was retried) or dead.
        ended_at: when it ended (Unix time, the worker's clock).
        run_ms: how long the run took, ms (None: it never ran).
        attempt: the attempt that ended (1 for the first run).
        error: retried and dead: the error's type and message, cut to 200 characters.
    """

    job_id: str
    task: str
    outcome: EndOutcome
    ended_at: float
    run_ms: int | None
    attempt: int
    error: str = ""


@dataclass(frozen=True, slots=True)
class TaskRow:
    """One task's line of the per-task table (``lockgate.ops.history.task_table``).

    Attributes:
        task: the task's name.
        done: ends kept (at most 1,000 per outcome and partition) that were done.
        retried: runs that failed and were retried.
        dead: jobs dead-lettered.
        done_rate: jobs/s done over the window the kept done ends cover (to now).
        failed_rate: runs/s that failed (retried or dead) over their windows.
        p50_ms: median run time of the kept ends (None: none ran).
        p99_ms: 99th percentile run time.
        last_error: the newest failure's error ("" when none).
        last_error_at: when it happened (None when none).
        last_ended_at: when the newest end happened (None: no end kept).
    """

    task: str
    done: int = 0
    retried: int = 0
    dead: int = 0
    done_rate: float = 0.0
    failed_rate: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    last_error: str = ""
    last_error_at: float | None = None
    last_ended_at: float | None = None


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(PackedEnd)


def end_outcome(outcome: Outcome) -> EndOutcome | None:
    """Which history an ending goes to (None: none): done (not a cancelled or expired job,
    nor a duplicate acknowledged without running), retried (a run that raised and is tried
    again: not a put-back, a claim wait or a rate limit) or dead."""
    if outcome.kind == "dead":
        return "dead"
    if outcome.kind == "retry":
        return "retried" if outcome.error is not None else None
    if outcome.kind == "done" and not outcome.cancelled and outcome.reason != ALREADY_PROCESSED:
        return "done"
    return None


def error_text(outcome: Outcome) -> str:
    """A failure's short text: ``Type: message`` (or the reason), cut to
    :data:`ERROR_CHARS` characters; a lone surrogate (a file name read with
    surrogateescape) escaped, as UTF-8 cannot hold it."""
    error = outcome.error
    text = f"{error.type}: {error.message}" if error is not None else outcome.reason
    text = text[:ERROR_CHARS]
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode()


def pack_end(job_id: str, outcome: Outcome, attempt: int, started: float, finished: float) -> bytes:
    """The history entry of an ending (``started`` 0: it never ran)."""
    failed = outcome.kind != "done"
    entry = PackedEnd(
        job_id,
        round(finished * 1000),
        round((finished - started) * 1000) if started else None,
        attempt,
        error_text(outcome) if failed else "",
    )
    return _encoder.encode(entry)


def unpack_ends(data: Iterable[bytes]) -> list[PackedEnd]:
    """Entries as the scripts keep them, in their order; one that does not decode (another
    version's) is skipped."""
    found: list[PackedEnd] = []
    for item in data:
        try:
            found.append(_decoder.decode(item))
        except msgspec.DecodeError:
            continue
    return found


def merged(parts: Sequence[Sequence[PackedEnd]], limit: int = KEEP) -> list[PackedEnd]:
    """The newest ``limit`` entries of several partitions' lists (each newest first, as
    kept), newest first."""
    if len(parts) == 1:
        return list(parts[0][:limit])
    return list(islice(heapq.merge(*parts, key=lambda e: -e.ended), limit))


def end_entry(packed: PackedEnd, task: str, outcome: EndOutcome) -> EndEntry:
    """An entry as the readers give it."""
    return EndEntry(
        packed.job_id, task, outcome, packed.ended / 1000, packed.ran, packed.attempt,
        packed.error,
    )  # fmt: skip


def read_end(data: bytes, task: str, outcome: EndOutcome) -> EndEntry | None:
    """One entry as the scripts keep it (None: not one, from another version)."""
    found = unpack_ends([data])
    return end_entry(found[0], task, outcome) if found else None


def newest(entries: Iterable[EndEntry], limit: int = KEEP) -> list[EndEntry]:
    """The newest ``limit`` entries, newest first."""
    return sorted(entries, key=lambda e: e.ended_at, reverse=True)[:limit]


def percentile(values: Sequence[float], share: float) -> float | None:
    """The nearest-rank percentile (``share`` in 0-1) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


def rate(ends: Sequence[PackedEnd], now: float) -> float:
    """Ends per second over the window the entries cover: from the oldest to now (at least
    one second, so a lone end is not a burst)."""
    if not ends:
        return 0.0
    oldest = min(e.ended for e in ends) / 1000
    return len(ends) / max(1.0, now - oldest)


def _newest_of(ends: Iterable[Sequence[PackedEnd]]) -> PackedEnd | None:
    heads = [found[0] for found in ends if found]
    return max(heads, key=lambda e: e.ended) if heads else None


def task_row(task: str, ends: Mapping[EndOutcome, Sequence[PackedEnd]], now: float) -> TaskRow:
    """A task's line of the table from its kept ends of each outcome (each newest first)."""
    done = ends.get("done", ())
    retried = ends.get("retried", ())
    dead = ends.get("dead", ())
    runs = [float(e.ran) for found in (done, retried, dead) for e in found if e.ran is not None]
    failure = _newest_of((retried, dead))
    last = _newest_of((done, retried, dead))
    return TaskRow(
        task, len(done), len(retried), len(dead), rate(done, now),
        rate(retried, now) + rate(dead, now), percentile(runs, 0.5), percentile(runs, 0.99),
        failure.error if failure is not None else "",
        failure.ended / 1000 if failure is not None else None,
        last.ended / 1000 if last is not None else None,
    )  # fmt: skip
