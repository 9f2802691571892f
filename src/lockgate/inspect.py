"""Read-only queries about queues, shared by the CLI and anything that wants numbers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lockgate.app import App
from lockgate.broker import LevelStats

__all__ = ["LevelStats", "Stats", "queue_stats"]


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


async def queue_stats(app: App, queues: tuple[str, ...] | None = None) -> Stats:
    """Per queue and level: length, waiting, pending, delayed, consumers, oldest wait.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    rows, dead = await app.store.stats(queues or app.queues)
    return Stats(app.namespace, app.backend, rows, dead)
