"""How a job's run ends, decided as a value. Pure, no I/O.

A run ends exactly one way, and the worker applies that one way in one owner-checked script
call (see :mod:`lockgate.worker.settler`):

- ``done``: acknowledged and deleted, job id freed, the idempotency claim turned into a
  done marker in the same call;
- ``retry``: acknowledged and deleted, the next attempt (or, after a busy claim, the same
  attempt) put in the delayed set, the claim released;
- ``dead``: acknowledged and deleted, a dead letter written, job id freed, claim released;
- ``abandoned``: nothing is touched: the entry stays pending and is reclaimed after the
  visibility timeout (a run cut short by a stop, or a child process that died).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import msgspec

from lockgate.core.codec import Job
from lockgate.core.retry import RetryPolicy
from lockgate.core.tracebacks import format_error
from lockgate.errors import AlreadyProcessed, ClaimBusy, RetryableError, StepDone

Kind = Literal["done", "retry", "dead", "abandoned"]
# The reason of an ending whose job ran before: acknowledged without running again.
ALREADY_PROCESSED = "already processed"
ClaimAction = Literal["done", "release", "keep"]

# A duplicate that meets a live claim looks again soon, then less often: 50 ms doubling to
# 1 s. It is put back when the holder settles, not at the end of the holder's lease.
FIRST_WAIT = 0.05
LONGEST_WAIT = 1.0
# Done markers expire on the Redis clock, retries are timed on the worker's: keep a margin.
MARKER_MARGIN = 0.05


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """What a run raised, as text (it may come from a child process)."""

    type: str
    message: str
    traceback: str = ""

    @classmethod
    def of(cls, error: BaseException) -> ErrorInfo:
        """The text of an exception, its traceback from the task's own frame (see
        :func:`~lockgate.core.tracebacks.format_error`)."""
        return cls(type(error).__name__, str(error), format_error(error))


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one run ends.

    Attributes:
        kind: done, retry, dead or abandoned (see the module docstring).
        delay: retry: seconds until the next attempt is due.
        next_job: retry: the job to put back (next attempt, or the same one after a wait).
        reason: dead: why, for the dead letter; retry and abandoned: for the log.
        error: what the run raised, when it raised.
        claim: what happens to the job's idempotency claim, when it has one.
        result: done: the return value's JSON, for a task that keeps its results.
        cancelled: done: the job ends cancelled (``App.cancel``, or expired), not done.
    """

    kind: Kind
    delay: float = 0.0
    next_job: Job | None = None
    reason: str = ""
    error: ErrorInfo | None = None
    claim: ClaimAction = "release"
    result: bytes | None = None
    cancelled: bool = False


DONE = Outcome("done", claim="done")


def expired(job: Job, expires: float | None, now: float) -> Outcome | None:
    """Drop a job not started within ``expires`` seconds of its enqueue (an OTP nobody
    waits for any more): acknowledged without running, its claim let go. None while it
    may still run, or when its task sets no expiry.

    The age is the worker's clock minus the producer's (``Job.enqueued``), so clock skew
    between hosts counts against it.
    """
    if expires is None or now - job.enqueued <= expires:
        return None
    waited = now - job.enqueued
    return Outcome(
        "done",
        reason=f"expired: waited {waited:.1f} s, over its expiry of {expires:g} s",
        claim="release",
        cancelled=True,
    )


# A run cancelled by App.cancel: acknowledged, neither retried nor dead-lettered, and its
# claim let go (a job cancelled halfway did not finish its work).
CANCELLED = Outcome("done", reason="cancelled", claim="release", cancelled=True)


def dead(reason: str, error: BaseException | ErrorInfo | None = None) -> Outcome:
    """A dead-letter outcome."""
    info = ErrorInfo.of(error) if isinstance(error, BaseException) else error
    return Outcome("dead", reason=reason, error=info)


def wait(
    job: Job, retry_after: float, reason: str = "claim busy", markers_expire: float | None = None
) -> Outcome:
    """Put the same attempt back (another worker holds its claim): no attempt is spent.

    The wait grows from ``FIRST_WAIT`` to ``LONGEST_WAIT`` and is never longer than what is
    left of the holder's lease.
    """
    step = min(LONGEST_WAIT, FIRST_WAIT * 2.0 ** min(job.waits, 16))
    delay = min(step, retry_after) if retry_after > 0 else step
    expire = job.markers_expire if markers_expire is None else markers_expire
    following = msgspec.structs.replace(job, waits=job.waits + 1, markers_expire=expire)
    return Outcome("retry", delay=delay, next_job=following, reason=reason)


def markers_expired(markers_expire: float, due: float) -> bool:
    """Whether a run starting at ``due`` (Unix time) would find done markers gone."""
    return markers_expire > 0 and due >= markers_expire - MARKER_MARGIN


def decide(
    error: BaseException | None,
    job: Job,
    policy: RetryPolicy,
    *,
    now: float,
    markers_expire: float = 0.0,
    uniform: Callable[[], float] = random.random,
) -> Outcome:
    """Decide how a run of ``job`` that ended with ``error`` (None: success) ends.

    Args:
        now: the current Unix time (a retry due after the done markers expire is
            dead-lettered instead, see ``markers_expire``).
        markers_expire: when the first done marker of this job's finished steps expires
            (the earlier of the job's own and this run's, see :func:`earliest`), 0 when
            none.
    """
    if error is None:
        return DONE
    if isinstance(error, StepDone):
        # A finished step raises on entry; left uncaught, it would end the job early and
        # silently skip the steps after it. Stop loudly instead (replayable once fixed).
        return dead(
            f"{error} and the AlreadyProcessed escaped the task, so later steps did not "
            "run: write 'with contextlib.suppress(AlreadyProcessed), job.step(...):'",
            error,
        )
    if isinstance(error, AlreadyProcessed):
        # A duplicate of work done: ack it.
        return Outcome("done", reason=ALREADY_PROCESSED, claim="release")
    if isinstance(error, ClaimBusy):
        outcome = wait(job, error.delay or 0.0, str(error), markers_expire)
        return _unless_markers_expire(outcome, now, markers_expire, error)
    if not policy.retried(error):
        return dead("failed", error)
    if job.attempt > policy.retries:
        return dead("retries exhausted", error)
    explicit = error.delay if isinstance(error, RetryableError) else None
    delay = explicit if explicit is not None else policy.backoff.delay(job.attempt, uniform)
    # A new attempt: its waits start over; a crash count stays (it still runs isolated).
    following = msgspec.structs.replace(
        job, attempt=job.attempt + 1, waits=0, markers_expire=markers_expire,
        rate_reserved=False, key_reserved=False,
    )  # fmt: skip
    outcome = Outcome("retry", delay=delay, next_job=following, error=ErrorInfo.of(error))
    return _unless_markers_expire(outcome, now, markers_expire, error)


def _unless_markers_expire(
    outcome: Outcome, now: float, markers_expire: float, error: BaseException
) -> Outcome:
    if not markers_expired(markers_expire, now + outcome.delay):
        return outcome
    return dead(
        f"the retry would start {outcome.delay:.2f}s from now, after the done markers of "
        "finished steps expire: it would run them again; raise the steps' ttl or shorten "
        "the retry delay",
        error,
    )


def earliest(first: float, second: float) -> float:
    """The earlier of two marker expiry times, where 0 means none."""
    if first <= 0:
        return second
    if second <= 0:
        return first
    return min(first, second)
