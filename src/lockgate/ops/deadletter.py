"""The dead-letter queue: what goes into it; listing, replaying, trimming, purging it.

Each dead letter is an entry of the namespace's dead-letter stream with the job as it was
stored and why it died (a ``secret_args`` task's arguments masked in what is shown, see
:class:`DeadLetter`). Replay enqueues the stored job again under its own job id, with
attempt 1 and a new enqueue time, and deletes the letter, in one script call that does
nothing when the letter is gone: two replays of one letter run its job once.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import msgspec

from lockgate.api.app import App
from lockgate.backend.broker import Outgoing, text
from lockgate.backend.dead_store import ReplayOutcome
from lockgate.core import codec
from lockgate.core.masking import is_secret, shown_job
from lockgate.errors import ConfigError, SerializationError

STREAM_ID = re.compile(r"^\d+(-\d+)?$")
FIELDS = (
    "job_id", "task", "reason", "error_type", "error", "traceback", "attempt", "deliveries",
    "queue", "level", "origin", "entry", "enqueued_at", "failed_at", "job",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One entry of the dead-letter queue.

    ``job`` is the stored job's JSON as a display may show it: a ``secret_args`` task's
    (``secret``: the job says so, or the listing App declares its task so) with its
    arguments masked (:func:`lockgate.core.masking.shown_job`);
    ``error`` and ``traceback`` are as raised. Replays enqueue the job as stored.
    """

    id: str
    job_id: str
    task: str
    reason: str
    error_type: str
    error: str
    traceback: str
    attempt: int
    deliveries: int
    queue: str
    level: str
    origin: str
    entry: str
    enqueued_at: float | None
    failed_at: float | None
    job: str
    secret: bool = False
    stored: str = field(default="", repr=False)  # the job as stored, for replays

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the job as shown, not as stored)."""
        found = asdict(self)
        del found["stored"]
        return found


def _number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def _parse(app: App, entry_id: Any, flat: Any) -> DeadLetter:
    values = {text(k): text(v) for k, v in flat.items()}
    get = values.get
    stored = get("job", "")
    shown, secret = shown_job(stored, is_secret(False, get("task", ""), app.tasks))
    return DeadLetter(
        id=text(entry_id),
        job_id=get("job_id", "?"),
        task=get("task", ""),
        reason=get("reason", ""),
        error_type=get("error_type", ""),
        error=get("error", ""),
        traceback=get("traceback", ""),
        attempt=int(get("attempt", "0") or 0),
        deliveries=int(get("deliveries", "0") or 0),
        queue=get("queue", ""),
        level=get("level", ""),
        origin=get("origin", ""),
        entry=get("entry", ""),
        enqueued_at=_number(get("enqueued_at", "")),
        failed_at=_number(get("failed_at", "")),
        job=shown,
        secret=secret,
        stored=stored,
    )


def list_dead(app: App, limit: int = 1000) -> list[DeadLetter]:
    """The oldest ``limit`` dead letters, oldest first."""
    entries = app.store.dead.entries(count=limit)
    return [_parse(app, entry_id, fields) for entry_id, fields in entries]


def show_dead(app: App, entry_id: str) -> DeadLetter | None:
    """One dead letter by its id, or None (also for a string that is no letter id: a
    stream entry id, ``<partition>/<entry id>`` in a partitioned namespace)."""
    if not STREAM_ID.match(entry_id.rpartition("/")[2]):
        return None
    entries = app.store.dead.entry(entry_id)
    return _parse(app, *entries[0]) if entries else None


@dataclass(frozen=True, slots=True)
class Replayed:
    """What a replay did to one dead letter.

    Attributes:
        id: the letter's id.
        job_id: its job's id.
        outcome: ``enqueued`` (this replay enqueued the job and deleted the letter),
            ``taken`` (a job with its id is queued or running; the letter stays), ``bad``
            (the letter cannot be replayed as asked, see ``detail``; it stays) or
            ``gone`` (the letter was no longer there: replayed or removed by someone
            else; nothing done).
        detail: why, for every outcome but ``enqueued``.
    """

    id: str
    job_id: str
    outcome: str
    detail: str = ""


DETAILS: dict[ReplayOutcome, str] = {
    "taken": "a job with this id is queued",
    "gone": "replayed or removed by someone else",
    "elsewhere": "the letter is not in its job's partition",
}


class _Refused(Exception):
    """A dead letter that cannot be replayed as asked (it stays put)."""

    def __init__(self, job_id: str, detail: str) -> None:
        super().__init__(detail)
        self.job_id = job_id
        self.detail = detail


def _unserved(app: App, queue: str) -> str:
    return f"queue {queue!r} is not served by this app (served: {', '.join(app.queues)})"


def _renewed(app: App, letter: DeadLetter, level: str | None, queue: str | None) -> Outgoing:
    """The job to enqueue again for ``letter``: its stored job with attempt 1 and a new
    enqueue time (on ``level`` and ``queue`` when given), every other field it carries
    kept but those of the last attempt alone (``waits``, ``rate_reserved``); encoded.

    Raises:
        _Refused: undecodable job, unknown task, a queue or level no worker of this app
            reads (enqueued there, it would never run and its id would stay taken), or a
            job over the app's ``max_payload_bytes``.
    """
    try:
        job = codec.decode(letter.stored or letter.job)
    except SerializationError as e:
        raise _Refused(letter.job_id, str(e)) from None
    if job.task not in app.tasks:
        raise _Refused(job.id, f"unknown task {job.task!r}")
    if job.flow is not None and not app.store.flows.summary(job.flow).total:
        # Its run would resume nothing: the flow's records (who waits for it) are gone.
        raise _Refused(job.id, f"its flow {job.flow!r} expired (App(flow_ttl=...))")
    target_queue, target_level = queue or job.queue, level or job.level
    problems, hints = [], []
    if target_queue not in app.queues:
        problems.append(_unserved(app, target_queue))
        hints.append("--queue QUEUE")
    if target_level not in app.levels.names:
        declared = ", ".join(app.levels.names)
        problems.append(
            f"level {target_level!r} is not declared by this app (declared: {declared})"
        )
        hints.append("--level LEVEL")
    if problems:
        raise _Refused(job.id, f"{'; '.join(problems)}; replay with {' '.join(hints)}")
    # What described the last attempt (its put-backs behind a busy claim, the rate
    # limiter's reservation of its start) goes with it: the replay is a first attempt.
    renewed = msgspec.structs.replace(
        job, queue=target_queue, level=target_level, attempt=1, enqueued=time.time(),
        waits=0, rate_reserved=False, key_reserved=False,
    )  # fmt: skip
    try:
        data = codec.encode(renewed)
    except SerializationError as e:
        raise _Refused(job.id, str(e)) from None
    if len(data) > app.max_payload_bytes:
        raise _Refused(job.id, f"{len(data)} bytes encoded, over the limit of "
                               f"{app.max_payload_bytes}")  # fmt: skip
    return Outgoing(renewed, data, limited=app.limited_task(job.task))


def replay(
    app: App, letters: Sequence[DeadLetter], *, level: str | None = None, queue: str | None = None
) -> list[Replayed]:
    """Enqueue dead letters again under their own job ids, and remove the replayed ones.

    Each letter that is still there is deleted and its job enqueued in one script call
    (on the app's backend, in the letter's partition); one that is gone is left alone, so
    replays of the same letters at once (two operators, a CLI and the dashboard) enqueue
    each job once, and only the replay that enqueued it reports ``enqueued``. The job is
    the letter's stored job with attempt 1 and a new enqueue time, every other field kept.
    A letter stays put (outcome ``bad``) when its job cannot be decoded, its task is
    unknown here, its queue or level is not one this app's workers read, or it is a job
    of a flow whose records expired (its run would resume nothing); ``taken``
    when a job with its id is queued or running.

    Args:
        app: the app whose tasks, queues and levels the jobs must fit.
        letters: the dead letters to replay.
        level: put every replayed job on this level instead of its own (e.g. for letters
            of a level the app no longer declares).
        queue: put every replayed job on this queue instead of its own (e.g. for a task
            that moved to another queue).

    Returns:
        One :class:`Replayed` per letter, in order.

    Raises:
        ConfigError: ``level`` is not declared by the app, or ``queue`` is not one of
            ``app.queues`` (nothing is replayed).
        OutcomeUnknown: a letter's job got no reply once sent: it may be queued (its id
            is on ``job_ids``); the letter stays, the letters before it were replayed.
            Replayed again while that job is queued, it comes back ``taken``.
        ConnectionFailed: Redis cannot be reached.
    """
    if level is not None:
        app.levels.index(level)
    if queue is not None and queue not in app.queues:
        raise ConfigError(_unserved(app, queue))
    renewed: dict[int, Outgoing] = {}
    refused: dict[int, Replayed] = {}
    for position, letter in enumerate(letters):
        try:
            renewed[position] = _renewed(app, letter, level, queue)
        except _Refused as e:
            refused[position] = Replayed(letter.id, e.job_id, "bad", e.detail)
    outcomes = app.store.dead.replay([(letters[i].id, job) for i, job in renewed.items()])
    replayed = {
        position: _reported(letters[position].id, renewed[position].job.id, outcome)
        for position, outcome in zip(renewed, outcomes, strict=True)
    }
    return [refused.get(position) or replayed[position] for position in range(len(letters))]


def _reported(letter_id: str, job_id: str, outcome: ReplayOutcome) -> Replayed:
    """What a replay reports for a letter whose job it sent (pure)."""
    if outcome == "enqueued":
        return Replayed(letter_id, job_id, outcome)
    # A letter outside its job's partition cannot be replayed: as bad as an unknown task.
    return Replayed(letter_id, job_id, "bad" if outcome == "elsewhere" else outcome,
                    DETAILS[outcome])  # fmt: skip


def trim_args(app: App) -> list[int]:
    """ARGV of the scripts that trim the dead-letter stream (pure).

    Returns:
        ``[max entries, max age in ms]`` from the app's ``dead_letter_max_len`` (shared
        by its partitions' streams, see :mod:`lockgate.backend.dead_store`) and
        ``dead_letter_max_age``; 0 means no limit.
    """
    return app.store.dead.trim_args(app.dead_letter_max_len, app.dead_letter_max_age_ms)


def trim(app: App) -> int:
    """Trim the dead letters to the app's ``dead_letter_max_len`` and ``dead_letter_max_age``.

    Trimming is approximate, as when letters are added: whole stream nodes go, so up to a
    node's worth (100 by default) past a limit may stay. Ages follow the server's clock.
    Each script call removes a bounded amount, so a large backlog is worked off in several
    calls without blocking Redis.

    Returns:
        How many dead letters were removed.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    return app.store.dead.trim(*trim_args(app))


def purge(app: App) -> int:
    """Delete every dead letter there is when the purge starts.

    Deletes in chunks of the oldest :data:`lockgate.backend.store.PURGE_CHUNK` letters, each one
    atomic script call, never one DEL that blocks Redis on a huge stream. Letters
    dead-lettered while it runs stay.

    Returns:
        How many dead letters were deleted.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    return app.store.dead.purge()


def count_dead(app: App) -> int:
    """How many dead letters there are."""
    return app.store.dead.count()
