"""Configuration validation: bad values fail early with ConfigError, durations normalise."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from lockgate import App, ConfigError, WorkerConfig
from lockgate.core.config import DEFAULT_LEVELS, Levels, check_name, resolve_redis_url, seconds

# Apps below never connect: construction is lazy, so a dead port proves no I/O happens.
NOWHERE = "redis://127.0.0.1:1/0"


@pytest.mark.parametrize(
    "weights",
    [
        {},
        {"critical": 0},
        {"critical": -1},
        {"critical": 2.5},
        {"critical": 10, "low": 1.0},
        {"critical": True},
        {"critical": "10"},
        {"bad name": 1},
        {"": 1},
        {"x" * 65: 1},
        {"a:b": 1},
        {"{tag}": 1},
    ],
)
def test_bad_levels_are_rejected(weights: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        Levels(weights=weights)
    with pytest.raises(ConfigError):
        App(NOWHERE, namespace="ns", levels=weights)


def test_levels_keep_declaration_order_as_precedence() -> None:
    levels = Levels(weights={"urgent": 3, "bulk": 1, "later": 2})
    assert levels.names == ("urgent", "bulk", "later")
    assert levels.index("later") == 2
    with pytest.raises(ConfigError, match="unknown priority 'nope'"):
        levels.index("nope")


def test_default_levels() -> None:
    assert dict(Levels().weights) == {"critical": 10, "normal": 5, "low": 1}
    assert dict(DEFAULT_LEVELS) == {"critical": 10, "normal": 5, "low": 1}


def test_levels_are_copied() -> None:
    weights = {"a": 2, "b": 1}
    levels = Levels(weights=weights)
    weights["c"] = 1
    assert levels.names == ("a", "b")


@pytest.mark.parametrize("concurrency", [0, -3, True, 1.5, "4"])
def test_bad_concurrency(concurrency: Any) -> None:
    with pytest.raises(ConfigError, match="concurrency"):
        WorkerConfig(concurrency=concurrency)


def test_unknown_policy() -> None:
    with pytest.raises(ConfigError, match="policy"):
        WorkerConfig(policy="fifo")  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["grace_period", "idle_wait", "visibility_timeout"])
def test_negative_durations(field: str) -> None:
    with pytest.raises(ConfigError, match="must not be negative"):
        WorkerConfig(**{field: -1.0})
    with pytest.raises(ConfigError, match="must not be negative"):
        WorkerConfig(**{field: timedelta(seconds=-1)})


@pytest.mark.parametrize("value", ["5", None, True])
def test_durations_must_be_numbers(value: Any) -> None:
    with pytest.raises(ConfigError, match="seconds or a timedelta"):
        WorkerConfig(grace_period=value)


def test_timedelta_durations_are_normalised_to_seconds() -> None:
    config = WorkerConfig(
        grace_period=timedelta(minutes=2),
        idle_wait=timedelta(milliseconds=250),
        visibility_timeout=timedelta(seconds=3),
    )
    assert config.grace_period == 120.0
    assert config.grace_seconds == 120.0
    assert config.idle_wait_seconds == 0.25
    assert config.visibility_timeout == 3.0
    assert config.visibility_seconds == 3.0
    assert isinstance(config.grace_period, float)
    assert isinstance(config.visibility_timeout, float)


def test_worker_config_defaults() -> None:
    config = WorkerConfig()
    assert (config.concurrency, config.policy, config.queues) == (8, "weighted", ())
    assert (config.grace_seconds, config.idle_wait_seconds) == (30, 5)
    assert (config.visibility_seconds, config.max_deliveries) == (30, 5)


def test_worker_config_is_frozen_and_keyword_only() -> None:
    config = WorkerConfig()
    with pytest.raises(AttributeError):
        config.concurrency = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        WorkerConfig(4)  # type: ignore[misc]


def test_visibility_timeout_has_a_floor() -> None:
    with pytest.raises(ConfigError, match="visibility_timeout"):
        WorkerConfig(visibility_timeout=0.05)
    assert WorkerConfig(visibility_timeout=0.1).visibility_seconds == 0.1


def test_lease_was_renamed_to_visibility_timeout() -> None:
    with pytest.raises(TypeError, match="lease"):
        WorkerConfig(lease=30.0)  # type: ignore[call-arg]


@pytest.mark.parametrize("value", [0, -1, True, 2.5, "5"])
def test_bad_max_deliveries(value: Any) -> None:
    with pytest.raises(ConfigError, match="max_deliveries"):
        WorkerConfig(max_deliveries=value)
    assert WorkerConfig(max_deliveries=1).max_deliveries == 1


def test_bad_queue_names() -> None:
    with pytest.raises(ConfigError, match="queue"):
        WorkerConfig(queues=("ok", "not ok"))


def test_seconds() -> None:
    assert seconds(3, "x") == 3.0
    assert seconds(timedelta(milliseconds=1500), "x") == 1.5
    with pytest.raises(ConfigError, match="x must not be negative"):
        seconds(-0.5, "x")


@pytest.mark.parametrize("name", ["a", "A-b_c.9", "x" * 64])
def test_check_name_accepts(name: str) -> None:
    assert check_name(name, "queue") == name


@pytest.mark.parametrize("name", ["", "x" * 65, "a b", "a:b", "a{b}", "é", 5, "a\n"])
def test_check_name_rejects(name: Any) -> None:
    with pytest.raises(ConfigError):
        check_name(name, "queue")


def test_app_rejects_bad_namespace_and_aging() -> None:
    with pytest.raises(ConfigError, match="namespace"):
        App(NOWHERE, namespace="a:b")
    with pytest.raises(ConfigError, match="aging"):
        App(NOWHERE, namespace="ns", backend="sorted", aging=-1)
    assert App(NOWHERE, namespace="ns", aging=timedelta(seconds=5)).aging_seconds == 5.0


def test_redis_url_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCKGATE_REDIS_URL", raising=False)
    assert resolve_redis_url(None) == "redis://127.0.0.1:6379/0"
    assert resolve_redis_url("redis://h:1/2") == "redis://h:1/2"
    monkeypatch.setenv("LOCKGATE_REDIS_URL", "redis://env:7/0")
    assert resolve_redis_url(None) == "redis://env:7/0"
    assert resolve_redis_url("redis://h:1/2") == "redis://h:1/2"
