"""Retry policy: how often and after how long a failed job runs again. Pure, no I/O.

Backoff is exponential with full jitter (a uniformly random delay between zero and the
exponential ceiling), which spreads retries of jobs that failed together instead of
bunching them; see AWS Architecture Blog, "Exponential Backoff And Jitter" (2015).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from typing import cast

from lockgate.core.config import seconds
from lockgate.errors import ConfigError, InvalidArguments, RetryableError, SerializationError

# Failures retried whatever retry_on and dead_on say (while attempts are left).
ALWAYS_RETRIED = (RetryableError, TimeoutError)
# lockgate's errors that say the code is wrong, not the moment: arguments that do not fit,
# a declaration or option refused at first use, a value with no JSON form. No retry
# mends them, whatever retry_on and dead_on say.
NEVER_RETRIED = (InvalidArguments, ConfigError, SerializationError)

# How long a done marker blocks duplicates unless told otherwise: a day.
DEFAULT_TTL = 86_400.0


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """Exponential backoff with full jitter.

    Attributes:
        base: ceiling of the first retry's delay, in seconds.
        cap: no delay is longer than this.
    """

    base: float | timedelta = 1.0
    cap: float | timedelta = 300.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", seconds(self.base, "backoff base"))
        object.__setattr__(self, "cap", seconds(self.cap, "backoff cap"))

    def ceiling(self, attempt: int) -> float:
        """The longest delay after failed attempt number ``attempt`` (1-based)."""
        base, cap = cast(float, self.base), cast(float, self.cap)  # normalised above
        return min(cap, base * 2.0 ** min(attempt - 1, 60))

    def delay(self, attempt: int, uniform: Callable[[], float] = random.random) -> float:
        """A random delay in [0, ceiling(attempt)]."""
        return uniform() * self.ceiling(attempt)

    def window(self, retries: int) -> float:
        """The longest time all retries can take to be scheduled (sum of ceilings)."""
        return sum(self.ceiling(attempt) for attempt in range(1, retries + 1))


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """A task's failure handling.

    Attributes:
        retries: how many times a failed job is retried (attempts = retries + 1).
        backoff: delay between attempts.
        retry_on: when given, the only exception types retried (besides
            ``RetryableError`` and timeouts); empty: every ``Exception`` is.
        dead_on: exception types never retried (dead-lettered at once).
        timeout: seconds a run may take; a run over it is a retryable failure.

    Raises:
        ConfigError: ``retries`` is not a whole number >= 0, ``retry_on`` or ``dead_on``
            holds what is not an exception type, ``dead_on`` names ``RetryableError`` or
            ``TimeoutError`` (or a subclass: those are always retried), a type is in both,
            or ``timeout`` is not positive.
    """

    retries: int = 3
    backoff: Backoff = Backoff()
    retry_on: tuple[type[BaseException], ...] = ()
    dead_on: tuple[type[BaseException], ...] = ()
    timeout: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.retries, bool) or not isinstance(self.retries, int):
            raise ConfigError(f"retries must be a whole number, got {self.retries!r}")
        if self.retries < 0:
            raise ConfigError(f"retries must be >= 0, got {self.retries}")
        for option in ("retry_on", "dead_on"):
            for kind in getattr(self, option):
                if not (isinstance(kind, type) and issubclass(kind, BaseException)):
                    raise ConfigError(f"{option} takes exception types, got {kind!r}")
        for kind in self.dead_on:
            if issubclass(kind, ALWAYS_RETRIED):
                raise ConfigError(
                    f"dead_on names {kind.__name__}, which is always retried (RetryableError "
                    "and timeouts are); raise another type to dead-letter at once"
                )
            if kind in self.retry_on:
                raise ConfigError(f"{kind.__name__} is in both retry_on and dead_on")
        if self.timeout is not None and self.timeout <= 0:
            raise ConfigError(f"timeout must be positive, got {self.timeout}")

    def retried(self, error: BaseException) -> bool:
        """Whether a run that raised ``error`` is retried (while attempts are left). Pure.

        ``RetryableError`` and ``TimeoutError`` always are; what is no ``Exception``
        (``SystemExit``, ``KeyboardInterrupt``, a cancellation) and lockgate's errors
        that say the code is wrong (:data:`NEVER_RETRIED`: arguments that do not fit, a
        ``ConfigError``, a ``SerializationError``) never are. Otherwise the nearest of the
        error's classes named in ``retry_on`` or ``dead_on`` decides, so the more specific
        entry wins (``retry_on=(ConnectionError,), dead_on=(Exception,)`` retries a
        ``ConnectionResetError`` and nothing else); a type named in neither is retried
        unless ``retry_on`` is given.

        Args:
            error: what the run raised (not lockgate's own control flow, which
                :func:`~lockgate.core.outcome.decide` handles before).
        """
        if not isinstance(error, Exception) or isinstance(error, NEVER_RETRIED):
            return False
        if isinstance(error, ALWAYS_RETRIED):
            return True
        if not self.retry_on and not self.dead_on:
            return True
        for kind in type(error).__mro__:  # nearest first
            if kind in self.dead_on:
                return False
            if kind in self.retry_on:
                return True
        return not self.retry_on  # named in neither

    @cached_property
    def window(self) -> float:
        """Longest span of retry delays (for idempotency TTL checks; read for every job
        run, so computed once)."""
        return self.backoff.window(self.retries)


def check_expiry(task: str, expires: float | None, policy: RetryPolicy) -> None:
    """Refuse an expiry no retry could meet (pure).

    Raises:
        ConfigError: ``expires`` is not positive, or the task retries and its first
            retry's delay may be longer than ``expires`` (the retry would be dropped).
    """
    if expires is None:
        return
    if expires <= 0:
        raise ConfigError(f"task {task!r}: expires must be positive, got {expires:g}")
    first = policy.backoff.ceiling(1)
    if policy.retries > 0 and expires < first:
        raise ConfigError(
            f"task {task!r} expires {expires:g} s after enqueue, shorter than its first "
            f"retry's delay (up to {first:g} s): lower the backoff or set retries=0"
        )


def check_ttl(key: str, ttl: float, retry_window: float) -> None:
    """The lesson's anti-pattern: a done marker that expires before the retries end.

    Raises:
        ConfigError: ``ttl`` is shorter than twice the retry window.
    """
    if ttl < 2 * retry_window:
        raise ConfigError(
            f"idempotency TTL for {key!r} is {ttl:g}s, shorter than twice the task's retry "
            f"window ({retry_window:g}s): a retry after the marker expired would run the "
            "side effect again; raise the TTL or shorten the retries"
        )
