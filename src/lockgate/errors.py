"""The one error hierarchy of lockgate.

```
LockgateError
├── ConfigError            bad levels, unknown priority, duplicate task, bad option value
│   ├── MissingExtra       an optional dependency (an extra) is missing; also an ImportError
│   └── StartupFailed      a worker's on_startup hook raised (it stops before any job)
├── BrokerError            anything the Redis side refused
│   ├── ConnectionFailed   the server at a URL could not be reached        (transient)
│   │   └── OutcomeUnknown a write timed out or lost its connection after it was sent:
│   │                      it may have landed (.job_ids: retry with them)
│   ├── ServerBusy         BUSY, LOADING, OOM, READONLY, failover, ...     (transient)
│   ├── ScriptError        a Lua script failed (NOSCRIPT: reload and retry)
│   └── AccessDenied       NOPERM, WRONGPASS, unknown command; also a ConfigError (fatal)
├── SerializationError     a payload cannot be encoded or decoded
├── TaskNotFound           a message names a task this app does not know
├── InvalidArguments       arguments that do not fit the task (also a TypeError)
├── DatabaseError          PostgreSQL refused or could not be reached (names the DSN)
├── JobFailed              result(): the job was dead-lettered (type, message, traceback)
│   └── JobCancelled       result(): the job was cancelled or expired
├── ResultUnavailable      result(): the job is unknown, or its result expired
├── AlreadyProcessed       an idempotent job or step already ran
│   └── StepDone           a step of a multi-step job already ran
└── RetryableError         control flow: raise it in a task to have the job retried later
    └── ClaimBusy          another worker holds a live claim on the key: back off
```

redis-py errors are translated at the broker boundary only, with ``raise ... from e``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

# How many of an OutcomeUnknown's job ids its message names (all are on .job_ids).
SHOWN_IDS = 10


class LockgateError(Exception):
    """Root of every error that lockgate raises on purpose."""


class ConfigError(LockgateError):
    """A configuration value or a task declaration is invalid."""


class MissingExtra(ConfigError, ImportError):
    """A feature needs an optional dependency group (an extra) that is not installed.

    Args:
        feature: what needed it, e.g. ``"lockgate.postgres"``.
        extra: the extra that installs it, e.g. ``"postgres"``.
        missing: the module that could not be imported.
    """

    def __init__(self, feature: str, extra: str, missing: str) -> None:
        super().__init__(
            f"{feature} needs {missing}, which is not installed: pip install 'lockgate[{extra}]'"
        )
        self.feature = feature
        self.extra = extra
        self.missing = missing


class StartupFailed(ConfigError):
    """A worker's ``on_startup`` hook raised: the worker stops before its first job.

    Args:
        hook: the hook's name.
        error: what it raised.
    """

    def __init__(self, hook: str, error: BaseException) -> None:
        super().__init__(f"on_startup hook {hook} failed: {type(error).__name__}: {error}")
        self.hook = hook
        self.error = error


class BrokerError(LockgateError):
    """Redis refused an operation."""


class ConnectionFailed(BrokerError):
    """The Redis server at ``url`` could not be reached.

    Args:
        url: the URL that failed, with any password masked.
        reason: what the client said.
    """

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot connect to Redis at {url}: {reason}")
        self.url = url
        self.reason = reason


class OutcomeUnknown(ConnectionFailed):
    """A call that may have changed Redis got no reply: it timed out, or its connection
    was lost, after the command was sent (an enqueue, ``enqueue_many``, a replay).

    The jobs may have been queued. Enqueue them again with the same ids (``job_id=``;
    a message from ``Task.message`` keeps its id): an id that is queued, delayed or
    running is not queued twice, so the retry is safe. A connection refused before
    anything was sent raises a plain :class:`ConnectionFailed` instead.

    Args:
        url: the URL that failed, with any password masked.
        reason: what the client said.
        job_ids: the ids of the jobs the call carried, generated ones included.
        flow_id: from ``App.enqueue_flow``, the flow's id, generated or not: enqueue the
            flow again with ``flow_id=`` this (None for other calls).
    """

    def __init__(
        self, url: str, reason: str, job_ids: Sequence[str], flow_id: str | None = None
    ) -> None:
        super().__init__(url, reason)
        self.job_ids = tuple(job_ids)
        self.flow_id = flow_id
        shown = ", ".join(self.job_ids[:SHOWN_IDS])
        more = f" and {len(self.job_ids) - SHOWN_IDS} more" if len(self.job_ids) > SHOWN_IDS else ""
        self.args = (
            f"no reply from Redis at {url} ({reason}): the jobs may have been queued; "
            f"enqueue again with the same job ids to be sure (.job_ids: {shown}{more})"
            if flow_id is None
            else f"no reply from Redis at {url} ({reason}): the flow may have been queued; "
            f"enqueue it again with flow_id={flow_id!r} to be sure",
        )


class ScriptError(BrokerError):
    """A lockgate Lua script failed on the server."""


class ServerBusy(BrokerError):
    """The server refused for now (busy script, loading, out of memory, read-only replica,
    failover or resharding under way): back off and try again."""


class AccessDenied(BrokerError, ConfigError):
    """The server refuses this client for good (wrong password, missing ACL permission, a
    command it does not know): a configuration error, retrying cannot help."""


class SerializationError(LockgateError):
    """A job payload cannot be encoded, or a stored entry cannot be decoded."""


class TaskNotFound(LockgateError):
    """A message names a task that is not registered on this app."""


class AlreadyProcessed(LockgateError):
    """The idempotency key of a job or step is already marked done.

    Args:
        key: the idempotency key.
    """

    def __init__(self, key: str, message: str | None = None) -> None:
        super().__init__(message or f"already processed: {key}")
        self.key = key


class StepDone(AlreadyProcessed):
    """A step of a multi-step job already ran; skip it with ``contextlib.suppress``."""


class JobFailed(LockgateError):
    """A job ended without a result: it was dead-lettered (its last run raised).

    Attributes:
        job_id: the job.
        type_name: the name of the exception type its last run raised.
        message: that exception's message.
        traceback: its traceback, as text (it may have been raised in another process).
    """

    def __init__(self, job_id: str, type_name: str, message: str, traceback: str = "") -> None:
        super().__init__(f"job {job_id!r} failed: {type_name}: {message}")
        self.job_id = job_id
        self.type_name = type_name
        self.message = message
        self.traceback = traceback


class JobCancelled(JobFailed):
    """A job was cancelled (``App.cancel``) or expired before it ran to its end."""

    def __init__(self, job_id: str, type_name: str, message: str, traceback: str = "") -> None:
        super().__init__(job_id, type_name, message, traceback)
        self.args = (f"job {job_id!r} was cancelled: {message}",)


class ResultUnavailable(LockgateError):
    """A job's result cannot be had: the job is unknown, or it ended and its result (or
    its status) expired or was never kept."""


class DatabaseError(LockgateError):
    """PostgreSQL refused an operation or could not be reached."""


class InvalidArguments(LockgateError, TypeError):
    """A job's arguments do not fit its task's signature."""


class RetryableError(LockgateError):
    """Raise in a task to retry the job with backoff (or after ``delay`` seconds).

    Args:
        message: what went wrong.
        delay: seconds (or a timedelta) to wait instead of the task's backoff.
    """

    def __init__(self, message: str = "", *, delay: float | timedelta | None = None) -> None:
        super().__init__(message)
        if isinstance(delay, timedelta):
            delay = delay.total_seconds()
        if delay is not None and delay < 0:
            raise ValueError(f"delay must not be negative, got {delay}")
        self.delay = delay


class ClaimBusy(RetryableError):
    """Another worker holds a live claim on an idempotency key; retry after it ends.

    Args:
        key: the idempotency key.
        retry_after: seconds left on the holder's lease.
    """

    def __init__(self, key: str, retry_after: float) -> None:
        super().__init__(
            f"{key} is being processed by another worker (lease ends in {retry_after:.1f}s)",
            delay=retry_after,
        )
        self.key = key
