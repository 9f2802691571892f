"""Backoff and retry policies: pure, with an injected ``uniform``."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from lockgate.core.retry import Backoff, RetryPolicy
from lockgate.errors import (
    ClaimBusy,
    ConfigError,
    InvalidArguments,
    RetryableError,
    SerializationError,
)


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


@pytest.mark.parametrize("option", ["retry_on", "dead_on"])
@pytest.mark.parametrize("kind", [ValueError(), "ValueError", int])
def test_policy_rejects_values_that_are_not_exception_types(option: str, kind: object) -> None:
    with pytest.raises(ConfigError, match=option):
        RetryPolicy(**{option: (kind,)})  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", [RetryableError, ClaimBusy, TimeoutError])
def test_dead_on_cannot_name_what_is_always_retried(kind: type[Exception]) -> None:
    with pytest.raises(ConfigError, match=f"dead_on names {kind.__name__}, which is always"):
        RetryPolicy(dead_on=(kind,))


def test_a_type_in_both_retry_on_and_dead_on_is_refused() -> None:
    with pytest.raises(ConfigError, match="OSError is in both retry_on and dead_on"):
        RetryPolicy(retry_on=(OSError,), dead_on=(OSError,))


@pytest.mark.parametrize(
    ("policy", "retried", "not_retried"),
    [
        # Without retry_on: every Exception, not what is no Exception or wrong arguments.
        (RetryPolicy(), [ValueError(), KeyError(), OSError(), RetryableError("x")],
         [SystemExit(1), KeyboardInterrupt(), GeneratorExit(), InvalidArguments("x"),
          ConfigError("TTL too short"), SerializationError("no JSON form")]),
        # With retry_on: only its types, RetryableError and timeouts.
        (RetryPolicy(retry_on=(ConnectionError,)),
         [ConnectionResetError(), RetryableError("x"), TimeoutError()],
         [ValueError(), OSError()]),
        # dead_on: never those; the nearer class wins against retry_on.
        (RetryPolicy(dead_on=(LookupError,)), [ValueError(), TimeoutError()], [KeyError()]),
        (RetryPolicy(retry_on=(OSError,), dead_on=(PermissionError,)),
         [OSError(), FileNotFoundError()], [PermissionError(), ValueError()]),
        (RetryPolicy(retry_on=(ConnectionError,), dead_on=(Exception,)),
         [ConnectionError(), RetryableError("x"), TimeoutError()], [ValueError(), OSError()]),
    ],
)  # fmt: skip
def test_which_failures_are_retried(
    policy: RetryPolicy, retried: list[BaseException], not_retried: list[BaseException]
) -> None:
    assert [policy.retried(e) for e in retried] == [True] * len(retried)
    assert [policy.retried(e) for e in not_retried] == [False] * len(not_retried)


@pytest.mark.parametrize("timeout", [0, -1.0])
def test_policy_rejects_non_positive_timeouts(timeout: float) -> None:
    with pytest.raises(ConfigError, match="timeout"):
        RetryPolicy(timeout=timeout)
