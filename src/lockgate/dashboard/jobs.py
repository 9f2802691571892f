"""The dashboard's pages about jobs one by one (see :mod:`lockgate.ops.jobs` for the reads):

- ``GET /queues/{queue}/{level}`` the first waiting jobs of a queue and level (``*`` on the
  sorted backend: every level), :data:`~lockgate.ops.jobs.PAGE` a page, ``?after=`` the
  next page's cursor, ``?lanes=`` the first lane of the fairness keys' page;
- ``GET /running`` the running jobs: worker, start, progress, a cancel button;
- ``GET /jobs?id=ID`` one job: arguments, attempts, worker, progress, timings, result or
  error with its traceback, its flow and its dead letter.

Each page reads a bounded window, whatever the queue's length. A secret job's arguments
and result are masked on every one. :mod:`lockgate.dashboard.web` routes here; these
functions take the dashboard (:class:`Pages`) as their first argument.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from lockgate.api.app import App
from lockgate.core.logs import get_logger
from lockgate.errors import AccessDenied
from lockgate.ops import flows
from lockgate.ops.inspect import activity, live_workers
from lockgate.ops.jobs import job_page, known_queues, running_jobs, waiting_jobs
from lockgate.ops.queues import paused

log = get_logger(__name__)
MAX_ID = 256  # a job id, queue name or cursor longer than this is nobody's
ANY_LEVEL = "*"  # the sorted backend's one set per queue, every level in it


class Pages(Protocol):
    """What these pages use of the dashboard (:class:`lockgate.dashboard.web.Dashboard`)."""

    app: App

    def _render(
        self, request: Request, name: str, context: dict[str, Any], status: int = 200
    ) -> Response: ...

    def _problem(self, request: Request, status: int, message: str) -> Response: ...


async def queues_now(app: App) -> tuple[str, ...]:
    """The queues there are now (:func:`lockgate.ops.jobs.known_queues`): the app's, the
    namespace's clients', the live workers', the paused ones and those that ran jobs in
    the last minutes.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    workers = await live_workers(app)
    recent = await activity(app, minutes=15)
    return await known_queues(
        app, (q for w in workers for q in w.queues), await paused(app),
        (q for q, _ in recent.levels),
    )  # fmt: skip


def _levels(app: App) -> tuple[str, ...]:
    return (ANY_LEVEL,) if app.backend == "sorted" else app.levels.names


async def waiting(pages: Pages, request: Request) -> Response:
    """A queue and level's first waiting jobs (``?after=`` the next page, ``?lanes=``
    the fairness lanes' offset); 404 for a queue or level there is not."""
    app = pages.app
    queue = str(request.path_params["queue"])[:MAX_ID]
    level = str(request.path_params["level"])[:MAX_ID]
    if level not in _levels(app):
        return pages._problem(request, 404, f"no level {level!r} (levels: "
                              f"{', '.join(_levels(app))})")  # fmt: skip
    if queue not in app.queues and queue not in await queues_now(app):
        return pages._problem(request, 404, f"no queue {queue!r}")
    after = request.query_params.get("after", "").strip()[:MAX_ID] or None
    lanes = request.query_params.get("lanes", "0")
    offset = int(lanes) if lanes.isdigit() and len(lanes) < 10 else 0
    page = await waiting_jobs(app, queue, level, after, offset)
    context = {"view": page, "after": after, "lanes_at": offset, "levels": _levels(app)}
    return pages._render(request, "queue.html", context)


async def running(pages: Pages, request: Request) -> Response:
    """The running jobs of every queue there is, with their workers and cancel buttons."""
    names = await queues_now(pages.app)
    rows = await running_jobs(pages.app, names)
    return pages._render(request, "running.html", {"jobs": rows, "now": time.time()})


async def job(pages: Pages, request: Request) -> Response:
    """Look a job up by id (``?id=``); an unknown id is a 404."""
    app = pages.app
    job_id = request.query_params.get("id", "").strip()[:MAX_ID]
    if not job_id:
        return pages._render(request, "job.html", {"job_id": "", "view": None, "flow_id": None})
    view = await job_page(app, job_id, time.time())
    flow_id = await _flow_of(app, job_id)
    status = 404 if view.info.status == "unknown" else 200
    context = {"job_id": job_id, "view": view, "flow_id": flow_id}
    return pages._render(request, "job.html", context, status)


async def _flow_of(app: App, job_id: str) -> str | None:
    """The flow of job ``job_id`` (see :func:`lockgate.ops.flows.flow_of_job`); None
    also when the user may not read flows: the link is an extra, the job page is not."""
    try:
        return await run_in_threadpool(flows.flow_of_job, app, job_id)
    except AccessDenied as e:
        log.warning("dashboard: no flow link for job %r: %s", job_id, e)
        return None
