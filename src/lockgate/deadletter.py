"""The dead-letter queue: what goes into it, and listing, replaying and purging it.

Each dead letter is an entry of the namespace's dead-letter stream with the job as it was
stored and why it died. Replay enqueues the job again under its own job id (attempt 1).
"""

from __future__ import annotations

import re
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from lockgate import codec
from lockgate.app import App, Message
from lockgate.broker import Delivery, text, translated
from lockgate.errors import SerializationError

STREAM_ID = re.compile(r"^\d+(-\d+)?$")
FIELDS = (
    "job_id", "task", "reason", "error_type", "error", "traceback", "attempt", "deliveries",
    "queue", "level", "origin", "entry", "enqueued_at", "failed_at", "job",
)  # fmt: skip


def record(
    delivery: Delivery, reason: str, error: BaseException | None = None
) -> dict[str, str | bytes]:
    """The fields of a dead letter for ``delivery`` (pure)."""
    job = delivery.job
    fields: dict[str, str | bytes] = {
        "job_id": job.id if job else delivery.job_id,
        "task": job.task if job else "",
        "reason": reason,
        "error_type": type(error).__name__ if error else "",
        "error": str(error) if error else (delivery.error or ""),
        "traceback": "".join(traceback.format_exception(error)) if error else "",
        "attempt": str(job.attempt if job else 0),
        "deliveries": str(delivery.deliveries),
        "queue": delivery.queue,
        "level": job.level if job else "",
        "origin": delivery.source,
        "entry": delivery.ref,
        "enqueued_at": f"{job.enqueued:.3f}" if job else "",
        "failed_at": f"{time.time():.3f}",
    }
    fields["job"] = delivery.raw if delivery.raw is not None else b""
    return fields


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One entry of the dead-letter queue."""

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

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def _number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def _parse(entry_id: Any, flat: Any) -> DeadLetter:
    values = {text(k): text(v) for k, v in flat.items()}
    get = values.get
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
        job=get("job", ""),
    )


def list_dead(app: App, limit: int = 1000) -> list[DeadLetter]:
    """The oldest ``limit`` dead letters, oldest first."""
    client, _ = app.sync_connection()
    with translated(app.redis_url):
        entries: list[Any] = client.xrange(app.keys.dead(), count=limit) or []
    return [_parse(entry_id, fields) for entry_id, fields in entries]


def show_dead(app: App, entry_id: str) -> DeadLetter | None:
    """One dead letter by its id, or None (also for a string that is no stream id)."""
    if not STREAM_ID.match(entry_id):
        return None
    client, _ = app.sync_connection()
    with translated(app.redis_url):
        entries: list[Any] = (
            client.xrange(app.keys.dead(), min=entry_id, max=entry_id, count=1) or []
        )
    return _parse(*entries[0]) if entries else None


@dataclass(frozen=True, slots=True)
class Replayed:
    """What a replay did to one dead letter: ``enqueued``, ``taken`` (id queued), ``bad``."""

    id: str
    job_id: str
    outcome: str
    detail: str = ""


def replay(app: App, letters: Sequence[DeadLetter]) -> list[Replayed]:
    """Enqueue dead letters again under their own job ids, and remove the replayed ones.

    A letter whose job cannot be decoded or whose task is unknown here stays put.
    """
    client, _ = app.sync_connection()
    results = []
    for letter in letters:
        try:
            job = codec.decode(letter.job)
        except SerializationError as e:
            results.append(Replayed(letter.id, letter.job_id, "bad", str(e)))
            continue
        if job.task not in app.tasks:
            results.append(Replayed(letter.id, job.id, "bad", f"unknown task {job.task!r}"))
            continue
        fresh = codec.Job(
            id=job.id, task=job.task, queue=job.queue, level=job.level,
            args=job.args, kwargs=job.kwargs, attempt=1, enqueued=time.time(),
        )  # fmt: skip
        created = app.enqueue_many([Message(fresh)])[0].created
        if not created:
            results.append(Replayed(letter.id, job.id, "taken", "a job with this id is queued"))
            continue
        with translated(app.redis_url):
            client.xdel(app.keys.dead(), letter.id)
        results.append(Replayed(letter.id, job.id, "enqueued"))
    return results


def purge(app: App) -> int:
    """Delete every dead letter; returns how many there were."""
    client, _ = app.sync_connection()
    with translated(app.redis_url):
        count = int(client.xlen(app.keys.dead()))
        client.delete(app.keys.dead())
    return count


def count_dead(app: App) -> int:
    """How many dead letters there are."""
    client, _ = app.sync_connection()
    with translated(app.redis_url):
        return int(client.xlen(app.keys.dead()))
