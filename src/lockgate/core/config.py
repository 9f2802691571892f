"""Configuration: frozen keyword-only dataclasses, grouped by concern.

Durations accept ``float`` seconds or ``timedelta`` and are normalised once, here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal, cast

from lockgate.errors import ConfigError

Backend = Literal["streams", "sorted"]
PolicyName = Literal["weighted", "strict"]

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
REDIS_URL_ENV = "LOCKGATE_REDIS_URL"
DEFAULT_LEVELS: Mapping[str, int] = {"critical": 10, "normal": 5, "low": 1}
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


def seconds(value: float | timedelta, what: str) -> float:
    """Normalise a duration to seconds.

    Raises:
        ConfigError: when the duration is negative or not a number.
    """
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{what} must be seconds or a timedelta, got {value!r}")
    if value < 0:
        raise ConfigError(f"{what} must not be negative, got {value!r}")
    return float(value)


def check_name(value: str, what: str) -> str:
    """Validate a namespace, queue or level name (it becomes part of Redis keys)."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ConfigError(
            f"{what} {value!r} must be 1-64 characters of letters, digits, '_', '.' or '-'"
        )
    return value


MAX_TASK_NAME = 200
_TASK_NAME = re.compile(
    rf"[A-Za-z0-9_.:\-]{{1,{MAX_TASK_NAME}}}"
)  # fullmatch ("$" passes a last "\n")
_NOT_IN_TASK_NAME = re.compile(r"[^A-Za-z0-9_.:\-]")


def check_task_name(value: str) -> str:
    """Validate a task name: it goes into Redis keys, log lines and the dashboard.

    Raises:
        ConfigError: not 1-200 ASCII letters, digits, ``_``, ``.``, ``-`` or ``:``
            (dotted Celery-style names fit), in one line naming the bad name.
    """
    if isinstance(value, str) and _TASK_NAME.fullmatch(value):
        return value
    shown = repr(value)
    if isinstance(value, str) and len(value) > 60:
        shown = f"{value[:60]!r}... ({len(value)} characters)"
    raise ConfigError(
        f"task name {shown} must be 1-{MAX_TASK_NAME} characters of ASCII letters, digits, "
        "'_', '.', '-' or ':'"
    )


def default_task_name(func: object) -> str:
    """The name of a task declared without one: the function's ``__name__`` with each
    character a task name cannot hold made ``_`` (a lambda is ``_lambda_``), cut to 200
    characters. A nested function's ``__name__`` has no ``<locals>`` (its qualname has)."""
    name = _NOT_IN_TASK_NAME.sub("_", str(getattr(func, "__name__", "") or "task"))
    return name[:MAX_TASK_NAME]


def resolve_redis_url(url: str | None) -> str:
    """The URL to use: the argument, else ``$LOCKGATE_REDIS_URL``, else the local default."""
    return url or os.environ.get(REDIS_URL_ENV) or DEFAULT_REDIS_URL


@dataclass(frozen=True, kw_only=True)
class Levels:
    """Priority levels: order is precedence (first is highest), value is the weight."""

    weights: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_LEVELS))

    def __post_init__(self) -> None:
        if not self.weights:
            raise ConfigError("levels must name at least one level")
        for name, weight in self.weights.items():
            check_name(name, "level")
            if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
                raise ConfigError(f"level {name!r} needs a whole weight >= 1, got {weight!r}")
        object.__setattr__(self, "weights", dict(self.weights))

    @property
    def names(self) -> tuple[str, ...]:
        """Level names, highest precedence first."""
        return tuple(self.weights)

    @property
    def default(self) -> str:
        """The middle level: a task's when it names none (``normal`` with the default
        levels)."""
        names = self.names
        return names[len(names) // 2]

    def index(self, name: str) -> int:
        """Position of a level (0 is the highest).

        Raises:
            ConfigError: the level is not declared.
        """
        try:
            return self.names.index(name)
        except ValueError:
            raise ConfigError(
                f"unknown priority {name!r}; declared levels: {', '.join(self.names)}"
            ) from None


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """How a worker runs.

    Attributes:
        concurrency: jobs run at once (async tasks on the loop, sync ones in threads).
        policy: ``weighted`` (shares follow the level weights) or ``strict``.
        queues: queue names to serve; empty means every queue the app's tasks use.
        grace_period: how long a stopping worker lets running jobs finish.
        idle_wait: the longest single blocking wait for new work.
        visibility_timeout: how long a job taken by a worker that stopped heartbeating (it
            died) stays invisible before another worker takes it over. Running jobs are
            heartbeated every third of it, so it bounds recovery time, not job length.
        max_deliveries: a job that killed its process this many times (it is run in a
            child process of its own once it has been delivered before) goes to the
            dead-letter queue; one delivered four times as often, whatever the cause, too.
        claim_lease: how long the claim of an ``idempotent=True`` job outlives a worker that
            stopped renewing it. It bounds how long a job waits after its worker died, and
            it is how long a Redis outage (a restart, a failover) may last before a job
            whose acknowledgement was held up could run again elsewhere.
        scheduler: enqueue the ticks of the ``@app.cron`` tasks of the queues served
            here (each tick once, however many workers do it); False leaves it to others.
        redis_wait: how long a starting worker waits for Redis to answer, trying again
            with capped backoff (a docker-compose start order); 0 raises ``ConnectionFailed``
            at once. ``lockgate worker --wait`` sets it (30 s by default there).
    """

    concurrency: int = 8
    policy: PolicyName = "weighted"
    queues: tuple[str, ...] = ()
    grace_period: float | timedelta = 30.0
    idle_wait: float | timedelta = 5.0
    visibility_timeout: float | timedelta = 30.0
    max_deliveries: int = 5
    claim_lease: float | timedelta = 30.0
    scheduler: bool = True
    redis_wait: float | timedelta = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "redis_wait", max(0.0, seconds(self.redis_wait, "redis_wait")))
        if not isinstance(self.scheduler, bool):
            raise ConfigError(f"scheduler must be True or False, got {self.scheduler!r}")
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int):
            raise ConfigError(f"concurrency must be a whole number, got {self.concurrency!r}")
        if self.concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.policy not in ("weighted", "strict"):
            raise ConfigError(f"policy must be 'weighted' or 'strict', got {self.policy!r}")
        for queue in self.queues:
            check_name(queue, "queue")
        object.__setattr__(self, "grace_period", seconds(self.grace_period, "grace_period"))
        object.__setattr__(self, "idle_wait", seconds(self.idle_wait, "idle_wait"))
        visibility = seconds(self.visibility_timeout, "visibility_timeout")
        if visibility < 0.1:
            raise ConfigError(f"visibility_timeout must be at least 0.1 s, got {visibility}")
        object.__setattr__(self, "visibility_timeout", visibility)
        if isinstance(self.max_deliveries, bool) or not isinstance(self.max_deliveries, int):
            raise ConfigError(f"max_deliveries must be a whole number: {self.max_deliveries!r}")
        if self.max_deliveries < 1:
            raise ConfigError(f"max_deliveries must be >= 1, got {self.max_deliveries}")
        lease = seconds(self.claim_lease, "claim_lease")
        if lease < 0.1:
            raise ConfigError(f"claim_lease must be at least 0.1 s, got {lease}")
        object.__setattr__(self, "claim_lease", lease)

    @property
    def grace_seconds(self) -> float:
        """Grace period in seconds."""
        return cast(float, self.grace_period)  # normalised in __post_init__

    @property
    def idle_wait_seconds(self) -> float:
        """Idle wait in seconds."""
        return cast(float, self.idle_wait)  # normalised in __post_init__

    @property
    def claim_lease_seconds(self) -> float:
        """Claim lease in seconds."""
        return cast(float, self.claim_lease)  # normalised in __post_init__

    @property
    def redis_wait_seconds(self) -> float:
        """How long a starting worker waits for Redis, in seconds."""
        return cast(float, self.redis_wait)  # normalised in __post_init__

    @property
    def visibility_seconds(self) -> float:
        """Visibility timeout in seconds."""
        return cast(float, self.visibility_timeout)  # normalised in __post_init__
