"""lockgate: background jobs on Redis Streams with priorities, idempotency and nothing lost."""

from lockgate.api.app import App
from lockgate.api.flows import FlowInfo, FlowResult
from lockgate.api.task import EnqueueResult, Task
from lockgate.core.config import WorkerConfig
from lockgate.core.context import JobContext, current_job
from lockgate.core.flows import chain, group
from lockgate.core.message import Message
from lockgate.core.retry import Backoff
from lockgate.core.status import CancelOutcome, JobInfo
from lockgate.errors import (
    AccessDenied,
    AlreadyProcessed,
    BrokerError,
    ClaimBusy,
    ConfigError,
    ConnectionFailed,
    DatabaseError,
    InvalidArguments,
    JobCancelled,
    JobFailed,
    LockgateError,
    MissingExtra,
    OutcomeUnknown,
    ResultUnavailable,
    RetryableError,
    ScriptError,
    SerializationError,
    ServerBusy,
    StartupFailed,
    StepDone,
    TaskNotFound,
)
from lockgate.worker.loop import Worker

__all__ = [
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
