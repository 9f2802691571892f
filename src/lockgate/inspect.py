"""Read-only queries about queues, shared by the CLI and anything that wants numbers."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from lockgate import codec
from lockgate.app import App
from lockgate.broker import text
from lockgate.errors import SerializationError
from lockgate.faults import translated
from lockgate.keys import GROUP
from lockgate.lua import AsyncScripts, ScriptCall


@dataclass(frozen=True, slots=True)
class LevelStats:
    """Counts for one queue and level (``level`` is ``*`` on the sorted backend).

    Attributes:
        length: jobs in the queue: waiting plus pending.
        waiting: jobs not yet handed to a worker.
        pending: jobs handed to a worker and not finished (in flight).
        delayed: jobs waiting for a due time (retries, delayed enqueues).
        consumers: workers known to the consumer group (None on the sorted backend).
        oldest_wait_ms: how long the next waiting job has waited (None when none waits).
    """

    queue: str
    level: str
    length: int
    waiting: int
    pending: int
    delayed: int
    consumers: int | None
    oldest_wait_ms: int | None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Stats:
    """A namespace's counts: per queue and level, and the dead-letter queue's length."""

    namespace: str
    backend: str
    levels: list[LevelStats]
    dead_letters: int

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "namespace": self.namespace,
            "backend": self.backend,
            "levels": [row.as_dict() for row in self.levels],
            "dead_letters": self.dead_letters,
        }


def _entry_ms(entry_id: str) -> int:
    return int(entry_id.split("-", 1)[0])


async def queue_stats(app: App, queues: tuple[str, ...] | None = None) -> Stats:
    """Per queue and level: length, waiting, pending, delayed, consumers, oldest wait.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    client, scripts = await app.async_connection()
    queues = queues or app.queues
    with translated(app.redis_url):
        if app.backend == "sorted":
            rows = [await _sorted_stats(app, scripts, queue) for queue in queues]
        else:
            rows = await _stream_stats(app, scripts, queues)
        dead = int(await client.xlen(app.keys.dead()))
    return Stats(app.namespace, app.backend, rows, dead)


async def _stream_stats(
    app: App, scripts: AsyncScripts, queues: tuple[str, ...]
) -> list[LevelStats]:
    layout = [(queue, level) for queue in queues for level in app.levels.names]
    streams = [app.keys.stream(queue, level) for queue, level in layout]
    delayed = [app.keys.delayed(queue, level) for queue, level in layout]
    now, rows = await scripts.run(ScriptCall("stats_stream", streams + delayed, [GROUP]))
    stats = []
    for i, (queue, level) in enumerate(layout):
        length, pending, consumers, oldest, waiting_later = rows[5 * i : 5 * i + 5]
        oldest_id = text(oldest)
        age = max(0, now - _entry_ms(oldest_id)) if oldest_id else None
        stats.append(
            LevelStats(
                queue, level, length, length - pending, pending, waiting_later, consumers, age
            )
        )
    return stats


async def _sorted_stats(app: App, scripts: AsyncScripts, queue: str) -> LevelStats:
    q = app.keys.sorted_keys(queue)
    call = ScriptCall("stats_sorted", [q.waiting, q.inflight, q.payloads, q.delayed], [])
    now, waiting, inflight, payload, delayed = await scripts.run(call)
    age = None
    if payload:
        try:
            age = max(0, now - round(codec.decode(payload).enqueued * 1000))
        except SerializationError:
            age = None
    return LevelStats(queue, "*", waiting + inflight, waiting, inflight, delayed, None, age)
