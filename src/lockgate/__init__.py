"""lockgate: background jobs on Redis Streams with priorities, idempotency and nothing lost."""

from lockgate.app import App
from lockgate.config import WorkerConfig
from lockgate.context import JobContext, current_job
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
from lockgate.retry import Backoff
from lockgate.status import JobInfo
from lockgate.task import EnqueueResult, Message, Task
from lockgate.worker import Worker

__all__ = [
    "AccessDenied",
    "AlreadyProcessed",
    "App",
    "Backoff",
    "BrokerError",
    "ClaimBusy",
    "ConfigError",
    "ConnectionFailed",
    "DatabaseError",
    "EnqueueResult",
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
    "current_job",
]
