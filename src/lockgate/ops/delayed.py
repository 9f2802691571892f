"""Read-only listing of delayed jobs (retries and delayed enqueues waiting for a due time).

Both backends keep delayed jobs in sorted sets scored by due time (server milliseconds):
the streams backend one per queue and level, holding the encoded jobs; the sorted backend
one per queue, holding job ids whose jobs are in the queue's payloads hash. Reads only: a
job that becomes due meanwhile is simply missing or still listed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from lockgate.api.app import App
from lockgate.backend.broker import text
from lockgate.backend.connections import AsyncClient
from lockgate.backend.faults import translated
from lockgate.core import codec
from lockgate.errors import SerializationError

__all__ = ["DelayedJob", "delayed_jobs"]


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
    """

    id: str
    task: str
    queue: str
    level: str
    attempt: int
    due_at: float
    enqueued_at: float | None


def _job(raw: Any, due_ms: float, queue: str, level: str, job_id: str = "?") -> DelayedJob:
    try:
        job = codec.decode(raw if isinstance(raw, bytes) else text(raw))
    except SerializationError:
        return DelayedJob(job_id, "", queue, level, 0, due_ms / 1000, None)
    return DelayedJob(
        job.id, job.task, job.queue, job.level, job.attempt, due_ms / 1000, job.enqueued or None
    )


async def delayed_jobs(
    app: App, limit: int = 100, queues: Sequence[str] | None = None
) -> list[DelayedJob]:
    """The delayed jobs due soonest, soonest first.

    Args:
        app: whose namespace and backend to read.
        limit: at most this many jobs (also read per queue and level).
        queues: the queues to read (default: the app's).

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    client, _ = await app.store.async_connection()
    keys = app.keys
    found: list[DelayedJob] = []
    with translated(app.store.url):
        for queue in queues or app.queues:
            if app.backend == "sorted":
                q = keys.sorted_keys(queue)
                ids = await _soonest(client, q.delayed, limit)
                if not ids:
                    continue
                # HGETs, not one HMGET: HGET is on the README's ACL list, so the
                # dashboard may run as the workers' user (one key: one node, one trip).
                pipe = client.pipeline(transaction=False)
                for member, _ in ids:
                    pipe.hget(q.payloads, member)
                payloads = await pipe.execute()
                for (member, due_ms), raw in zip(ids, payloads, strict=True):
                    if raw is not None:
                        found.append(_job(raw, due_ms, queue, "*", text(member)))
                continue
            for part in app.store.layout.parts:
                for level in app.levels.names:
                    entries = await _soonest(client, part.delayed(queue, level), limit)
                    found.extend(_job(raw, due_ms, queue, level) for raw, due_ms in entries)
    found.sort(key=lambda job: job.due_at)
    return found[:limit]


async def _soonest(client: AsyncClient, key: str, limit: int) -> list[tuple[bytes, float]]:
    """The first ``limit`` members of a sorted set of due times, with their scores."""
    pairs = await client.zrange(key, 0, limit - 1, withscores=True)
    return [(member, float(score)) for member, score in cast(list[tuple[bytes, Any]], pairs)]
