"""What a worker does with a job whose task it does not know (pure, no I/O).

In a rolling deploy, a producer on the new release enqueues a task that workers still on
the old one do not have. Dead-lettering it there would fail a job that a worker of the
new release, up a minute later, runs fine. So the job is put back, the same attempt (no
attempt spent), after a short delay that grows with each put-back, for a worker that
knows the task to take; each put-back counts as one (``Job.waits``, and the workers'
``lockgate_jobs_put_back`` metric). Only once ``App(unknown_task_grace=...)`` has passed
since its enqueue (the producer's clock) is it dead-lettered, its reason naming the task.
"""

from __future__ import annotations

import msgspec

from lockgate.core.codec import Job
from lockgate.core.outcome import Outcome, dead

FIRST_DELAY = 1.0  # seconds before the first put-back is due again
LONGEST_DELAY = 30.0  # seconds: the growth stops here
LAST_LOOK = 0.05  # seconds: a put-back is due at least this late (not in a busy loop)


def unknown_task(job: Job, grace: float, now: float) -> Outcome:
    """The ending of a run of ``job`` by a worker that does not know its task.

    Args:
        job: the job taken.
        grace: ``App.unknown_task_grace``: seconds from its enqueue during which it is put
            back; 0 dead-letters it at once.
        now: Unix time (the worker's clock; ``job.enqueued`` is the producer's).

    Returns:
        A put-back (``retry`` of the same attempt, ``waits`` + 1) due in ``FIRST_DELAY``
        seconds, doubling to ``LONGEST_DELAY``, never past the end of the grace; or, once
        the grace is over, a dead letter whose reason names the task.
    """
    left = job.enqueued + grace - now
    if grace <= 0:
        return dead(f"unknown task {job.task!r}")  # as before the grace existed
    if left <= 0:
        return dead(
            f"unknown task {job.task!r}: no worker that took it knew it "
            f"within {grace:g} s of its enqueue (App(unknown_task_grace=...))"
        )
    step = min(LONGEST_DELAY, FIRST_DELAY * 2.0 ** min(job.waits, 16))
    following = msgspec.structs.replace(job, waits=job.waits + 1)
    return Outcome(
        "retry",
        delay=max(LAST_LOOK, min(step, left)),
        next_job=following,
        reason=f"unknown task {job.task!r}: put back for a worker that knows it",
    )
