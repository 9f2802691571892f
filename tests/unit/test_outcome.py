"""How a run ends (outcome.decide): pure, with an injected clock and ``uniform``."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from lockgate.core.codec import Job
from lockgate.core.outcome import (
    DONE,
    LONGEST_WAIT,
    decide,
    earliest,
    expired,
    markers_expired,
    wait,
)
from lockgate.core.retry import Backoff, RetryPolicy
from lockgate.errors import (
    AlreadyProcessed,
    ClaimBusy,
    InvalidArguments,
    RetryableError,
    StepDone,
)

NOW = 1_000_000.0


def job(attempt: int = 1, waits: int = 0, markers_expire: float = 0.0) -> Job:
    return Job(id="j1", task="t", queue="default", level="normal", args=[1], attempt=attempt,
               waits=waits, markers_expire=markers_expire)  # fmt: skip


POLICY = RetryPolicy(retries=3, backoff=Backoff(base=1.0, cap=30.0))


def test_success_is_acked() -> None:
    assert decide(None, job(1), POLICY, now=NOW) == DONE
    assert DONE.kind == "done"


def test_a_duplicate_is_acked_not_retried() -> None:
    assert decide(AlreadyProcessed("email:1"), job(1), POLICY, now=NOW).kind == "done"
    assert decide(AlreadyProcessed("email:1"), job(99), POLICY, now=NOW).kind == "done"


def test_an_escaped_step_done_is_dead_lettered_with_an_explanation() -> None:
    outcome = decide(
        StepDone("step:t:j:email", "step 'email' already done"), job(2), POLICY, now=NOW
    )
    assert outcome.kind == "dead"
    assert "step 'email' already done" in outcome.reason
    assert "suppress(AlreadyProcessed)" in outcome.reason


@pytest.mark.parametrize(
    ("attempt", "draw", "expected"),
    [(1, 0.5, 0.5), (2, 0.5, 1.0), (3, 1.0, 4.0), (3, 0.0, 0.0)],
)
def test_retryable_error_is_retried_with_jittered_backoff(
    attempt: int, draw: float, expected: float
) -> None:
    outcome = decide(
        RetryableError("rate limited"), job(attempt), POLICY, now=NOW, uniform=lambda: draw
    )
    assert (outcome.kind, outcome.delay) == ("retry", expected)


def test_an_explicit_delay_overrides_the_backoff() -> None:
    outcome = decide(
        RetryableError("later", delay=42.0), job(1), POLICY, now=NOW, uniform=lambda: 1.0
    )
    assert (outcome.kind, outcome.delay) == ("retry", 42.0)
    zero = decide(RetryableError("now", delay=0), job(3), POLICY, now=NOW, uniform=lambda: 1.0)
    assert (zero.kind, zero.delay) == ("retry", 0.0)
    as_timedelta = decide(
        RetryableError("later", delay=timedelta(minutes=2)), job(1), POLICY, now=NOW
    )
    assert as_timedelta.delay == 120.0


def test_retryable_error_rejects_a_negative_delay() -> None:
    with pytest.raises(ValueError, match="negative"):
        RetryableError("x", delay=-1)


def test_claim_busy_waits_briefly_and_spends_no_attempt() -> None:
    busy = ClaimBusy("pay:1", 25.0)
    assert isinstance(busy, RetryableError)
    assert busy.delay == 25.0 and busy.key == "pay:1"
    outcome = decide(busy, job(2), POLICY, now=NOW, uniform=lambda: 1.0)
    assert outcome.kind == "retry"
    assert outcome.delay < 0.1  # not the 25 s left on the holder's lease
    assert outcome.next_job is not None
    assert (outcome.next_job.attempt, outcome.next_job.waits) == (2, 1)


def test_waits_grow_to_a_cap_and_never_outlast_the_lease() -> None:
    delays = [wait(job(waits=n), 30.0).delay for n in range(12)]
    assert delays == sorted(delays)
    assert delays[-1] == LONGEST_WAIT
    assert wait(job(waits=9), 0.2).delay == 0.2


def test_a_busy_claim_with_an_exhausted_attempt_count_still_waits() -> None:
    outcome = decide(ClaimBusy("k", 1.0), job(POLICY.retries + 1), POLICY, now=NOW)
    assert outcome.kind == "retry"


def test_a_retry_due_after_the_done_markers_expire_is_dead_lettered() -> None:
    # A step finished 1.5 s of marker TTL ago; the task asks for a retry in 2 s.
    error = RetryableError("later", delay=2.0)
    outcome = decide(error, job(1), POLICY, now=NOW, markers_expire=NOW + 1.5)
    assert outcome.kind == "dead"
    assert "done markers" in outcome.reason
    assert outcome.error is not None and outcome.error.type == "RetryableError"
    # Due well before they expire: a normal retry, which carries the expiry along.
    fine = decide(error, job(1), POLICY, now=NOW, markers_expire=NOW + 60)
    assert fine.kind == "retry"
    assert fine.next_job is not None and fine.next_job.markers_expire == NOW + 60


def test_marker_expiry_helpers() -> None:
    assert not markers_expired(0.0, NOW)
    assert markers_expired(NOW, NOW)
    assert not markers_expired(NOW + 10, NOW)
    assert earliest(0.0, 5.0) == 5.0
    assert earliest(7.0, 0.0) == 7.0
    assert earliest(7.0, 5.0) == 5.0


def test_timeouts_are_retryable() -> None:
    outcome = decide(TimeoutError(), job(1), POLICY, now=NOW, uniform=lambda: 0.25)
    assert (outcome.kind, outcome.delay) == ("retry", 0.25)


def test_retry_on_types_and_their_subclasses_are_retryable() -> None:
    policy = RetryPolicy(retries=2, retry_on=(ConnectionError,))
    assert (
        decide(ConnectionError("down"), job(1), policy, now=NOW, uniform=lambda: 0.0).kind
        == "retry"
    )
    assert (
        decide(ConnectionResetError("reset"), job(2), policy, now=NOW, uniform=lambda: 0.0).kind
        == "retry"
    )
    assert decide(ValueError("bug"), job(1), policy, now=NOW).kind == "dead"


@pytest.mark.parametrize("error", [ValueError("bug"), KeyError("k"), OSError("disk")])
def test_any_exception_is_retried_without_retry_on(error: BaseException) -> None:
    outcome = decide(error, job(1), POLICY, now=NOW, uniform=lambda: 0.5)
    assert (outcome.kind, outcome.delay) == ("retry", 0.5)
    assert outcome.error is not None and outcome.error.type == type(error).__name__
    exhausted = decide(error, job(4), POLICY, now=NOW)
    assert (exhausted.kind, exhausted.reason) == ("dead", "retries exhausted")


@pytest.mark.parametrize(
    "error",
    [
        SystemExit(3),
        KeyboardInterrupt(),
        asyncio.CancelledError(),
        InvalidArguments("task 't': missing a required argument: 'x'"),
    ],
)
def test_what_no_retry_mends_is_dead_lettered_at_once(error: BaseException) -> None:
    outcome = decide(error, job(1), POLICY, now=NOW)
    assert (outcome.kind, outcome.reason) == ("dead", "failed")


def test_dead_on_types_are_dead_lettered_at_once() -> None:
    policy = RetryPolicy(retries=3, dead_on=(LookupError,))
    assert decide(KeyError("k"), job(1), policy, now=NOW).kind == "dead"
    assert decide(ValueError("v"), job(1), policy, now=NOW, uniform=lambda: 0.0).kind == "retry"
    # 0.3's rule: only RetryableError, timeouts and retry_on types retry.
    old = RetryPolicy(retries=3, retry_on=(ConnectionError,), dead_on=(Exception,))
    for error in (RetryableError("x"), TimeoutError(), ConnectionResetError()):
        assert decide(error, job(1), old, now=NOW, uniform=lambda: 0.0).kind == "retry"
    assert decide(ValueError("bug"), job(1), old, now=NOW).kind == "dead"


def test_retries_exhausted_after_retries_plus_one_attempts() -> None:
    error = RetryableError("still failing")
    actions = [
        decide(error, job(attempt), POLICY, now=NOW, uniform=lambda: 0.0).kind
        for attempt in range(1, 6)
    ]
    assert actions == ["retry", "retry", "retry", "dead", "dead"]
    assert decide(error, job(4), POLICY, now=NOW).reason == "retries exhausted"
    # An explicit delay does not buy extra attempts.
    assert decide(RetryableError("x", delay=1), job(4), POLICY, now=NOW).kind == "dead"


def test_no_retries_means_the_first_retryable_failure_is_final() -> None:
    outcome = decide(RetryableError("x"), job(1), RetryPolicy(retries=0), now=NOW)
    assert (outcome.kind, outcome.reason) == ("dead", "retries exhausted")


def test_the_default_uniform_draws_within_bounds() -> None:
    for _ in range(100):
        outcome = decide(RetryableError("x"), job(2), POLICY, now=NOW)
        assert outcome.kind == "retry"
        assert 0.0 <= outcome.delay <= POLICY.backoff.ceiling(2)


def test_expired_counts_from_the_enqueue() -> None:
    job = Job(id="j", task="t", queue="q", level="normal", enqueued=1_000.0)
    assert expired(job, None, 10_000.0) is None
    assert expired(job, 60.0, 1_060.0) is None
    late = expired(job, 60.0, 1_060.5)
    assert late is not None and late.kind == "done" and late.claim == "release"
    assert "waited 60.5 s, over its expiry of 60 s" in late.reason
