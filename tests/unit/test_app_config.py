"""The App's arguments, validated by concern (lockgate.core.app_config): what App takes."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from lockgate import App, ConfigError
from lockgate.core.app_config import (
    CompatibilityConfig,
    ConnectionConfig,
    LevelsConfig,
    LimitsConfig,
)
from lockgate.core.config import DEFAULT_REDIS_URL, REDIS_URL_ENV, Levels

NOWHERE = "redis://127.0.0.1:1/0"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"namespace": "no spaces"}, "namespace 'no spaces' must be 1-64 characters"),
        ({"levels": {}}, "levels must name at least one level"),
        ({"backend": "redis"}, "backend must be 'streams' or 'sorted', got 'redis'"),
        ({"aging": -1}, "aging must not be negative, got -1"),
        ({"max_payload_bytes": 1.5}, "max_payload_bytes must be a whole number: 1.5"),
        ({"max_payload_bytes": 63}, "max_payload_bytes must be >= 64, got 63"),
        (
            {"dead_letter_max_len": 0},
            "dead_letter_max_len must be a whole number >= 1 or None, got 0",
        ),
        (
            {"dead_letter_max_age": 0.0004},
            "dead_letter_max_age must be at least 1 ms or None, got 0.0004",
        ),
        (
            {"dead_letter_max_age": "30d"},
            "dead_letter_max_age must be seconds or a timedelta, got '30d'",
        ),
        ({"legacy_markers": 1}, "legacy_markers must be True or False, got 1"),
        ({"status_ttl": -1}, "status_ttl must not be negative, got -1"),
        ({"partitions": True}, "partitions must be a whole number, got True"),
        ({"partitions": 1025}, "partitions must be from 1 to 1024, got 1025"),
        (
            {"partitions": 2, "backend": "sorted"},
            "partitions=2 needs backend='streams': the sorted backend keeps one partition "
            "(one ranked set per queue)",
        ),
    ],
)
def test_bad_arguments_are_one_config_error_each(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):
        App(NOWHERE, **{"namespace": "unit", **arguments})


def test_the_app_takes_its_attributes_from_the_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    app = App(
        namespace="unit",
        levels={"a": 3, "b": 1},
        aging=timedelta(seconds=5),
        dead_letter_max_len=None,
        dead_letter_max_age=2.5,
        status_ttl=0.0001,
        legacy_markers=True,
    )
    assert (app.redis_url, app.namespace, app.backend, app.partitions) == (
        DEFAULT_REDIS_URL,
        "unit",
        "streams",
        1,
    )
    assert (app.levels, app.aging_seconds) == (Levels(weights={"a": 3, "b": 1}), 5.0)
    assert (app.dead_letter_max_len, app.dead_letter_max_age_ms) == (0, 2500)
    assert (app.status_ttl_ms, app.legacy_markers, app.max_payload_bytes) == (1, True, 1_048_576)
    assert App(NOWHERE, status_ttl=None).status_ttl_ms == 0


def test_the_groups_normalise_what_they_validate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REDIS_URL_ENV, "redis://elsewhere:6380/1")
    connection = ConnectionConfig(redis_url=None, namespace="n", backend="sorted", partitions=1)
    assert connection.url == "redis://elsewhere:6380/1"
    ranking = LevelsConfig(levels=None, aging=timedelta(minutes=1))
    assert (ranking.order, ranking.aging_seconds) == (Levels(), 60.0)
    limits = LimitsConfig(
        max_payload_bytes=64,
        dead_letter_max_len=7,
        dead_letter_max_age=None,
        status_ttl=timedelta(minutes=10),
    )
    assert (limits.trim_len, limits.trim_age_ms, limits.status_ttl_ms) == (7, 0, 600_000)
    assert CompatibilityConfig(legacy_markers=False).legacy_markers is False
