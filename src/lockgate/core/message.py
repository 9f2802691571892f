"""A job ready to enqueue: what [Task.message][lockgate.Task.message] builds and
[App.enqueue_many][lockgate.App.enqueue_many] sends (a value: no I/O)."""

from __future__ import annotations

from dataclasses import dataclass

from lockgate.core.codec import Job
from lockgate.errors import SerializationError


@dataclass(frozen=True, slots=True)
class Message:
    """A job built by [Task.message][lockgate.Task.message], ready for
    [App.enqueue_many][lockgate.App.enqueue_many].

    Attributes:
        job: the job.
        delay: seconds before it may run (0: now).
        once: a once-only key and its TTL in ms, taken (``SET NX PX``) by the enqueue
            itself: while the key lives, the job is not enqueued again, even after it
            ended (a cron tick's, see [App.cron][lockgate.App.cron]). None: no such key.
        named: the caller gave the job its id (``job_id=``), which a flow's job may not.
    """

    job: Job
    delay: float = 0.0
    once: tuple[str, int] | None = None
    named: bool = False


def check_size(message: Message, data: bytes, limit: int) -> bytes:
    """``data`` (the message's job, encoded) when it fits ``limit`` bytes.

    Raises:
        SerializationError: it is over the limit.
    """
    if len(data) > limit:
        raise SerializationError(
            f"job {message.job.id!r} of task {message.job.task!r} is {len(data)} "
            f"bytes encoded, over the limit of {limit}"
        )
    return data
