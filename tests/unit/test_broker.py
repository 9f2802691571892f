"""Broker boundary helpers: URL masking, error translation, batching, reconnect backoff."""

from __future__ import annotations

import itertools

import pytest
import redis

from lockgate import BrokerError, ConfigError, ConnectionFailed, ScriptError
from lockgate.broker import EnqueuePlan, async_client, batches, masked, sync_client, translated
from lockgate.policy import reconnect_delay


def test_masked_hides_only_the_password() -> None:
    assert masked("redis://user:s3cret@host:6379/0") == "redis://user:***@host:6379/0"
    assert masked("redis://:s3cret@host:6379/0") == "redis://:***@host:6379/0"
    assert masked("redis://host:6379/0") == "redis://host:6379/0"


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (redis.ConnectionError("refused"), ConnectionFailed),
        (redis.TimeoutError("slow"), ConnectionFailed),
        (OSError("unreachable"), ConnectionFailed),
        (redis.ResponseError("NOSCRIPT No matching script"), ScriptError),
        (redis.ResponseError("Error running script (call to f_x)"), ScriptError),
        (redis.ResponseError("WRONGTYPE Operation against a key"), BrokerError),
        (redis.RedisError("other"), BrokerError),
    ],
)
def test_translated_maps_redis_errors(raised: Exception, expected: type[Exception]) -> None:
    with pytest.raises(expected) as info, translated("redis://u:pw@h:1/0"):
        raise raised
    assert info.value.__cause__ is raised
    assert "pw" not in str(info.value)


def test_connection_failed_keeps_the_masked_url() -> None:
    with pytest.raises(ConnectionFailed) as info, translated("redis://u:pw@h:1/0"):
        raise redis.ConnectionError("refused")
    assert info.value.url == "redis://u:***@h:1/0"
    assert info.value.reason == "refused"


def test_translated_lets_other_errors_through() -> None:
    with pytest.raises(KeyError), translated("redis://h:1/0"):
        raise KeyError("x")


@pytest.mark.parametrize("factory", [sync_client, async_client])
def test_clients_reject_urls_that_are_not_redis(factory: object) -> None:
    with pytest.raises(ConfigError, match="invalid Redis URL"):
        factory("http://example.com")  # type: ignore[operator]


def test_batches() -> None:
    assert [list(r) for r in batches(5, 2)] == [[0, 1], [2, 3], [4]]
    assert list(batches(0, 2)) == []
    assert [len(r) for r in batches(1001)] == [500, 500, 1]


def test_enqueue_plan_maps_replies_back_to_the_callers_order() -> None:
    plan = EnqueuePlan(calls=[], positions=[[0, 2], [1, 3]])
    assert plan.created([[b"1-0", 0], [0, 1]]) == [True, False, False, True]


def test_reconnect_delay_backs_off_to_a_cap() -> None:
    delays = [reconnect_delay(n) for n in range(12)]
    assert delays[0] == 0.1
    assert all(a <= b for a, b in itertools.pairwise(delays))
    assert max(delays) == 5.0
    assert reconnect_delay(10**6) == 5.0
