"""Redis errors are named once (lockgate.faults): transient, reload or fatal, and a write
without a reply an unknown outcome. Pure."""

from __future__ import annotations

import pytest
import redis
from redis.backoff import NoBackoff
from redis.exceptions import NoPermissionError, NoScriptError, RedisClusterException

from lockgate.backend.faults import classify, translate, translated
from lockgate.backend.write_deadline import ChainedRetry
from lockgate.errors import (
    AccessDenied,
    BrokerError,
    ConfigError,
    ConnectionFailed,
    OutcomeUnknown,
    ScriptError,
    ServerBusy,
)

URL = "redis://:***@h:6379/0"


@pytest.mark.parametrize(
    "message",
    [
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        "LOADING Redis is loading the dataset in memory",
        "OOM command not allowed when used memory > 'maxmemory'.",
        "READONLY You can't write against a read only replica.",
        "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "CLUSTERDOWN The cluster is down",
        "UNBLOCKED force unblock from blocking operation, instance state changed",
    ],
)
def test_the_server_saying_not_now_is_transient(message: str) -> None:
    error = translate(redis.ResponseError(message), URL)
    assert isinstance(error, ServerBusy)
    assert classify(error) == "transient"


@pytest.mark.parametrize(
    "error",
    [redis.ConnectionError("Connection closed by server."), redis.TimeoutError(), OSError(104)],
)
def test_a_lost_connection_is_transient(error: Exception) -> None:
    translated = translate(error, URL)  # type: ignore[arg-type]
    assert isinstance(translated, ConnectionFailed)
    assert classify(translated) == "transient"
    assert URL in str(translated)


@pytest.mark.parametrize(
    "error",
    [
        NoPermissionError("NOPERM this user has no permissions to run the 'evalsha' command"),
        redis.AuthenticationError("WRONGPASS invalid username-password pair"),
        redis.ResponseError("ERR unknown command 'EVALSHA', with args beginning with: "),
        redis.ConnectionError("NOAUTH Authentication required."),
    ],
)
def test_a_refusal_that_cannot_heal_is_fatal_and_a_config_error(error: Exception) -> None:
    translated = translate(error, URL)  # type: ignore[arg-type]
    assert isinstance(translated, AccessDenied)
    assert isinstance(translated, ConfigError)  # the CLI exits 2
    assert classify(translated) == "fatal"


@pytest.mark.parametrize(
    "error",
    [
        NoScriptError("NOSCRIPT No matching script. Please use EVAL."),
        redis.ResponseError("Function not found"),
    ],
)
def test_a_flushed_script_cache_or_function_library_reloads(error: Exception) -> None:
    translated = translate(error, URL)  # type: ignore[arg-type]
    assert isinstance(translated, ScriptError)
    assert classify(translated) == "reload"


def test_anything_else_is_retried_not_dropped() -> None:
    error = translate(redis.ResponseError("WRONGTYPE Operation against a key"), URL)
    assert type(error) is BrokerError
    assert classify(error) == "transient"


def test_an_unknown_functions_command_says_which_redis_lockgate_needs() -> None:
    error = translate(
        redis.ResponseError("unknown command 'FCALL', with args beginning with: "), "r:6379"
    )
    assert isinstance(error, AccessDenied)
    assert "Redis 7.0 or newer" in str(error)
    # Redis 6 quotes the command in backticks.
    old = translate(
        redis.ResponseError("unknown command `FCALL`, with args beginning with: `x`, "), "r:6379"
    )
    assert "Redis 7.0 or newer" in str(old)
    other = translate(redis.ResponseError("unknown command 'XAUTOCLAIM'"), "r:6379")
    assert "7.0" not in str(other)


@pytest.mark.parametrize(
    "error",
    [
        redis.TimeoutError("Timeout reading from socket"),
        redis.TimeoutError("Timeout writing to socket"),
        redis.ConnectionError("Connection closed by server."),
        redis.ConnectionError("Error 104 while writing to socket. Connection reset by peer."),
        ConnectionResetError(104, "Connection reset by peer"),
        RedisClusterException("Redis Cluster cannot be connected."),
    ],
)
def test_a_write_without_a_reply_after_sending_is_an_unknown_outcome(error: Exception) -> None:
    with pytest.raises(OutcomeUnknown) as caught, translated(URL, ["a", "b"]):
        raise error
    assert caught.value.job_ids == ("a", "b")
    assert isinstance(caught.value, ConnectionFailed)
    assert "may have been queued" in str(caught.value)
    assert "a, b" in str(caught.value)


@pytest.mark.parametrize(
    "error",
    [
        redis.ConnectionError("Error 111 connecting to h:6379. Connection refused."),
        redis.TimeoutError("Timeout connecting to server"),
        redis.ConnectionError("No connection available."),
    ],
)
def test_a_write_refused_before_sending_is_a_plain_connection_failure(error: Exception) -> None:
    with pytest.raises(ConnectionFailed) as caught, translated(URL, ["a"]):
        raise error
    assert not isinstance(caught.value, OutcomeUnknown)


def test_a_read_that_timed_out_is_a_plain_connection_failure() -> None:
    with pytest.raises(ConnectionFailed) as caught, translated(URL):
        raise redis.TimeoutError("Timeout reading from socket")
    assert not isinstance(caught.value, OutcomeUnknown)


def test_a_write_the_server_refused_is_not_an_unknown_outcome() -> None:
    with pytest.raises(ServerBusy), translated(URL, ["a"]):
        raise redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'.")


def test_an_unknown_outcome_names_a_few_ids_and_keeps_them_all() -> None:
    ids = [f"job-{n}" for n in range(25)]
    error = OutcomeUnknown(URL, "Timeout reading from socket", ids)
    assert error.job_ids == tuple(ids)
    assert "job-9" in str(error) and "job-10" not in str(error)
    assert "and 15 more" in str(error)


async def retried(*errors: Exception) -> None:
    """What a client with one retry (as lockgate's async clients) raises when its two
    tries fail with ``errors``, in the block of an enqueue."""
    tries = list(errors)

    async def do() -> None:
        raise tries.pop(0)

    async def fail(error: Exception) -> None:
        pass

    retry = ChainedRetry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,))
    with translated(URL, ["a"]):
        await retry.call_with_retry(do, fail)


async def test_a_retry_refused_after_a_try_that_lost_its_reply_is_an_unknown_outcome() -> None:
    with pytest.raises(OutcomeUnknown) as caught:
        await retried(
            redis.ConnectionError("Connection closed by server."),
            redis.ConnectionError("Error 111 connecting to h:6379. Connection refused."),
        )
    assert caught.value.job_ids == ("a",)


async def test_two_refused_connects_are_a_plain_connection_failure() -> None:
    with pytest.raises(ConnectionFailed) as caught:
        await retried(
            redis.ConnectionError("Error 111 connecting to h:6379. Connection refused."),
            redis.ConnectionError("Error 111 connecting to h:6379. Connection refused."),
        )
    assert not isinstance(caught.value, OutcomeUnknown)


def test_a_connect_timeout_is_not_taken_for_an_earlier_try() -> None:
    """redis-py raises it while handling the socket's timeout (its __context__), which
    says nothing of a command sent."""
    with pytest.raises(ConnectionFailed) as caught, translated(URL, ["a"]):
        try:
            raise TimeoutError("timed out")
        except TimeoutError:
            raise redis.TimeoutError("Timeout connecting to server") from None
    assert not isinstance(caught.value, OutcomeUnknown)
