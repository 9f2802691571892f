"""A task's settings: the options of ``@app.task(...)`` and ``@app.cron(...)``, declared
once. Pure, no I/O.

The fields of :class:`TaskSettings` are those decorators' keyword arguments, with their
defaults and their documentation, and its ``__post_init__`` validates and normalises them.
:class:`TaskKeywords` types the keyword arguments for type checkers, which read only a
TypedDict written out: it repeats the fields' names and types, and a unit test keeps the
two equal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from typing import Any, TypedDict, cast

from lockgate.core.config import (
    Levels,
    check_name,
    check_task_name,
    default_task_name,
    seconds,
)
from lockgate.core.ratelimit import Rate, parse_rate
from lockgate.core.retry import DEFAULT_TTL, Backoff, RetryPolicy, check_expiry, check_ttl
from lockgate.errors import ConfigError


class TaskKeywords(TypedDict, total=False):
    """The keyword arguments of ``@app.task(...)`` and ``@app.cron(...)``: the fields of
    :class:`TaskSettings`, which documents them."""

    priority: str | None
    queue: str
    name: str | None
    retries: int
    backoff: float | timedelta | Backoff
    timeout: float | timedelta | None
    retry_on: tuple[type[BaseException], ...]
    dead_on: tuple[type[BaseException], ...]
    idempotent: bool
    idempotency_ttl: float | timedelta
    expires: float | timedelta | None
    rate_limit: str | None
    keep_result: float | timedelta | None
    key_by: str | Callable[..., Any] | None
    key_concurrency: int | None
    key_rate_limit: str | None
    debounce: float | timedelta | None
    debounce_max: float | timedelta | None
    secret_args: bool


@dataclass(frozen=True, kw_only=True)
class TaskSettings:
    """The options of a task. [App.task][lockgate.App.task] and
    [App.cron][lockgate.App.cron] take each as a keyword argument, and no other.

    Durations take seconds or a ``timedelta``. The checks whose errors name the task (its
    TTL, expiry and rate limit) wait for its name when it is the function's.

    Raises:
        ConfigError: a bad queue or task name, a bad retry option, an idempotency TTL
            under twice the retry window, an expiry that is not positive or is shorter
            than the first retry's delay, a ``rate_limit`` or ``key_rate_limit`` not of
            the form ``"N/s"``, ``"N/m"``, ``"N/h"``, a ``key_concurrency`` that is not a
            whole number >= 1, or either of those two without ``key_by``.
    """

    priority: str | None = None
    """Its level; defaults to the middle level."""
    queue: str = "default"
    """Its queue."""
    name: str | None = None
    """Its name on the wire: 1-200 ASCII letters, digits, ``_``, ``.``, ``-`` or ``:``
    (``billing.charge_card``); defaults to the function's name, each other character
    made ``_``."""
    retries: int = 3
    """How often a failed job is retried before it is dead-lettered. ``RetryableError``
    and runs over ``timeout`` always retry; any other ``Exception`` does too, unless
    ``retry_on`` is given (then only its types) or its type is in ``dead_on``."""
    backoff: float | timedelta | Backoff = 1.0
    """A [Backoff][lockgate.Backoff], or the first retry's delay ceiling in seconds
    (doubling per attempt, capped at 5 minutes, full jitter)."""
    timeout: float | timedelta | None = None
    """Longest run; async runs are cancelled, sync ones abandoned."""
    retry_on: tuple[type[BaseException], ...] = ()
    """When given, the only exception types retried (besides ``RetryableError`` and
    timeouts); empty: every ``Exception`` is retried."""
    dead_on: tuple[type[BaseException], ...] = ()
    """Exception types never retried: the job is dead-lettered at once. Where an error is
    an instance of types in both ``retry_on`` and ``dead_on``, the nearer base class wins
    (``retry_on=(ConnectionError,), dead_on=(Exception,)`` retries connection errors
    only). ``dead_on=(Exception,)`` is 0.3's rule."""
    idempotent: bool = False
    """Claim the job id before running, so a job that already succeeded (a redelivery, a
    replay) is acknowledged without running again."""
    idempotency_ttl: float | timedelta = DEFAULT_TTL
    """How long the done marker of an idempotent task (and the default of its steps)
    blocks duplicates (a day unless given); at least twice the retry window."""
    expires: float | timedelta | None = None
    """A job not started within this many seconds of its enqueue (any attempt) is dropped
    unrun, acknowledged and logged: an OTP nobody waits for. None: jobs never expire."""
    rate_limit: str | None = None
    """At most this many starts, shared by every worker of the namespace: ``"N/s"``,
    ``"N/m"`` or ``"N/h"`` (``"100/s"``), spaced evenly (one every ``period / N``). A job
    over it is put back until its turn, spending no attempt, and its worker takes other
    work meanwhile. None: no limit."""
    keep_result: float | timedelta | None = None
    """Seconds (or a timedelta) each job's return value (or its error) is kept for
    ``result()`` and ``App.job``, JSON-encoded like the jobs. None: not kept (the status
    alone is, for ``App(status_ttl=...)``)."""
    key_by: str | Callable[..., Any] | None = None
    """The jobs' fairness key (a tenant, an account): the name of one of the task's
    parameters, whose value's ``str()`` is the key, or a function called with the job's
    arguments as the task is, returning a ``str``. Within a level, jobs are served
    round-robin across the keys with jobs waiting, whatever their task; jobs without a key
    (other tasks', or an empty key) take one turn together. None: no key."""
    key_concurrency: int | None = None
    """At most this many jobs of one key of this task run at once, across every worker
    (needs ``key_by``). A job over it is not started, and does not hold back the jobs of
    other keys or tasks. None: no limit."""
    key_rate_limit: str | None = None
    """At most this many starts per key of this task (needs ``key_by``), shared by every
    worker, in the form of ``rate_limit``. A job over it is put back until its turn,
    spending no attempt. None: no limit."""
    debounce: float | timedelta | None = None
    """Seconds (or a timedelta): a job of this task starts this long after its enqueue,
    and an enqueue with the id of one still waiting replaces its arguments and pushes its
    start back to this long after itself (the job runs once, with the last arguments; the
    enqueue returns ``created=False``); an enqueue while the job runs queues one more run
    after it. Every enqueue needs a ``job_id``. None: no debounce."""
    debounce_max: float | timedelta | None = None
    """With ``debounce``: a debounced job starts at most this long after the first
    enqueue it merged, however often it is pushed back. None: no bound."""
    secret_args: bool = False
    """The jobs' arguments and results are secrets (card tokens, e-mail addresses): job
    logs, ``lockgate job``, dead-letter listings and the dashboard show ``***`` for each
    value (keyword names stay). They still travel in the job, as JSON in Redis, and the
    task receives them as they are; ``App.job`` and ``result()`` still give the result to
    the code that asks. An error's message is shown as raised: do not put the arguments
    in it."""
    retry: RetryPolicy = field(init=False, repr=False, compare=False)
    """The retry policy of ``retries``, ``backoff``, ``retry_on``, ``dead_on`` and
    ``timeout``."""
    rate: Rate | None = field(init=False, repr=False, compare=False)
    """``rate_limit``, parsed (None until the task's name is known)."""
    key_rate: Rate | None = field(init=False, repr=False, compare=False)
    """``key_rate_limit``, parsed (None until the task's name is known)."""

    def __post_init__(self) -> None:
        backoff = self.backoff
        retry = RetryPolicy(
            retries=self.retries,
            backoff=backoff if isinstance(backoff, Backoff) else Backoff(base=backoff),
            retry_on=tuple(self.retry_on),
            dead_on=tuple(self.dead_on),
            timeout=_seconds_or_none(self.timeout, "timeout"),
        )
        object.__setattr__(self, "retry", retry)
        ttl = seconds(self.idempotency_ttl, "idempotency_ttl")
        object.__setattr__(self, "idempotency_ttl", ttl)
        object.__setattr__(self, "expires", _seconds_or_none(self.expires, "expires"))
        object.__setattr__(self, "keep_result", _seconds_or_none(self.keep_result, "keep_result"))
        object.__setattr__(self, "rate", None)
        object.__setattr__(self, "key_rate", None)
        limit = self.key_concurrency
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)
                                  or limit < 1):  # fmt: skip
            raise ConfigError(f"key_concurrency must be a whole number >= 1, not {limit!r}")
        self._check_debounce()
        if not isinstance(self.secret_args, bool):
            raise ConfigError(f"secret_args must be True or False, not {self.secret_args!r}")
        for option in ("key_concurrency", "key_rate_limit"):
            if getattr(self, option) is not None and self.key_by is None:
                raise ConfigError(f"{option} limits the jobs of one key: it needs key_by")
        if self.name is not None:
            self._check_named(check_task_name(self.name))
        check_name(self.queue, "queue")

    def _check_debounce(self) -> None:
        wait = _seconds_or_none(self.debounce, "debounce")
        cap = _seconds_or_none(self.debounce_max, "debounce_max")
        if cap is not None and wait is None:
            raise ConfigError("debounce_max bounds a debounce: it needs debounce")
        if wait is not None and wait <= 0:
            raise ConfigError(f"debounce must be positive, not {wait:g} s")
        if cap is not None and wait is not None and cap < wait:
            raise ConfigError(f"debounce_max ({cap:g} s) must be at least debounce ({wait:g} s)")
        object.__setattr__(self, "debounce", wait)
        object.__setattr__(self, "debounce_max", cap)

    def _check_named(self, task: str) -> None:
        if self.idempotent:  # the job's own done marker must outlast its retries
            check_ttl(f"job ids of task {task!r}", self.idempotency_ttl_seconds, self.retry.window)
        check_expiry(task, self.expires_seconds, self.retry)
        if self.rate_limit is not None:
            object.__setattr__(self, "rate", parse_rate(self.rate_limit, task))
        if self.key_rate_limit is not None:
            key_rate = parse_rate(self.key_rate_limit, task, "key_rate_limit")
            object.__setattr__(self, "key_rate", key_rate)

    @classmethod
    def of(cls, keywords: TaskKeywords, caller: str) -> TaskSettings:
        """The settings of a decorator's keyword arguments.

        Raises:
            TypeError: a keyword is not an option (``caller`` names the decorator).
            ConfigError: see the class.
        """
        for key in keywords:
            if key not in OPTIONS:
                raise TypeError(f"{caller}() got an unexpected keyword argument {key!r}")
        return cls(**keywords)

    def task_name(self, func: object) -> str:
        """The task's name: ``name``, else the function's (see
        :func:`~lockgate.core.config.default_task_name`)."""
        return self.name if self.name is not None else default_task_name(func)

    def level(self, levels: Levels) -> str:
        """The task's level: ``priority``, else the middle one of ``levels``.

        Raises:
            ConfigError: it is not one of ``levels``.
        """
        level = self.priority or levels.default
        levels.index(level)
        return level

    def declared(self, func: object, levels: Levels) -> TaskSettings:
        """These settings with the task's level and name filled in, and the checks that
        name the task made.

        Raises:
            ConfigError: the level is not one of ``levels``, or see the class.
        """
        return replace(self, priority=self.level(levels), name=self.task_name(func))

    @property
    def idempotency_ttl_seconds(self) -> float:
        """``idempotency_ttl`` in seconds."""
        return cast(float, self.idempotency_ttl)  # normalised in __post_init__

    @property
    def expires_seconds(self) -> float | None:
        """``expires`` in seconds (None: never)."""
        return cast(float | None, self.expires)  # normalised in __post_init__

    @property
    def debounce_ms(self) -> tuple[int, int] | None:
        """``debounce`` and ``debounce_max`` in ms (0: no bound); None: not debounced."""
        wait = cast(float | None, self.debounce)  # normalised in __post_init__
        if wait is None:
            return None
        cap = cast(float | None, self.debounce_max)
        return max(1, round(wait * 1000)), round(cap * 1000) if cap is not None else 0

    @property
    def keep_result_ms(self) -> int:
        """``keep_result`` in milliseconds (0: not kept)."""
        kept = cast(float | None, self.keep_result)  # normalised in __post_init__
        return max(1, round(kept * 1000)) if kept else 0


def _seconds_or_none(value: float | timedelta | None, what: str) -> float | None:
    return seconds(value, what) if value is not None else None


# The keyword arguments TaskSettings takes: the options of a task.
OPTIONS = frozenset(option.name for option in fields(TaskSettings) if option.init)
