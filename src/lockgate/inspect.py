"""Read-only queries about queues, shared by the CLI and anything that wants numbers."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from lockgate import codec
from lockgate.app import App
from lockgate.broker import text, translated
from lockgate.errors import SerializationError
from lockgate.keys import GROUP
from lockgate.lua import AsyncScripts, ScriptCall


@dataclass(frozen=True, slots=True)
class LevelStats:
    """Counts for one queue and level (``level`` is ``*`` on the sorted backend).

    Attributes:
        waiting: jobs not yet handed to a worker.
        pending: jobs handed to a worker and not finished (in flight).
        consumers: workers known to the consumer group (None on the sorted backend).
        oldest_wait_ms: how long the next waiting job has waited (None when none waits).
    """

    queue: str
    level: str
    waiting: int
    pending: int
    consumers: int | None
    oldest_wait_ms: int | None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def _entry_ms(entry_id: str) -> int:
    return int(entry_id.split("-", 1)[0])


async def queue_stats(app: App, queues: tuple[str, ...] | None = None) -> list[LevelStats]:
    """Per queue and level: waiting, pending, consumers and the oldest wait.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    _, scripts = app.async_connection()
    queues = queues or app.queues
    with translated(app.redis_url):
        if app.backend == "sorted":
            return [await _sorted_stats(app, scripts, queue) for queue in queues]
        return await _stream_stats(app, scripts, queues)


async def _stream_stats(
    app: App, scripts: AsyncScripts, queues: tuple[str, ...]
) -> list[LevelStats]:
    layout = [(queue, level) for queue in queues for level in app.levels.names]
    streams = [app.keys.stream(queue, level) for queue, level in layout]
    now, rows = await scripts.run(ScriptCall("stats_stream", streams, [GROUP]))
    stats = []
    for i, (queue, level) in enumerate(layout):
        length, pending, consumers, oldest = rows[4 * i : 4 * i + 4]
        oldest_id = text(oldest)
        age = max(0, now - _entry_ms(oldest_id)) if oldest_id else None
        stats.append(LevelStats(queue, level, length - pending, pending, consumers, age))
    return stats


async def _sorted_stats(app: App, scripts: AsyncScripts, queue: str) -> LevelStats:
    q = app.keys.sorted_keys(queue)
    call = ScriptCall("stats_sorted", [q.waiting, q.inflight, q.payloads], [])
    now, waiting, inflight, payload = await scripts.run(call)
    age = None
    if payload:
        try:
            age = max(0, now - round(codec.decode(payload).enqueued * 1000))
        except SerializationError:
            age = None
    return LevelStats(queue, "*", waiting, inflight, None, age)
