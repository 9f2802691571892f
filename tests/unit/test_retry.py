"""Failure decisions (retry.decide) and Backoff: pure, with an injected ``uniform``."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from lockgate.errors import (
    AlreadyProcessed,
    ClaimBusy,
    ConfigError,
    RetryableError,
    StepDone,
)
from lockgate.retry import ACK, Backoff, RetryPolicy, decide


def test_backoff_ceiling_doubles_from_base_up_to_the_cap() -> None:
    backoff = Backoff(base=0.5, cap=5.0)
    assert [backoff.ceiling(attempt) for attempt in range(1, 7)] == [0.5, 1, 2, 4, 5, 5]


def test_backoff_ceiling_does_not_overflow_on_huge_attempts() -> None:
    assert Backoff(base=1.0, cap=300.0).ceiling(10_000) == 300.0


def test_backoff_defaults_and_timedeltas_are_normalised_to_seconds() -> None:
    default = Backoff()
    assert (default.base, default.cap) == (1.0, 300.0)
    backoff = Backoff(base=timedelta(milliseconds=250), cap=timedelta(minutes=1))
    assert (backoff.base, backoff.cap) == (0.25, 60.0)
    assert isinstance(backoff.base, float) and isinstance(backoff.cap, float)


@pytest.mark.parametrize("field", ["base", "cap"])
def test_backoff_rejects_negative_durations(field: str) -> None:
    with pytest.raises(ConfigError, match="must not be negative"):
        Backoff(**{field: -1.0})


def test_full_jitter_spans_zero_to_the_ceiling() -> None:
    backoff = Backoff(base=2.0, cap=10.0)
    for attempt in (1, 2, 3, 4, 9):
        ceiling = backoff.ceiling(attempt)
        assert backoff.delay(attempt, lambda: 0.0) == 0.0
        assert backoff.delay(attempt, lambda: 1.0) == ceiling
        assert backoff.delay(attempt, lambda: 0.5) == ceiling / 2


def test_full_jitter_stays_within_bounds_for_random_draws() -> None:
    draws = random.Random(1234)
    backoff = Backoff(base=1.0, cap=8.0)
    for attempt in range(1, 12):
        delays = [backoff.delay(attempt, draws.random) for _ in range(200)]
        assert all(0.0 <= d <= backoff.ceiling(attempt) for d in delays)
        # Spread out, not bunched at one value (that is the point of the jitter).
        assert max(delays) - min(delays) > backoff.ceiling(attempt) / 2


def test_window_is_the_sum_of_the_ceilings() -> None:
    backoff = Backoff(base=1.0, cap=5.0)
    assert backoff.window(0) == 0.0
    assert backoff.window(1) == 1.0
    assert backoff.window(4) == 1 + 2 + 4 + 5
    assert backoff.window(6) == 1 + 2 + 4 + 5 + 5 + 5
    assert RetryPolicy(retries=4, backoff=backoff).window == backoff.window(4)


@pytest.mark.parametrize("retries", [-1, 1.5, True, "3"])
def test_policy_rejects_bad_retries(retries: object) -> None:
    with pytest.raises(ConfigError, match="retries"):
        RetryPolicy(retries=retries)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", [ValueError(), "ValueError", int])
def test_policy_rejects_retry_on_values_that_are_not_exception_types(kind: object) -> None:
    with pytest.raises(ConfigError, match="retry_on"):
        RetryPolicy(retry_on=(kind,))  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [0, -1.0])
def test_policy_rejects_non_positive_timeouts(timeout: float) -> None:
    with pytest.raises(ConfigError, match="timeout"):
        RetryPolicy(timeout=timeout)


POLICY = RetryPolicy(retries=3, backoff=Backoff(base=1.0, cap=30.0))


def test_success_is_acked() -> None:
    assert decide(None, 1, POLICY) is ACK
    assert ACK.action == "ack"


def test_a_duplicate_is_acked_not_retried() -> None:
    assert decide(AlreadyProcessed("email:1"), 1, POLICY).action == "ack"
    assert decide(AlreadyProcessed("email:1"), 99, POLICY).action == "ack"


def test_an_escaped_step_done_is_dead_lettered_with_an_explanation() -> None:
    outcome = decide(StepDone("step:t:j:email", "step 'email' already done"), 2, POLICY)
    assert outcome.action == "dead"
    assert "step 'email' already done" in outcome.reason
    assert "suppress(AlreadyProcessed)" in outcome.reason


@pytest.mark.parametrize(
    ("attempt", "draw", "expected"),
    [(1, 0.5, 0.5), (2, 0.5, 1.0), (3, 1.0, 4.0), (3, 0.0, 0.0)],
)
def test_retryable_error_is_retried_with_jittered_backoff(
    attempt: int, draw: float, expected: float
) -> None:
    outcome = decide(RetryableError("rate limited"), attempt, POLICY, lambda: draw)
    assert (outcome.action, outcome.delay) == ("retry", expected)


def test_an_explicit_delay_overrides_the_backoff() -> None:
    outcome = decide(RetryableError("later", delay=42.0), 1, POLICY, lambda: 1.0)
    assert (outcome.action, outcome.delay) == ("retry", 42.0)
    zero = decide(RetryableError("now", delay=0), 3, POLICY, lambda: 1.0)
    assert (zero.action, zero.delay) == ("retry", 0.0)
    as_timedelta = decide(RetryableError("later", delay=timedelta(minutes=2)), 1, POLICY)
    assert as_timedelta.delay == 120.0


def test_retryable_error_rejects_a_negative_delay() -> None:
    with pytest.raises(ValueError, match="negative"):
        RetryableError("x", delay=-1)


def test_claim_busy_is_retried_after_the_remaining_lease() -> None:
    busy = ClaimBusy("pay:1", 2.5)
    assert isinstance(busy, RetryableError)
    assert busy.delay == 2.5 and busy.key == "pay:1"
    outcome = decide(busy, 1, POLICY, lambda: 1.0)
    assert (outcome.action, outcome.delay) == ("retry", 2.5)


def test_timeouts_are_retryable() -> None:
    outcome = decide(TimeoutError(), 1, POLICY, lambda: 0.25)
    assert (outcome.action, outcome.delay) == ("retry", 0.25)


def test_retry_on_types_and_their_subclasses_are_retryable() -> None:
    policy = RetryPolicy(retries=2, retry_on=(ConnectionError,))
    assert decide(ConnectionError("down"), 1, policy, lambda: 0.0).action == "retry"
    assert decide(ConnectionResetError("reset"), 2, policy, lambda: 0.0).action == "retry"
    assert decide(ValueError("bug"), 1, policy).action == "dead"


@pytest.mark.parametrize(
    "error", [ValueError("bug"), KeyError("k"), SystemExit(3), KeyboardInterrupt()]
)
def test_other_errors_are_dead_lettered_at_once(error: BaseException) -> None:
    outcome = decide(error, 1, POLICY)
    assert (outcome.action, outcome.reason) == ("dead", "failed")


def test_retries_exhausted_after_retries_plus_one_attempts() -> None:
    error = RetryableError("still failing")
    actions = [decide(error, attempt, POLICY, lambda: 0.0).action for attempt in range(1, 6)]
    assert actions == ["retry", "retry", "retry", "dead", "dead"]
    assert decide(error, 4, POLICY).reason == "retries exhausted"
    # An explicit delay does not buy extra attempts.
    assert decide(RetryableError("x", delay=1), 4, POLICY).action == "dead"


def test_no_retries_means_the_first_retryable_failure_is_final() -> None:
    outcome = decide(RetryableError("x"), 1, RetryPolicy(retries=0))
    assert (outcome.action, outcome.reason) == ("dead", "retries exhausted")


def test_the_default_uniform_draws_within_bounds() -> None:
    for _ in range(100):
        outcome = decide(RetryableError("x"), 2, POLICY)
        assert outcome.action == "retry"
        assert 0.0 <= outcome.delay <= POLICY.backoff.ceiling(2)
