"""Encoding of jobs on the wire: JSON through msgspec, never pickle.

JSON keeps entries readable with ``redis-cli`` and by producers in other languages;
msgspec encodes and validates in one pass, which keeps the worker's per-job cost low.
"""

from __future__ import annotations

import re
from itertools import accumulate, count
from operator import sub
from typing import Any

import msgspec

from lockgate.core.records import enc_hook
from lockgate.errors import SerializationError

MAX_JOB_ID_BYTES = 256

# Deepest nesting of lists and objects inside one argument (a scalar is 0, ``[]`` is 1).
# msgspec, the type conversion and any task that walks its arguments recurse once per
# level, on the Python recursion limit (1,000 by default) that the worker's own frames
# already use; 64 leaves that margin many times over yet is far beyond any real record
# (a JSON document nested 64 deep is an attack or a bug, not data).
MAX_DEPTH = 64
# The job object and its args list (or kwargs object) around each argument.
_ENVELOPE_DEPTH = 2
_JOB_DEPTH = MAX_DEPTH + _ENVELOPE_DEPTH
# A JSON string, escapes included; unrolled so it runs in linear time on any input.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
# After deleting everything but brackets: an opener becomes 2, a closer 0, so the running
# sum minus the running count is the depth after each bracket.
_STEPS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")


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
        waits: how often this attempt was put back because another worker held its claim
            (it sets the next, growing, wait; a wait never spends an attempt).
        markers_expire: Unix time when the first done marker written by an earlier
            attempt (a finished step) expires, 0 when none: a retry due after that time
            would run the finished step again, so it is dead-lettered instead.
        crashes: how many times a run of this job killed the child process it ran in (a
            poison job); from the first, it always runs in a child of its own.
        rate_reserved: a rate limiter reserved this attempt's start when it put it back:
            it starts without asking again.
        key_reserved: its key's limiter (``key_rate_limit``) reserved this attempt's start
            when it put it back: it asks only the task's own limiter then.
        key: its fairness key (``@app.task(key_by=...)``); None: it has none.
        flow: the id of the flow it belongs to (``App.enqueue_flow``); None: none.
        trace: the trace context of the span that enqueued it (the W3C ``traceparent``
            and ``tracestate`` carrier, ``lockgate.otel``); None: not traced (omitted
            from the entry). Any JSON object is read, so that a producer of another
            version or language carrying more (not strings) never makes the job
            undecodable; tracing reads its strings.
        secret: its task is declared ``secret_args=True``: displays show its arguments
            and result masked (:mod:`lockgate.core.masking`); omitted from the entry when
            False.
    """

    id: str
    task: str
    queue: str
    level: str
    args: list[Any] = msgspec.field(default_factory=list)
    kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    attempt: int = 1
    enqueued: float = 0.0
    waits: int = 0
    markers_expire: float = 0.0
    crashes: int = 0
    rate_reserved: bool = False
    key_reserved: bool = False
    key: str | None = None
    flow: str | None = None
    trace: dict[str, Any] | None = None
    secret: bool = False

    @property
    def home(self) -> str | None:
        """What places the job in a partition instead of its id (see
        ``lockgate.backend.partitions.home_of``): its flow's id (a flow's jobs live with its
        records), else its fairness key, else None."""
        return FLOW_HOME + self.flow if self.flow is not None else self.key


# A flow job's home (``Job.home``): where the flow's own records live too.
FLOW_HOME = "flow\x00"

# Records msgspec cannot encode itself (Pydantic models) go out as their JSON form.
_encoder = msgspec.json.Encoder(enc_hook=enc_hook)
_decoder = msgspec.json.Decoder(Job)


def nesting_depth(data: bytes) -> int:
    """How deep lists and objects nest in JSON ``data``.

    Brackets inside strings do not count. Linear in the size of ``data``, without
    recursion, so it is safe on any input, valid JSON or not.

    Args:
        data: JSON text, as UTF-8.

    Returns:
        0 for a scalar, 1 for ``[]`` or ``{}``, 2 for ``[[]]``...
    """
    brackets = _STRING.sub(b"", data).translate(_STEPS, _NOT_BRACKETS)
    return max(map(sub, accumulate(brackets), count(1)), default=0)


def depth_within(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON ``data`` nests at most ``limit`` deep.

    The hot path only counts opening brackets, an upper bound of the depth; the exact
    :func:`nesting_depth` runs only when that bound is over the limit.

    Args:
        data: JSON text, as UTF-8.
        limit: the deepest nesting allowed.

    Returns:
        True when :func:`nesting_depth` of ``data`` is at most ``limit``.
    """
    return data.count(b"[") + data.count(b"{") <= limit or nesting_depth(data) <= limit


def _too_deep(job: Job, data: bytes | None) -> SerializationError:
    depth = f"{nesting_depth(data) - _ENVELOPE_DEPTH} deep" if data is not None else "too deep"
    return SerializationError(
        f"job {job.id!r} of task {job.task!r}: arguments nested {depth} (over the limit "
        f"of {MAX_DEPTH})"
    )


def encode(job: Job) -> bytes:
    """Encode a job.

    Raises:
        SerializationError: an argument has no JSON form, or nests deeper than
            :data:`MAX_DEPTH`.
    """
    try:
        data = _encoder.encode(job)
    except RecursionError as e:
        # msgspec recurses per level: only a very deep argument (or a nearly exhausted
        # stack) gets here, and either way the job cannot go out.
        raise _too_deep(job, None) from e
    except Exception as e:  # TypeError, EncodeError, OverflowError, UnicodeEncodeError...
        raise SerializationError(f"job {job.id!r} of task {job.task!r}: {e}") from e
    # depth_within's quick bounds, inlined, as this runs for every job enqueued: nesting
    # d deep takes d openers and d closers, so most jobs are too short to need counting.
    if (
        len(data) > 2 * _JOB_DEPTH
        and data.count(b"[") + data.count(b"{") > _JOB_DEPTH
        and nesting_depth(data) > _JOB_DEPTH
    ):
        raise _too_deep(job, data)
    return data


def decode(data: bytes | str) -> Job:
    """Decode a stored job.

    Any failure, whatever msgspec or the interpreter raised (a ``RecursionError`` on
    a deep entry, a ``ValueError``...), becomes a :class:`SerializationError`: a worker
    dead-letters such an entry instead of dying on it.

    Raises:
        SerializationError: the data is not a valid job, or nests deeper than
            :data:`MAX_DEPTH` in its arguments.
    """
    try:
        raw = data.encode() if isinstance(data, str) else data
        # Checked before msgspec sees it: a deep entry must not reach a recursive
        # decoder, however much stack the caller has left.
        if not depth_within(raw, _JOB_DEPTH):
            depth = nesting_depth(raw) - _ENVELOPE_DEPTH
            raise SerializationError(
                f"undecodable job entry: arguments nested {depth} deep (over the limit "
                f"of {MAX_DEPTH})"
            )
        return _decoder.decode(raw)
    except SerializationError:
        raise
    except Exception as e:  # a poison entry must never take the worker down
        raise SerializationError(f"undecodable job entry: {str(e) or type(e).__name__}") from e


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
