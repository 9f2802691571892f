"""Jobs one by one, for the dashboard's job pages: a queue's first waiting jobs, the
running ones, one job with its arguments, timings and dead letter, and the queues that
exist now.

Each read is a bounded window (see :mod:`lockgate.backend.windows`): a page of
:data:`PAGE` jobs costs the same however long the queue. Arguments are shown as their JSON
cut to :data:`ARGS_WIDTH` characters, and a secret job's (``@app.task(secret_args=True)``)
arguments and result are masked (:mod:`lockgate.core.masking`) before they leave here: a
job that says so, or whose task the viewing App declares so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec

from lockgate.api.app import App
from lockgate.backend import windows
from lockgate.backend.broker import decode_job
from lockgate.backend.partition_record import queue_names
from lockgate.backend.windows import ListedJob, RunningJob
from lockgate.core.codec import Job
from lockgate.core.delays import put_back_reason
from lockgate.core.masking import is_secret, mask_args, mask_value
from lockgate.core.outcome import ErrorInfo
from lockgate.core.records import enc_hook
from lockgate.core.status import JobInfo, Status
from lockgate.ops.inspect import live_workers
from lockgate.ops.progress import read_progress

__all__ = [
    "ARGS_WIDTH", "PAGE", "JobPage", "JobRow", "WaitingPage", "job_page", "job_secret",
    "known_queues", "put_back_reason", "running_jobs", "shown_args", "stored_job",
    "waiting_jobs",
]  # fmt: skip
PAGE = 50  # jobs per page
ARGS_WIDTH = 80  # characters of a job's arguments' JSON shown in a list
RUNNING_PAGE = 200  # running jobs listed at most
LIVE: tuple[Status, ...] = ("waiting", "delayed", "running")


def shown_args(job: Job, width: int | None = ARGS_WIDTH, secret: bool = False) -> str:
    """A job's arguments as a display shows them (pure): the JSON of its positional and
    keyword arguments (``[1, "a"] {"k": 2}``), masked for a secret job (``Job.secret``,
    or ``secret``: the viewer declares its task so), cut to ``width`` characters with
    ``…`` (None: whole)."""
    args, kwargs = mask_args(job.args, job.kwargs, job.secret or secret)
    shown = _json(args)
    if kwargs:
        shown += " " + _json(kwargs)
    if width is not None and len(shown) > width:
        return shown[: max(0, width - 1)] + "…"
    return shown


def _json(value: Any) -> str:
    try:
        return msgspec.json.encode(value, enc_hook=enc_hook).decode(errors="replace")
    except (TypeError, msgspec.EncodeError):
        return repr(value)


@dataclass(frozen=True, slots=True)
class JobRow:
    """One job of a list page.

    Attributes:
        id: its id.
        task: its task ("" when its entry cannot be decoded).
        queue, level: where it waits or runs.
        args: its arguments, cut and masked (:func:`shown_args`).
        enqueued_at: when it was enqueued (Unix time), None when not known.
        attempt: the attempt it is (or will run as).
        key: its fairness key, None without one.
        behind: a keyed lane's head: the lane's jobs waiting behind it.
        worker: running: the worker it was handed to.
        deliveries: running: how many times it was handed out.
        started_at: running: when its run started (Unix time), None when not known.
        seen: running: seconds since its worker last said it runs it, None when not known.
        progress: running: its progress (0 to 1) and note, None when never set.
    """

    id: str
    task: str
    queue: str
    level: str
    args: str
    enqueued_at: float | None
    attempt: int
    key: str | None = None
    behind: int = 0
    worker: str = ""
    deliveries: int = 0
    started_at: float | None = None
    seen: float | None = None
    progress: tuple[float, str | None] | None = None


def _row(
    app: App, job_id: str, job: Job | None, queue: str, level: str, **more: Any
) -> JobRow:  # fmt: skip
    if job is None:
        return JobRow(job_id, "", queue, level, "(cannot be decoded)", None, 0, **more)
    shown = shown_args(job, secret=is_secret(job.secret, job.task, app.tasks))
    return JobRow(
        job.id, job.task, job.queue, job.level, shown, job.enqueued or None, job.attempt,
        job.key, **more,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class WaitingPage:
    """A window of one queue and level's waiting jobs.

    Attributes:
        jobs: the waiting jobs from the cursor, in the order they are taken (the jobs
            without a fairness key, on the streams backend; every level's, in rank
            order, on the sorted backend, a keyed job there being its lane's head).
        next: the cursor of the next page, None at the end.
        lanes: streams backend: the fairness keys' lanes from ``lanes_at``, each as its
            first job (``behind``: the jobs behind it).
        lanes_next: the offset of the next page of lanes, None at the end.
    """

    queue: str
    level: str
    jobs: list[JobRow]
    next: str | None
    lanes: list[JobRow] = field(default_factory=list)
    lanes_next: str | None = None


async def waiting_jobs(
    app: App, queue: str, level: str, after: str | None = None, lanes_at: int = 0,
    count: int = PAGE,
) -> WaitingPage:  # fmt: skip
    """The first ``count`` waiting jobs of ``queue`` and ``level`` (``*``: every level, the
    sorted backend) after cursor ``after``, and ``count`` fairness lanes from ``lanes_at``.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    window = await windows.waiting(app.store, queue, level, after, count)
    lanes = await windows.lanes(app.store, queue, level, lanes_at, count)
    return WaitingPage(
        queue, level, [_listed(app, item, queue, level) for item in window.jobs], window.next,
        [_listed(app, item, queue, level) for item in lanes.jobs], lanes.next,
    )  # fmt: skip


def _listed(app: App, item: ListedJob, queue: str, level: str) -> JobRow:
    return _row(app, item.job_id, item.job, queue, level, behind=item.behind)


async def running_jobs(app: App, queues: Sequence[str], count: int = RUNNING_PAGE) -> list[JobRow]:
    """Up to ``count`` running jobs of ``queues`` with their worker, start and progress.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    return await _running_rows(
        app, await windows.running(app.store, queues, app.levels.names, count)
    )


async def _running_rows(app: App, found: list[RunningJob]) -> list[JobRow]:
    """Rows of running jobs, with their progress and starts."""
    progress = await _progress(app, [job.job_id for job in found])
    # The workers' heartbeats name their runs with their starts (the streams backend
    # keeps none of its own).
    starts = {} if all(job.started_ms is not None for job in found) else {
        job_id: started for info in await live_workers(app) for job_id, started in info.jobs
    }  # fmt: skip
    return [
        _running_row(app, job, progress.get(job.job_id), starts.get(job.job_id)) for job in found
    ]


def _running_row(
    app: App, job: RunningJob, progress: tuple[float, str | None] | None, noted: float | None
) -> JobRow:
    queue = job.job.queue if job.job is not None else "?"
    level = job.job.level if job.job is not None else "?"
    started = job.started_ms / 1000 if job.started_ms is not None else noted
    seen = job.seen_ms / 1000 if job.seen_ms is not None else None
    return _row(
        app, job.job_id, job.job, queue, level, worker=job.worker, deliveries=job.deliveries,
        started_at=started, seen=seen, progress=progress,
    )  # fmt: skip


async def _progress(app: App, job_ids: list[str]) -> dict[str, tuple[float, str | None]]:
    """The progress of running jobs (those that set one)."""
    return await read_progress(app, job_ids) if job_ids else {}


@dataclass(frozen=True, slots=True)
class JobPage:
    """What the job page shows of one job.

    Attributes:
        info: its status (``App.job``).
        job: the stored job while it waits, is delayed or runs; None otherwise.
        secret: its arguments and result are masked.
        args: its arguments' JSON, whole but masked ("" when not known).
        result: its result as shown (masked for a secret job).
        running: while it runs: its worker, start and progress.
        waited: seconds from its enqueue to its last start (or to now, while it waits).
        ran: seconds of its last run (to now while it runs).
        dead_letter: the id of its dead letter, when it ended dead and one was found.
        put_back: a delayed job: why it waits (:func:`put_back_reason`).
    """

    info: JobInfo
    job: Job | None
    secret: bool
    args: str
    result: Any
    running: JobRow | None
    waited: float | None
    ran: float | None
    dead_letter: str | None
    put_back: str


async def job_page(app: App, job_id: str, now: float) -> JobPage:
    """Everything the job page shows of ``job_id`` (bounded reads: its status, its stored
    job while it is live, its own run while it runs, and the dead letters written around
    its end).

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    info = await app.job_async(job_id)
    job = await stored_job(app, info)
    secret = job_secret(app, info, job)
    running = None
    if info.status == "running":  # its own run alone, however many run
        found = await windows.running_job(app.store, job_id)
        running = (await _running_rows(app, [found]))[0] if found is not None else None
    started = running.started_at if running is not None else _stamp(info.started_at)
    enqueued = _stamp(info.enqueued_at)
    finished = _stamp(info.finished_at)
    waited = _between(enqueued, started if started is not None else (
        now if info.status == "waiting" else None))  # fmt: skip
    ran = _between(started, finished if finished is not None else (
        now if info.status == "running" else None))  # fmt: skip
    letter = None
    if info.status == "dead" and finished is not None:
        letter = await windows.dead_letter_of(app.store, job_id, round(finished * 1000))
        if letter is not None and info.error is None:  # no result kept: the letter says
            fields = letter[1]
            error = ErrorInfo(fields.get("error_type", ""), fields.get("error", ""),
                              fields.get("traceback", ""))  # fmt: skip
            info = replace(info, error=error)
    return JobPage(
        info, job, secret, shown_args(job, None, secret) if job is not None else "",
        mask_value(info.result, secret), running, waited, ran, letter[0] if letter else None,
        put_back_reason(job) if job is not None and info.status == "delayed" else "",
    )  # fmt: skip


async def stored_job(app: App, info: JobInfo) -> Job | None:
    """The stored job of a job that waits, is delayed or runs (one read); None for an
    ended one (its stored job is gone) or one that cannot be decoded.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    if info.status not in LIVE:
        return None
    _, data, *_ = await app.store.jobs.status_async(info.id)
    return decode_job(data) if data else None


def job_secret(app: App, info: JobInfo, job: Job | None) -> bool:
    """Whether a display of the job masks its arguments and result (pure): its stored
    ``job`` says so, or ``app`` (the viewer) declares its task with ``secret_args``."""
    task = job.task if job is not None else info.task
    return is_secret(job is not None and job.secret, task, app.tasks)


def _stamp(moment: Any) -> float | None:
    return moment.timestamp() if moment is not None else None


def _between(start: float | None, end: float | None) -> float | None:
    return max(0.0, end - start) if start is not None and end is not None else None


async def known_queues(app: App, *found: Iterable[str]) -> tuple[str, ...]:
    """The app's queues, then every other queue the namespace's producers and workers
    were configured with (each client names its App's on its first call), then any other
    named in ``found`` (the queues live workers serve, paused ones, those with recent
    activity), each once: a queue shows as soon as a client of it called Redis, without a
    restart of the dashboard.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    client, _ = await app.store.async_connection()
    names = dict.fromkeys(app.queues)
    names.update(dict.fromkeys(await queue_names(client, app.store.url, app.store.layout)))
    for group in found:
        names.update(dict.fromkeys(sorted(group)))
    return tuple(names)
