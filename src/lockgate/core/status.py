"""A job's status and result, as values (pure, no I/O).

Where a job is lives in its marker, which the scripts already write on the hot path (see
``lua/_marker.lua``): no status costs a write of its own. When a job ends, the worker's
one settle call turns the marker into a small final record (:class:`FinalRecord`, kept for
``App(status_ttl=...)``) and, for a task declared with ``keep_result``, writes a result
record (:class:`ResultRecord`, kept that long). Through msgspec, the codec of the jobs
themselves: typed, never pickle. A final record goes as a msgpack array of about 30 bytes
(:class:`PackedRecord`), so that the hashes that keep them stay compact (see
``lua/_status.lua``); the records lockgate 0.3 wrote, and those the cancel script writes,
are JSON objects, read as well.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

import msgspec

from lockgate.core import codec
from lockgate.core.outcome import ErrorInfo, Outcome
from lockgate.core.progress import decode_progress
from lockgate.core.records import decode_as, enc_hook
from lockgate.errors import JobCancelled, JobFailed, ResultUnavailable, SerializationError

Status = Literal["waiting", "delayed", "running", "done", "dead", "cancelled", "unknown"]
FINAL: tuple[Status, ...] = ("done", "dead", "cancelled")


class FinalRecord(
    msgspec.Struct,
    kw_only=True,
    omit_defaults=True,
    # One letter per field on the wire, and times in ms: one is kept per job ended in the
    # last status_ttl, so its size is the feature's memory.
    rename={
        "status": "s", "task": "t", "attempts": "a", "enqueued_at": "e", "started_at": "b",
        "finished_at": "f", "reason": "r", "key": "k",
    },
):  # fmt: skip
    """What is kept of a job once it ended (under ``Keys.status``, for ``status_ttl``)."""

    status: str
    task: str = ""
    attempts: int = 0
    enqueued_at: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    reason: str = ""
    key: str = ""


class PackedRecord(msgspec.Struct, array_like=True, omit_defaults=True):
    """A final record as the worker writes it: a msgpack array, times in whole ms, the
    later two as offsets (about 30 bytes, where the JSON object takes 90; a hash keeps
    its compact encoding only while every value is at most 64 bytes)."""

    status: str
    task: str = ""
    attempts: int = 0
    enqueued: int = 0  # ms since the epoch
    finished: int = 0  # ms after enqueued
    ran: int | None = None  # ms from the last run's start to the end; None: it never ran
    reason: str = ""
    key: str = ""  # the fairness key ("": none)


class ResultRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A job's result (``ok``) or its error, kept for its task's ``keep_result``."""

    ok: bool
    value: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))
    error: ErrorInfo | None = None
    cancelled: bool = False


_final_decoder = msgspec.json.Decoder(FinalRecord)
_packed_decoder = msgspec.msgpack.Decoder(PackedRecord)
_packed_encoder = msgspec.msgpack.Encoder()
_result_decoder = msgspec.json.Decoder(ResultRecord)


@dataclass(frozen=True, slots=True)
class JobInfo:
    """What is known of a job (``App.job``).

    Attributes:
        id: the job's id.
        status: waiting, delayed, running, done, dead, cancelled, or unknown (never
            enqueued, or ended longer ago than ``App(status_ttl=...)``).
        task: its task's name ("" when unknown).
        attempts: runs started so far (0 while its first waits).
        result: the return value, for a task declared with ``keep_result`` that ended done.
        error: what its last run raised, for such a task that ended dead (or why it was
            cancelled).
        enqueued_at: when it was enqueued (the producer's clock).
        started_at: when its last run started, once it ended (not known while it runs).
        finished_at: when it ended.
        reason: why it ended so (a dead letter's reason, "cancelled", "expired: ...").
        result_kept: whether a result record was read (``result`` and ``error`` are
            known).
        key: its fairness key (``@app.task(key_by=...)``); None: it has none, or it is
            not known (a record written before lockgate 0.4).
        queue: its queue while it waits or runs ("" once it ended: not recorded then).
        progress: the last value its task reported (``current_job().set_progress``),
            from 0.0 to 1.0, while it runs and after it ended (as long as its status is
            kept); None: never reported.
        progress_note: the note of that report; None: none.
    """

    id: str
    status: Status
    task: str = ""
    attempts: int = 0
    result: Any = None
    error: ErrorInfo | None = None
    enqueued_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    reason: str = ""
    result_kept: bool = False
    key: str | None = None
    queue: str = ""
    progress: float | None = None
    progress_note: str | None = None

    @property
    def finished(self) -> bool:
        """Whether the job ended (done, dead or cancelled)."""
        return self.status in FINAL


def final_status(outcome: Outcome) -> Status:
    """The status a settled outcome ends a job with."""
    if outcome.kind == "dead":
        return "dead"
    return "cancelled" if outcome.cancelled else "done"


def final_record(
    task: str, attempts: int, enqueued: float, started: float, finished: float,
    outcome: Outcome, key: str | None = None,
) -> bytes:  # fmt: skip
    """The final record of a job whose run ended with ``outcome`` (``started`` 0: it
    never ran; ``key``: its fairness key)."""
    enqueued_ms, finished_ms = round(enqueued * 1000), round(finished * 1000)
    record = PackedRecord(
        final_status(outcome), task, attempts, enqueued_ms, finished_ms - enqueued_ms,
        finished_ms - round(started * 1000) if started else None, outcome.reason, key or "",
    )  # fmt: skip
    return _packed_encoder.encode(record)


def read_final(data: bytes) -> FinalRecord:
    """A final record as written (pure): packed, or a JSON object (lockgate 0.3's, and the
    cancel script's).

    Raises:
        msgspec.DecodeError: neither.
    """
    if data[:1] == b"{":
        return _final_decoder.decode(data)
    packed = _packed_decoder.decode(data)
    finished = packed.enqueued + packed.finished
    return FinalRecord(
        status=packed.status, task=packed.task, attempts=packed.attempts,
        enqueued_at=packed.enqueued / 1000, finished_at=finished / 1000,
        started_at=(finished - packed.ran) / 1000 if packed.ran is not None else 0.0,
        reason=packed.reason, key=packed.key,
    )  # fmt: skip


def encode_result(value: Any) -> bytes:
    """A return value's JSON, for the result record (a record, Pydantic models included, as
    its JSON object; see :mod:`lockgate.core.records`).

    Raises:
        SerializationError: it has no JSON form, or nests deeper than ``codec.MAX_DEPTH``.
    """
    try:
        data = msgspec.json.encode(value, enc_hook=enc_hook)
    except Exception as e:  # TypeError, OverflowError, RecursionError...
        raise SerializationError(f"the return value has no JSON form: {e}") from e
    if not codec.depth_within(data):
        raise SerializationError(f"the return value nests deeper than {codec.MAX_DEPTH}")
    return data


def result_record(outcome: Outcome) -> bytes:
    """The result record of a settled outcome (its value was encoded by the runner)."""
    if outcome.kind == "dead":
        error = outcome.error or ErrorInfo("Failed", outcome.reason)
        return msgspec.json.encode(ResultRecord(ok=False, error=error))
    if outcome.cancelled:
        why = ErrorInfo("Cancelled", outcome.reason or "cancelled")
        return msgspec.json.encode(ResultRecord(ok=False, error=why, cancelled=True))
    raw = msgspec.Raw(outcome.result if outcome.result is not None else b"null")
    return msgspec.json.encode(ResultRecord(ok=True, value=raw))


def moment(stamp: float) -> datetime | None:
    """A Unix time as an aware UTC datetime; None for 0 (not known)."""
    return datetime.fromtimestamp(stamp, UTC) if stamp > 0 else None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def job_info(job_id: str, reply: list[Any], returns: Callable[[str], Any]) -> JobInfo:
    """Read the reply of the ``job_status`` script, and the job's stored progress.

    Args:
        job_id: the job asked about.
        reply: ``{state, data, result record, extra}`` (see ``lua/job_status.lua``),
            then, when read, the job's stored progress (see
            :func:`~lockgate.core.progress.decode_progress`).
        returns: the type a task's result decodes to (its return annotation), by task.
    """
    info = _job_info(job_id, reply[:4], returns)
    progress = decode_progress(reply[4]) if len(reply) > 4 else None
    if progress is None or info.status == "unknown":
        return info
    return replace(info, progress=progress[0], progress_note=progress[1])


def _job_info(job_id: str, reply: list[Any], returns: Callable[[str], Any]) -> JobInfo:
    state, data, result, _ = reply
    state = _text(state)
    if state == "final":
        record = read_final(data)
        status: Status = record.status if record.status in FINAL else "unknown"
        kept = _result(result, returns(record.task))
        value, error = kept if kept is not None else (None, None)
        return JobInfo(
            job_id, status, record.task, record.attempts, value, error,
            moment(record.enqueued_at), moment(record.started_at),
            moment(record.finished_at), record.reason, kept is not None, record.key or None,
        )  # fmt: skip
    if state == "kept":  # the status expired before the result: the result tells it
        kept = _result(result, Any)
        record_of = _result_decoder.decode(result)
        status = "done" if record_of.ok else "cancelled" if record_of.cancelled else "dead"
        value, error = kept if kept is not None else (None, None)
        return JobInfo(job_id, status, result=value, error=error, result_kept=True)
    if state == "unknown":
        return JobInfo(job_id, "unknown")
    status = "running" if state == "running" else "delayed" if state == "delayed" else "waiting"
    if not data:  # a marker lockgate 0.2 wrote: where, not what
        return JobInfo(job_id, status)
    try:
        job = codec.decode(data)
    except SerializationError:
        return JobInfo(job_id, status)
    attempts = job.attempt if status == "running" else job.attempt - 1
    return JobInfo(
        job_id, status, job.task, attempts, enqueued_at=moment(job.enqueued), key=job.key,
        queue=job.queue,
    )  # fmt: skip


def _result(data: Any, returns: Any) -> tuple[Any, ErrorInfo | None] | None:
    if not data:
        return None
    try:
        record = _result_decoder.decode(data)
    except msgspec.DecodeError:
        return None
    if not record.ok:
        return None, record.error
    try:
        return decode_as(record.value, returns), None
    except msgspec.DecodeError:  # stored by another version of the task: as it is
        return msgspec.json.decode(record.value), None


def outcome_of(info: JobInfo) -> Any:
    """The result of an ended job whose result was kept, or that failed or was cancelled.

    Raises:
        JobFailed: it was dead-lettered (its error: type name, message, traceback).
        JobCancelled: it was cancelled, or expired.
    """
    if info.status == "cancelled":
        error = info.error or ErrorInfo("Cancelled", info.reason or "cancelled")
        raise JobCancelled(info.id, error.type, error.message, error.traceback)
    if info.error is not None:
        raise JobFailed(info.id, info.error.type, info.error.message, info.error.traceback)
    if info.status == "dead":
        raise JobFailed(info.id, "Failed", info.reason or "dead-lettered")
    return info.result


def settled(info: JobInfo) -> bool:
    """Whether :func:`answer` can answer now: the job ended or is unknown."""
    return info.finished or info.status == "unknown"


def answer(info: JobInfo) -> Any:
    """The result of an ended (or unknown) job.

    Raises:
        JobFailed: it was dead-lettered (its error: type name, message, traceback).
        JobCancelled: it was cancelled, or expired.
        ResultUnavailable: it is unknown, or it ended done and no result is kept.
    """
    if info.status in ("dead", "cancelled") or info.result_kept:
        return outcome_of(info)
    raise unavailable(info)


class Poll:
    """The waits of a caller polling for a result: 5 ms doubling to 200 ms, never past
    ``timeout`` seconds (None: no limit)."""

    def __init__(self, timeout: float | None, job_id: str) -> None:
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._timeout = timeout
        self._job_id = job_id
        self._step = 0.005

    def next_wait(self) -> float:
        """Seconds to wait before looking again.

        Raises:
            TimeoutError: the timeout passed.
        """
        step, self._step = self._step, min(self._step * 2, 0.2)
        if self._deadline is None:
            return step
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"job {self._job_id!r} did not end within {self._timeout:g} s")
        return min(step, left)


def unavailable(info: JobInfo) -> ResultUnavailable:
    """Why a result cannot be had for a job that ended or is unknown."""
    if info.status == "unknown":
        return ResultUnavailable(
            f"job {info.id!r} is unknown: never enqueued, or it ended longer ago than "
            "App(status_ttl=...) keeps its status"
        )
    return ResultUnavailable(
        f"job {info.id!r} ended {info.status} but no result is kept: declare its task "
        "with keep_result=SECONDS (or the result expired)"
    )


class CancelOutcome(StrEnum):
    """What ``App.cancel`` did (a ``str``: ``"cancelled"``, ``"cancelling"``, ...).

    Its truth value says whether the job is being stopped, so ``if app.cancel(job_id):``
    reads as it did when ``cancel`` returned a bool.

    Attributes:
        CANCELLED: it had not started (waiting or delayed): it was removed and will not
            run; it ends ``cancelled`` and its id is free again.
        CANCELLING: it is running: its worker was asked to stop it (an async run gets
            ``CancelledError``, a sync one sees ``current_job().cancelled``).
        ENDED: it had ended already (done, dead or cancelled): nothing to do.
        UNKNOWN: no such job (never enqueued, or ended longer ago than
            ``App(status_ttl=...)`` keeps its status).
    """

    CANCELLED = "cancelled"
    CANCELLING = "cancelling"
    ENDED = "ended"
    UNKNOWN = "unknown"

    def __bool__(self) -> bool:
        return self in (CancelOutcome.CANCELLED, CancelOutcome.CANCELLING)


def cancel_outcome(answer: str, info: JobInfo | None) -> CancelOutcome:
    """What a cancel did, from the cancel script's answer and, when it found nothing to
    cancel (``gone``), the job's status read after it.

    Args:
        answer: ``cancelled``, ``running`` or ``gone`` (see ``lua/cancel_job.lua``).
        info: the job's status, read after a ``gone`` (None otherwise).
    """
    if answer == "cancelled":
        return CancelOutcome.CANCELLED
    if answer == "running":
        return CancelOutcome.CANCELLING
    return CancelOutcome.ENDED if info is not None and info.finished else CancelOutcome.UNKNOWN
