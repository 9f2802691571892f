"""Encoding of jobs on the wire: JSON through msgspec, never pickle.

JSON keeps entries readable with ``redis-cli`` and by producers in other languages;
msgspec encodes and validates in one pass, which keeps the worker's per-job cost low.
"""

from __future__ import annotations

from typing import Any

import msgspec

from lockgate.errors import SerializationError

MAX_JOB_ID_BYTES = 256


class Job(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One job as stored in Redis.

    Attributes:
        id: stable across retries and redeliveries; also the enqueue dedup key.
        task: registered task name.
        queue: queue name.
        level: priority level name.
        args: positional arguments.
        kwargs: keyword arguments.
        attempt: 1 for the first run.
        enqueued: Unix time of the enqueue, producer clock (for wait times).
    """

    id: str
    task: str
    queue: str
    level: str
    args: list[Any] = msgspec.field(default_factory=list)
    kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    attempt: int = 1
    enqueued: float = 0.0


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Job)


def encode(job: Job) -> bytes:
    """Encode a job.

    Raises:
        SerializationError: an argument has no JSON form.
    """
    try:
        return _encoder.encode(job)
    except (TypeError, msgspec.EncodeError, OverflowError) as e:
        raise SerializationError(f"job {job.id!r} of task {job.task!r}: {e}") from e


def decode(data: bytes | str) -> Job:
    """Decode a stored job.

    Raises:
        SerializationError: the data is not a valid job.
    """
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError as e:
        raise SerializationError(f"undecodable job entry: {e}") from e


def check_job_id(job_id: str) -> str:
    """Validate a caller-supplied job id.

    Raises:
        SerializationError: empty, not a string, or longer than 256 bytes.
    """
    if not isinstance(job_id, str) or not job_id:
        raise SerializationError(f"job_id must be a non-empty string, got {job_id!r}")
    if len(job_id.encode()) > MAX_JOB_ID_BYTES:
        raise SerializationError(
            f"job_id {job_id[:40]!r}... is longer than {MAX_JOB_ID_BYTES} bytes"
        )
    return job_id
