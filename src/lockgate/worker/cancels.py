"""``App.cancel`` on the worker's side: the requests for the jobs it runs, passed to its
runner, and a run about to be put back whose job was cancelled meanwhile."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from lockgate.backend.broker import Delivery
from lockgate.backend.store import Store
from lockgate.core.logs import get_logger
from lockgate.core.outcome import CANCELLED
from lockgate.errors import AccessDenied, LockgateError
from lockgate.worker.runner import Ending, JobRunner

log = get_logger(__name__)
CANCEL_LOOK = 0.25  # seconds between looks for App.cancel requests of running jobs


async def look(store: Store, runner: JobRunner, running: Sequence[Delivery]) -> bool:
    """Read the cancel requests of the ``running`` jobs (one read) and pass them to the
    runner. False when the server refuses the read (an ACL without it): cancellation of
    running jobs is then off, logged once; it must not stop the jobs themselves."""
    try:
        flags = await store.jobs.cancel_requests(
            [(d.job_id, d.job.home if d.job else None) for d in running]
        )
    except AccessDenied as e:
        log.warning("running jobs cannot be cancelled here: %s", e)
        return False
    for delivery, take in zip(running, flags, strict=True):
        if take:
            runner.cancel(delivery.job_id, take)
    return True


async def unless_cancelled(store: Store, ending: Ending) -> Ending:
    """A run about to be put back (a retry, a busy claim, a rate limit) whose job was
    cancelled meanwhile ends cancelled: put back under a new take, the cancel request
    (which names this take) would never reach it."""
    delivery = ending.delivery
    if ending.outcome.kind != "retry" or delivery.job is None:
        return ending
    try:
        take = await store.jobs.cancel_request(delivery.job_id, delivery.job.home)
    except LockgateError as e:  # the request is kept; the next run looks again
        log.debug("job %s: cancel request not read (%s)", delivery.job_id, e)
        return ending
    if take and take in (delivery.ref, delivery.owner):
        log.info("job %s (%s): cancelled instead of put back", delivery.job_id,
                 delivery.job.task)  # fmt: skip
        # A run left going past its timeout keeps its claim until it ends.
        ending.outcome = replace(CANCELLED, claim=ending.outcome.claim)
    return ending
