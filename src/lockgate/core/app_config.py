"""The App's arguments, validated: frozen keyword-only dataclasses, one per concern. Pure.

``App(...)`` keeps its keyword arguments, their defaults and their documentation
(:class:`lockgate.api.app.App`); it hands them to these groups, each of which validates
and normalises its own in ``__post_init__``, and takes its attributes from what they
made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from lockgate.core.config import Backend, Levels, check_name, resolve_redis_url, seconds
from lockgate.errors import ConfigError

MAX_PARTITIONS = 1024


def check_partitions(value: object) -> int:
    """The partition count, validated.

    Raises:
        ConfigError: not a whole number from 1 to :data:`MAX_PARTITIONS`.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"partitions must be a whole number, got {value!r}")
    if not 1 <= value <= MAX_PARTITIONS:
        raise ConfigError(f"partitions must be from 1 to {MAX_PARTITIONS}, got {value}")
    return value


def _whole(value: object) -> bool:
    """Whether ``value`` is a whole number (an ``int``, not a ``bool``)."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, kw_only=True)
class ConnectionConfig:
    """Where an App's jobs live: ``App(redis_url, namespace, backend, partitions)``.

    Raises:
        ConfigError: a bad namespace, backend or partition count, or several partitions
            with the sorted backend.
    """

    redis_url: str | None
    namespace: str
    backend: Backend
    partitions: int
    url: str = field(init=False)
    """``redis_url``, else ``$LOCKGATE_REDIS_URL``, else the local default."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", resolve_redis_url(self.redis_url))
        check_name(self.namespace, "namespace")
        if self.backend not in ("streams", "sorted"):
            raise ConfigError(f"backend must be 'streams' or 'sorted', got {self.backend!r}")
        check_partitions(self.partitions)
        if self.partitions > 1 and self.backend != "streams":
            raise ConfigError(
                f"partitions={self.partitions} needs backend='streams': the sorted backend "
                "keeps one partition (one ranked set per queue)"
            )


@dataclass(frozen=True, kw_only=True)
class LevelsConfig:
    """Which job goes first: ``App(levels, aging)``.

    Raises:
        ConfigError: bad levels (see :class:`~lockgate.core.config.Levels`) or aging.
    """

    levels: Mapping[str, int] | None
    aging: float | timedelta
    order: Levels = field(init=False)
    """The levels, highest precedence first (the default three for None)."""
    aging_seconds: float = field(init=False)
    """``aging`` in seconds."""

    def __post_init__(self) -> None:
        order = Levels(weights=self.levels) if self.levels is not None else Levels()
        object.__setattr__(self, "order", order)
        object.__setattr__(self, "aging_seconds", seconds(self.aging, "aging"))


@dataclass(frozen=True, kw_only=True)
class LimitsConfig:
    """What an App lets grow, and for how long: ``App(max_payload_bytes,
    dead_letter_max_len, dead_letter_max_age, status_ttl)``.

    Raises:
        ConfigError: a payload limit that is not a whole number of at least 64, a
            dead-letter limit that is not a whole number of at least 1 (or None), a
            dead-letter age under 1 ms, or a bad duration.
    """

    max_payload_bytes: int
    dead_letter_max_len: int | None
    dead_letter_max_age: float | timedelta | None
    status_ttl: float | timedelta | None
    # 0 is "no limit" in the ARGV of the scripts that trim (deadletter.trim_args).
    trim_len: int = field(init=False)
    """``dead_letter_max_len`` as the scripts that trim take it: 0 for no limit."""
    trim_age_ms: int = field(init=False)
    """``dead_letter_max_age`` in milliseconds: 0 for no limit."""
    status_ttl_ms: int = field(init=False)
    """``status_ttl`` in milliseconds: 0 for not kept."""

    def __post_init__(self) -> None:
        size = self.max_payload_bytes
        if not _whole(size):
            raise ConfigError(f"max_payload_bytes must be a whole number: {size!r}")
        if size < 64:
            raise ConfigError(f"max_payload_bytes must be >= 64, got {size}")
        count = self.dead_letter_max_len
        if count is not None and (not _whole(count) or count < 1):
            raise ConfigError(
                f"dead_letter_max_len must be a whole number >= 1 or None, got {count!r}"
            )
        object.__setattr__(self, "trim_len", count or 0)
        age = self.dead_letter_max_age
        age_ms = 0 if age is None else round(seconds(age, "dead_letter_max_age") * 1000)
        if age is not None and age_ms < 1:
            raise ConfigError(f"dead_letter_max_age must be at least 1 ms or None, got {age!r}")
        object.__setattr__(self, "trim_age_ms", age_ms)
        kept = 0.0 if self.status_ttl is None else seconds(self.status_ttl, "status_ttl")
        object.__setattr__(self, "status_ttl_ms", max(1, round(kept * 1000)) if kept else 0)


@dataclass(frozen=True, kw_only=True)
class CompatibilityConfig:
    """What an App does for older releases: ``App(legacy_markers)``.

    Raises:
        ConfigError: ``legacy_markers`` is not a bool.
    """

    legacy_markers: bool

    def __post_init__(self) -> None:
        if not isinstance(self.legacy_markers, bool):
            raise ConfigError(f"legacy_markers must be True or False, got {self.legacy_markers!r}")
