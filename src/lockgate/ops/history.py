"""Recent ends per task, and the per-task table: shared by the dashboard and anything that
wants them.

Each worker's settle call of a run keeps a short entry of it (job id, when it ended, run
time, attempt, a failure's error cut to 200 characters; never its arguments or result)
in a capped list of its task and outcome, the newest 1,000 per partition (see
:mod:`lockgate.core.history` and ``lua/_history.lua``). These readers read bounded
windows of those lists, whatever the queues hold.
"""

from __future__ import annotations

import time

from lockgate.api.app import App
from lockgate.backend import history_store
from lockgate.core.history import (
    CODES,
    KEEP,
    OUTCOMES,
    EndEntry,
    EndOutcome,
    PackedEnd,
    TaskRow,
    end_entry,
    merged,
    newest,
    task_row,
    unpack_ends,
)
from lockgate.errors import ConfigError

__all__ = ["OUTCOMES", "EndEntry", "EndOutcome", "TaskRow", "recent_ends", "task_names",
           "task_table"]  # fmt: skip


async def task_names(app: App) -> list[str]:
    """The app's registered tasks and those with recent ends (``?``: jobs of tasks no
    worker knew), sorted.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    return sorted(set(app.tasks) | await history_store.task_names(app.store))


async def _ends(
    app: App, tasks: list[str], outcomes: tuple[EndOutcome, ...], limit: int
) -> dict[str, dict[EndOutcome, list[PackedEnd]]]:
    """Each task's newest ``limit`` ends of each outcome, newest first (partitions merged)."""
    wanted = [(task, CODES[outcome]) for task in tasks for outcome in outcomes]
    raw = await history_store.read_ends(app.store, wanted, limit)
    return {
        task: {
            outcome: merged([unpack_ends(part) for part in raw[task, CODES[outcome]]], limit)
            for outcome in outcomes
        }
        for task in tasks
    }


async def task_table(app: App, *, now: float | None = None) -> list[TaskRow]:
    """One row per task (:func:`task_names`): ends kept of each outcome, jobs/s done and
    failed over the window the kept ends cover, run time p50 and p99 of those ends, and
    the newest failure's error.

    Args:
        app: the App whose namespace to read.
        now: the time the rates run to (default: now).

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    tasks = await task_names(app)
    ends = await _ends(app, tasks, OUTCOMES, KEEP)
    at = time.time() if now is None else now
    return [task_row(task, ends[task], at) for task in tasks]


async def recent_ends(
    app: App, task: str, outcome: EndOutcome | None = None, limit: int = 100
) -> list[EndEntry]:
    """The newest ends of ``task``, newest first.

    Args:
        app: the App whose namespace to read.
        task: a task's name (``?`` for jobs of tasks no worker knew).
        outcome: only the ends of this outcome (done, retried, dead); None: every one.
        limit: at most this many (1 to 1,000).

    Raises:
        ConfigError: an unknown outcome, or a limit out of range.
        ConnectionFailed: Redis cannot be reached.
    """
    if outcome is not None and outcome not in OUTCOMES:
        raise ConfigError(f"unknown outcome {outcome!r}; one of: {', '.join(OUTCOMES)}")
    if not 1 <= limit <= KEEP:
        raise ConfigError(f"limit must be 1 to {KEEP}, got {limit}")
    outcomes = OUTCOMES if outcome is None else (outcome,)
    ends = await _ends(app, [task], outcomes, limit)
    found = [end_entry(e, task, kind) for kind, packed in ends[task].items() for e in packed]
    return newest(found, limit)
