"""The public surface is deliberate: every export is listed, and nothing else is public."""

from __future__ import annotations

import types

import lockgate

EXPECTED = [
    "AccessDenied",
    "AlreadyProcessed",
    "App",
    "Backoff",
    "BrokerError",
    "CancelOutcome",
    "ClaimBusy",
    "ConfigError",
    "ConnectionFailed",
    "DatabaseError",
    "EnqueueResult",
    "FlowInfo",
    "FlowResult",
    "InvalidArguments",
    "JobCancelled",
    "JobContext",
    "JobFailed",
    "JobInfo",
    "LockgateError",
    "Message",
    "MissingExtra",
    "OutcomeUnknown",
    "ResultUnavailable",
    "RetryableError",
    "ScriptError",
    "SerializationError",
    "ServerBusy",
    "StartupFailed",
    "StepDone",
    "Task",
    "TaskNotFound",
    "Worker",
    "WorkerConfig",
    "chain",
    "current_job",
    "group",
]


def test_all_imports_are_exported() -> None:
    public = [
        name
        for name, value in vars(lockgate).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    ]
    assert lockgate.__all__ == sorted(public)


def test_exports_are_pinned() -> None:
    # Adding or removing a public name is an API decision: update this list with it.
    assert lockgate.__all__ == EXPECTED


def test_every_export_is_documented() -> None:
    undocumented = [name for name in lockgate.__all__ if not getattr(lockgate, name).__doc__]
    assert undocumented == []


def test_errors_share_one_root() -> None:
    errors = [
        getattr(lockgate, name)
        for name in lockgate.__all__
        if isinstance(getattr(lockgate, name), type)
        and issubclass(getattr(lockgate, name), BaseException)
    ]
    assert len(errors) == 21
    assert issubclass(lockgate.JobCancelled, lockgate.JobFailed)
    assert all(issubclass(error, lockgate.LockgateError) for error in errors)
    assert issubclass(lockgate.ConnectionFailed, lockgate.BrokerError)
    # A caller that catches ConnectionFailed catches an outcome left unknown too.
    assert issubclass(lockgate.OutcomeUnknown, lockgate.ConnectionFailed)
    assert issubclass(lockgate.ScriptError, lockgate.BrokerError)
    assert issubclass(lockgate.ServerBusy, lockgate.BrokerError)
    # A refusal that cannot heal is a configuration error: the CLI exits 2 on it.
    assert issubclass(lockgate.AccessDenied, lockgate.BrokerError)
    assert issubclass(lockgate.AccessDenied, lockgate.ConfigError)
    assert issubclass(lockgate.InvalidArguments, TypeError)
    assert issubclass(lockgate.StepDone, lockgate.AlreadyProcessed)
    assert issubclass(lockgate.ClaimBusy, lockgate.RetryableError)
    # `except ImportError` around an optional feature still catches a missing extra.
    assert issubclass(lockgate.MissingExtra, lockgate.ConfigError)
    assert issubclass(lockgate.MissingExtra, ImportError)
