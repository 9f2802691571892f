"""Delayed jobs as the dashboard and ``lockgate.ops.delayed`` list them: each backend's
delayed sets are sorted sets scored by due time (server ms); these read their first
members and decode them (re-exported by :mod:`lockgate.backend.broker`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from lockgate.backend.connections import AsyncClient
from lockgate.core import codec
from lockgate.core.delays import put_back_reason
from lockgate.errors import SerializationError


@dataclass(frozen=True, slots=True)
class DelayedJob:
    """One delayed job.

    Attributes:
        id: the job's id.
        task: its task ("" when the stored job cannot be decoded).
        queue: its queue.
        level: its level (``*`` on the sorted backend when the job cannot be decoded).
        attempt: the attempt it will run as.
        due_at: when it becomes due (Unix time, the server's clock).
        enqueued_at: when it was first enqueued (Unix time, the producer's clock), or None.
        reason: why it waits (:func:`lockgate.core.delays.put_back_reason`; "" when the
            stored job cannot be decoded).
    """

    id: str
    task: str
    queue: str
    level: str
    attempt: int
    due_at: float
    enqueued_at: float | None
    reason: str = ""


async def soonest(client: AsyncClient, key: str, limit: int) -> list[tuple[bytes, float]]:
    """The first ``limit`` members of a sorted set of due times (server ms), with them."""
    pairs = await client.zrange(key, 0, limit - 1, withscores=True)
    return [(member, float(score)) for member, score in cast(list[tuple[bytes, Any]], pairs)]


def delayed_job(
    data: bytes | str, due_ms: float, queue: str, level: str, job_id: str = "?"
) -> DelayedJob:
    """A stored delayed job due at ``due_ms`` (pure); one that cannot be decoded is
    listed by where it waits (``queue``, ``level``) and ``job_id``."""
    try:
        job = codec.decode(data)
    except SerializationError:
        return DelayedJob(job_id, "", queue, level, 0, due_ms / 1000, None)
    return DelayedJob(
        job.id, job.task, job.queue, job.level, job.attempt, due_ms / 1000, job.enqueued or None,
        put_back_reason(job),
    )  # fmt: skip


def soonest_first(jobs: Sequence[DelayedJob], limit: int) -> list[DelayedJob]:
    """The ``limit`` delayed jobs due soonest, soonest first (pure; ties keep their order)."""
    return sorted(jobs, key=lambda job: job.due_at)[:limit]
