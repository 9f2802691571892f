"""lockgate: background jobs on Redis Streams with priorities, idempotency and nothing lost."""

from lockgate.app import App, EnqueueResult, Message, Task
from lockgate.config import WorkerConfig
from lockgate.context import JobContext, current_job
from lockgate.errors import (
    AlreadyProcessed,
    BrokerError,
    ConfigError,
    ConnectionFailed,
    InvalidArguments,
    LockgateError,
    RetryableError,
    ScriptError,
    SerializationError,
    TaskNotFound,
)
from lockgate.retry import Backoff
from lockgate.worker import Worker

__all__ = [
    "AlreadyProcessed",
    "App",
    "Backoff",
    "BrokerError",
    "ConfigError",
    "ConnectionFailed",
    "EnqueueResult",
    "InvalidArguments",
    "JobContext",
    "LockgateError",
    "Message",
    "RetryableError",
    "ScriptError",
    "SerializationError",
    "Task",
    "TaskNotFound",
    "Worker",
    "WorkerConfig",
    "current_job",
]
