"""Read-only: the progress of many jobs at once (``current_job().set_progress``), for
lists of running jobs such as the dashboard's.

A job's progress is kept in the partition of its id (see
:meth:`lockgate.backend.keys.Keys.progress`), so a list of ids costs one read-only call
per partition, all in one round trip. ``App.job`` reads one job's with its status.
"""

from __future__ import annotations

from collections.abc import Sequence

from lockgate.api.app import App
from lockgate.core.progress import Progress, decode_progress

__all__ = ["Progress", "read_progress"]


async def read_progress(app: App, job_ids: Sequence[str]) -> dict[str, Progress]:
    """The last progress reported by each of the jobs that reported one.

    Args:
        app: whose namespace to read.
        job_ids: the jobs (running or ended: a progress is kept as long as the job's
            status, ten minutes at least).

    Returns:
        job id -> ``(value, note)``, ``value`` from 0.0 to 1.0, ``note`` None when none
        was given; the jobs with no progress kept are left out.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    ids = list(dict.fromkeys(job_ids))
    if not ids:
        return {}
    stored = await app.store.jobs.progress(ids)
    found = {job_id: decode_progress(data) for job_id, data in zip(ids, stored, strict=True)}
    return {job_id: progress for job_id, progress in found.items() if progress is not None}
