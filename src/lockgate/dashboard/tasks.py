"""The dashboard's pages about tasks (see :mod:`lockgate.ops.history` for the reads):

- ``GET /tasks`` the per-task table: jobs/s done and failed, run time p50 and p99, the
  last error and when, over each task's kept recent ends;
- ``GET /tasks/{name}`` a task's recent ends, newest first, ``?outcome=`` done, retried
  or dead (none: every one), each linking to its job's page.

Both read bounded windows (at most 1,000 ends per task, outcome and partition), whatever
the queues hold; arguments are not kept with the ends, so nothing here needs masking.
:mod:`lockgate.dashboard.web` routes here; these functions take the dashboard
(:class:`~lockgate.dashboard.jobs.Pages`) as their first argument.
"""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response

from lockgate.dashboard.jobs import Pages
from lockgate.ops.history import OUTCOMES, recent_ends, task_names, task_table

MAX_NAME = 256  # a task name longer than this is nobody's
PAGE = 200  # ends listed on a task's page


async def table(pages: Pages, request: Request) -> Response:
    """One row per task: its rates, run times and last error."""
    now = time.time()
    rows = await task_table(pages.app, now=now)
    return pages._render(request, "tasks.html", {"rows": rows, "now": now})


async def task(pages: Pages, request: Request) -> Response:
    """A task's recent ends (``?outcome=`` one outcome); 404 for a task with no ends
    that the app does not declare, or an outcome there is not."""
    app = pages.app
    name = str(request.path_params["name"])[:MAX_NAME]
    outcome = request.query_params.get("outcome", "").strip() or None
    if outcome is not None and outcome not in OUTCOMES:
        return pages._problem(request, 404, f"no outcome {outcome[:40]!r} (outcomes: "
                              f"{', '.join(OUTCOMES)})")  # fmt: skip
    if name not in await task_names(app):
        return pages._problem(request, 404, f"no task {name!r}")
    ends = await recent_ends(app, name, outcome, PAGE)
    context = {
        "task": name, "ends": ends, "outcome": outcome, "outcomes": OUTCOMES,
        "limit": PAGE, "now": time.time(),
    }  # fmt: skip
    return pages._render(request, "task.html", context)
