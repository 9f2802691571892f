"""Why a delayed job waits, as far as the stored job tells (pure, no I/O).

A job waits in a delayed set for several reasons: a delayed enqueue (``delay=``,
``eta=``), a retry's backoff, or a put-back by the worker that took it: its task's (or
its key's) rate limit had no room (it then carries ``rate_reserved`` or
``key_reserved``: its start is reserved), or another worker held its claim (``waits``
counts those). A put-back of a job whose task no worker knows changes none of these
fields, so it reads as a delayed enqueue.
"""

from __future__ import annotations

from lockgate.core.codec import Job


def put_back_reason(job: Job) -> str:
    """Why ``job`` waits for its due time: ``rate limited: its start is reserved``,
    ``claim busy: put back N times``, ``retry: attempt N`` or ``scheduled``."""
    if job.rate_reserved or job.key_reserved:
        return "rate limited: its start is reserved"
    if job.waits:
        return f"claim busy: put back {job.waits} time{'s' if job.waits > 1 else ''}"
    if job.attempt > 1:
        return f"retry: attempt {job.attempt}"
    return "scheduled"
