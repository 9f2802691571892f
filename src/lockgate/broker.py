"""What every storage backend provides, and the Redis connection with its error translation.

Backends (:mod:`lockgate.stream_broker`, :mod:`lockgate.sorted_broker`) are the only
modules that talk to Redis about jobs. Each has two halves: pure builders of enqueue script
calls (used by sync and async producers alike) and a consumer used by one worker.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from lockgate.codec import Job
from lockgate.errors import BrokerError, ConfigError, ConnectionFailed, ScriptError
from lockgate.lua import ScriptCall

ENQUEUE_BATCH = 500
# Probe an idle connection after 20 s, then every 10 s; 3 misses and it is dead.
KEEPALIVE = {socket.TCP_KEEPIDLE: 20, socket.TCP_KEEPINTVL: 10, socket.TCP_KEEPCNT: 3}


@dataclass(slots=True)
class Delivery:
    """A message handed to a worker.

    Attributes:
        queue: queue name.
        level: level index (0 is the highest).
        source: the stream key (streams backend) or queue name (sorted backend).
        ref: the stream entry id, or the job id on the sorted backend.
        job: the decoded job, or None when the entry could not be decoded.
        error: why ``job`` is None.
        job_id: the job id, as far as it could be read (for logs).
        raw: the stored job bytes, as read (kept for the dead-letter queue).
        deliveries: how many times the entry was handed to a worker (1 on a first read).
    """

    queue: str
    level: int
    source: str
    ref: str
    job: Job | None
    error: str | None = None
    job_id: str = "?"
    raw: bytes | None = None
    deliveries: int = 1


@dataclass(slots=True)
class ReadResult:
    """What one read took; ``next_due``: seconds until a delayed job or lease is due."""

    deliveries: list[Delivery] = field(default_factory=list)
    taken: list[int] = field(default_factory=list)
    dry: list[bool] = field(default_factory=list)
    next_due: float | None = None


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A job on its way in: the job, its encoding, and its delay in ms (0: run now)."""

    job: Job
    data: bytes
    delay_ms: int = 0


@dataclass(frozen=True, slots=True)
class EnqueuePlan:
    """Script calls that enqueue jobs, and which jobs (by position) each call carries."""

    calls: list[ScriptCall]
    positions: list[list[int]]

    def created(self, replies: Sequence[Sequence[Any]]) -> list[bool]:
        """Per job, in the caller's order: False when its id was already queued or running.

        Each script answers per job with 0 for a duplicate and something else otherwise.
        """
        flags = [False] * sum(len(p) for p in self.positions)
        for positions, answers in zip(self.positions, replies, strict=True):
            for position, answer in zip(positions, answers, strict=True):
                flags[position] = answer != 0
        return flags


class Producer(Protocol):
    """Pure builder of enqueue script calls for one backend."""

    def plan_enqueue(self, jobs: Sequence[Outgoing]) -> EnqueuePlan:
        """Calls that enqueue these jobs, in batches."""


class Consumer(Protocol):
    """One worker's connection to the jobs of some queues."""

    async def read(self, free: int, quotas: Sequence[int]) -> ReadResult:
        """Take up to ``free`` messages, following the per-level quotas."""

    async def wait_for_work(self, timeout: float) -> None:
        """Block until new work may be there, or ``timeout`` seconds pass."""

    async def ack(
        self, deliveries: Sequence[Delivery], before: Sequence[ScriptCall] = ()
    ) -> list[Any]:
        """Mark deliveries done: acknowledged, deleted, job ids freed.

        ``before`` runs first in the same round trip (idempotency done markers), and its
        replies are returned.
        """

    async def retry(self, delivery: Delivery, job: Job, delay: float) -> bool:
        """Replace a delivery by the job's next attempt, due in ``delay`` seconds."""

    async def dead_letter(self, delivery: Delivery, record: Mapping[str, str | bytes]) -> bool:
        """Move a delivery to the dead-letter stream with the fields of ``record``."""

    async def reclaim(self, min_idle: float) -> Delivery | None:
        """Take over one job another worker left (streams); None when there is none."""

    async def forget_consumers(self, min_idle: float) -> int:
        """Remove consumers that are gone and own nothing."""

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> None:
        """Keep running deliveries from being handed to another worker."""

    @property
    def client(self) -> aioredis.Redis:
        """The consumer's Redis client."""

    async def close(self) -> None:
        """Release the consumer's resources."""


def by_source(deliveries: Sequence[Delivery]) -> dict[str, list[Delivery]]:
    """Deliveries grouped by where they came from (a stream, or a sorted-backend queue)."""
    groups: dict[str, list[Delivery]] = {}
    for delivery in deliveries:
        groups.setdefault(delivery.source, []).append(delivery)
    return groups


def batches(count: int, size: int = ENQUEUE_BATCH) -> Iterator[range]:
    """Consecutive ranges of at most ``size`` positions out of ``count``."""
    for start in range(0, count, size):
        yield range(start, min(start + size, count))


def masked(url: str) -> str:
    """The URL with any password replaced by ``***``, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def async_client(url: str, *, socket_timeout: float | None = 5.0) -> aioredis.Redis:
    """An async client for ``url``.

    Args:
        socket_timeout: longest wait for a reply (redis-py 6+ defaults it to 5 s). None
            for a worker: its blocking reads outlast any fixed timeout, redis-py wraps
            every read and write in ``wait_for`` when one is set (a cost per command, and
            on Python 3.11 a cancellation that can be absorbed), and TCP keepalive
            (dead peer noticed within about a minute) plus health checks cover a
            connection whose server vanished.

    Raises:
        ConfigError: the URL is not a Redis URL.
    """
    try:
        return aioredis.Redis.from_url(
            url,
            # One retry: a pooled connection that a server restart closed is replaced
            # instead of failing the call (from_url clients get none by default).
            retry=Retry(NoBackoff(), 1),
            health_check_interval=30,
            socket_timeout=socket_timeout,
            socket_keepalive=True,
            socket_keepalive_options=KEEPALIVE,
        )
    except ValueError as e:
        raise ConfigError(f"invalid Redis URL {masked(url)}: {e}") from e


def sync_client(url: str) -> redis.Redis:
    """A sync client for ``url``.

    Raises:
        ConfigError: the URL is not a Redis URL.
    """
    try:
        return redis.Redis.from_url(url, health_check_interval=30)
    except ValueError as e:
        raise ConfigError(f"invalid Redis URL {masked(url)}: {e}") from e


@contextlib.contextmanager
def translated(url: str) -> Iterator[None]:
    """Turn redis-py errors raised inside the block into lockgate's own."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
        raise ConnectionFailed(masked(url), str(e) or type(e).__name__) from e
    except redis.ResponseError as e:
        if "script" in str(e).lower():
            raise ScriptError(str(e)) from e
        raise BrokerError(str(e)) from e
    except redis.RedisError as e:
        raise BrokerError(str(e)) from e


def text(value: bytes | str) -> str:
    """A reply value as text (bytes that are not UTF-8 show as replacement characters)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value
