"""Redis errors named once, at the seam: what each means and what a worker does about it.

| error from the server or the socket                          | lockgate error     | fault     |
| ------------------------------------------------------------ | ------------------ | --------- |
| connection refused/reset/closed, socket timeout               | ConnectionFailed   | transient |
| of a write (an enqueue) after it was sent: timeout, reset     | OutcomeUnknown     | transient |
| BUSY, LOADING, OOM, READONLY, MASTERDOWN, TRYAGAIN,           | ServerBusy         | transient |
| CLUSTERDOWN, NOREPLICAS, NOT BUSY... (the server says "later") |                    |           |
| Function not found, NOSCRIPT (a fresh or flushed server)      | ScriptError        | reload    |
| NOPERM, WRONGPASS, NOAUTH, unknown command, an ACL refusal    | AccessDenied       | fatal     |
| of a command inside a function                               |                    |           |
| a cluster client's own refusal (slot not covered, ...)        | ServerBusy         | transient |
| anything else the server refused                              | BrokerError        | transient |

A write that got no reply may have landed: :func:`translated` names the jobs it carried
(``job_ids``) and raises :class:`OutcomeUnknown` with them, unless the error says the
connection was never made (refused, a connect timeout, no pooled connection free), when
nothing was sent. A read that timed out stays a ConnectionFailed: it changed nothing.

A transient fault is retried with capped backoff and the worker stays up; ``reload`` is
retried at once (the script runners load lockgate's library again when a call
meets it); a fatal one stops the
worker with one line (exit 2 from the CLI). An unknown refusal counts as transient so that
nothing that settles a job is ever dropped: it is logged at each retry.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from typing import Literal

import redis
from redis.exceptions import NoPermissionError, NoScriptError, RedisClusterException

from lockgate.backend.addresses import masked
from lockgate.backend.write_deadline import earlier_try
from lockgate.errors import (
    AccessDenied,
    BrokerError,
    ConnectionFailed,
    LockgateError,
    OutcomeUnknown,
    ScriptError,
    ServerBusy,
)

Fault = Literal["transient", "reload", "fatal"]
# What a Redis call may raise: redis-py's errors, its cluster client's own (which are not
# RedisErrors: a slot not covered mid-failover), and the socket's.
REDIS_FAULTS = (redis.RedisError, RedisClusterException, OSError)

# Error codes (the reply's first word) that mean "not now": the server is alive and will
# take the same command later. Redis documents them under each command and in
# https://redis.io/docs/latest/develop/reference/protocol-spec/#simple-errors.
TRANSIENT_CODES = frozenset(
    {"BUSY", "LOADING", "OOM", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN",
     "NOREPLICAS", "MISCONF", "UNBLOCKED", "NOTBUSY"}
)  # fmt: skip
FATAL_CODES = frozenset({"NOPERM", "WRONGPASS", "NOAUTH"})
_FUNCTIONS_UNKNOWN = re.compile(r"unknown command [`'](fcall|fcall_ro|function)[`']", re.I)


# What redis-py says when a call failed before its command went out: the connect was
# refused or timed out (redis.connection's _error_message, "Timeout connecting to
# server"), or no pooled connection came free. Its other connection errors and timeouts
# (reading, writing, "Connection closed by server") come once the command may have left.
_NOT_SENT = ("connecting to", "no connection available", "too many connections")
# Earlier tries of one call looked at (a retry or two: a chain is short).
MAX_TRIES_SEEN = 8


def _code(message: str) -> str:
    return message.split(" ", 1)[0].upper() if message else ""


def translate(error: redis.RedisError | RedisClusterException | OSError, url: str) -> LockgateError:
    """The lockgate error for a redis-py error (``url`` already masked)."""
    if isinstance(error, RedisClusterException):
        return ServerBusy(f"Redis Cluster at {url}: {error or type(error).__name__}")
    if isinstance(error, redis.AuthenticationError | NoPermissionError):
        return AccessDenied(f"Redis at {url} refused access: {error}")
    if isinstance(error, redis.ConnectionError | redis.TimeoutError | OSError):
        message = str(error) or type(error).__name__
        if _code(message) in FATAL_CODES:
            return AccessDenied(f"Redis at {url} refused access: {message}")
        return ConnectionFailed(url, message)
    message = str(error)
    code = _code(message)
    if isinstance(error, redis.BusyLoadingError | redis.ReadOnlyError | redis.OutOfMemoryError):
        return ServerBusy(message)
    if code in TRANSIENT_CODES:
        return ServerBusy(message)
    if code in FATAL_CODES or "unknown command" in message.lower() or _refused_inside(message):
        return AccessDenied(f"Redis at {url} refused: {message}{_too_old(message)}")
    if isinstance(error, NoScriptError) or code == "NOSCRIPT" or _reloads(message):
        return ScriptError(message)
    return BrokerError(message)


def may_have_landed(error: BaseException) -> bool:
    """Whether a write that failed so may have reached the server (and run there): its
    error, or that of an earlier try of the same call (see
    :func:`lockgate.backend.write_deadline.earlier_try`).

    A cluster client's own error may follow a try that timed out after sending (redis-py
    retries there by itself), so it counts as landed too.
    """
    tried: BaseException | None = error
    seen = 0
    while tried is not None and seen < MAX_TRIES_SEEN:
        if _may_have_landed(tried):
            return True
        tried, seen = earlier_try(tried), seen + 1
    return False


def _may_have_landed(error: BaseException) -> bool:
    if isinstance(error, RedisClusterException):
        return True
    if not isinstance(error, redis.ConnectionError | redis.TimeoutError | OSError):
        return False  # the server replied: an error reply is an answer
    if isinstance(error, redis.AuthenticationError):
        return False
    message = str(error).lower()
    return not any(words in message for words in _NOT_SENT)


@contextlib.contextmanager
def translated(url: str, job_ids: Sequence[str] | None = None) -> Iterator[None]:
    """Turn Redis errors raised inside the block into lockgate's own (``url`` is masked
    here).

    Args:
        url: the URL the block's client talks to.
        job_ids: for a block that writes jobs (an enqueue), their ids: a failure after the
            command was sent raises :class:`OutcomeUnknown` carrying them.
    """
    try:
        yield
    except REDIS_FAULTS as e:
        error = translate(e, masked(url))
        if job_ids is not None and isinstance(error, ConnectionFailed | ServerBusy):
            if may_have_landed(e):
                reason = error.reason if isinstance(error, ConnectionFailed) else str(error)
                raise OutcomeUnknown(masked(url), reason, job_ids) from e
        raise error from e


def _refused_inside(message: str) -> bool:
    """Whether an ACL refused a command that a lockgate function calls (Redis 7.0 says
    "The user executing the script can't run this command"; later ones, NOPERM)."""
    lowered = message.lower()
    return "user executing the script can't" in lowered or "noperm" in lowered


def _too_old(message: str) -> str:
    """A hint when the unknown command is one of Redis 7's Functions."""
    # Redis 6 quotes the name in backticks, later servers in single quotes.
    if _FUNCTIONS_UNKNOWN.search(message):
        return " (lockgate needs Redis 7.0 or newer: its scripts are a Functions library)"
    return ""


def _reloads(message: str) -> bool:
    lowered = message.lower()
    return "function not found" in lowered or "script" in lowered


def classify(error: BaseException) -> Fault:
    """How a worker should treat a lockgate error raised by a Redis call."""
    if isinstance(error, AccessDenied):
        return "fatal"
    if isinstance(error, ScriptError) and (
        "NOSCRIPT" in str(error).upper() or "function not found" in str(error).lower()
    ):
        return "reload"
    return "transient"
