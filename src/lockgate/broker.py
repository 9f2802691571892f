"""What every storage backend provides, and the Redis connection with its error translation.

Backends (:mod:`lockgate.stream_broker`, :mod:`lockgate.sorted_broker`) are the only
modules that talk to Redis about jobs. Each has two halves: pure builders of enqueue script
calls (used by sync and async producers alike) and a consumer used by one worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import unquote_plus, urlsplit

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from lockgate import faults
from lockgate.codec import Job
from lockgate.errors import BrokerError, ConfigError, ConnectionFailed
from lockgate.lua import Arg, ScriptCall, SyncScripts
from lockgate.outcome import Outcome
from lockgate.packing import with_hiredis_packing

ENQUEUE_BATCH = 500
# Probe an idle connection after 20 s, then every 10 s; 3 misses and it is dead.
KEEPALIVE = {socket.TCP_KEEPIDLE: 20, socket.TCP_KEEPINTVL: 10, socket.TCP_KEEPCNT: 3}
# Seconds: a connect (TCP or Unix) that takes longer fails.
CONNECT_TIMEOUT = 5.0
# Seconds for a worker's first PING, connect included. An open port that is not Redis
# accepts the connection and never answers, and the worker's client has no socket timeout
# (see async_client) that would notice.
HANDSHAKE_TIMEOUT = 5.0
# Seconds a reply may take on clients whose calls never block on the server.
SOCKET_TIMEOUT = 5.0
# Seconds an async caller waits for a free pooled connection: a full pool is load, not a
# fault, so the wait is long; past it the call fails as a connection error.
POOL_WAIT_TIMEOUT = 60.0
SYNC_MAX_CONNECTIONS = 512
# Pool size when the caller names none (redis-py's own default).
DEFAULT_MAX_CONNECTIONS = 100
# Query parameters whose value is a secret: password, ssl_password, token, api_key, ...
SECRET_PARAMETER = re.compile(r"pass|pwd|secret|token|credential|auth|(^|_)key$", re.IGNORECASE)

log = logging.getLogger(__name__)


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
        owner: sorted backend: the token of this take (only it may settle the job).
        claim: the job claim the read took with it (idempotent tasks), None when it took none.
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
    owner: str = ""
    claim: ReadClaim | None = None


@dataclass(frozen=True, slots=True)
class ReadClaim:
    """A job claim taken by the read that delivered the job (no round trip of its own).

    Attributes:
        token: the claim's owner token.
        state: 1 taken, 0 the job is already done, -1 another worker holds it.
        wait: busy: seconds left on the holder's lease.
    """

    token: str
    state: int
    wait: float = 0.0


NOT_CLAIMED = 2  # the read scripts' claim state for a job they did not claim


@dataclass(frozen=True, slots=True)
class ReadClaims:
    """Which jobs a worker's reads claim as they read them.

    Attributes:
        prefix: the claim keys' prefix (``Keys.claim("")``).
        tasks: the names of the idempotent tasks (sorted: the same arguments every read).
        lease: the claims' lease in seconds.
        done_prefix: the done-marker buckets' prefix (``Keys.done_bucket_prefix``).
        legacy_markers: also claim the jobs' 0.1 names (``App(legacy_markers=True)``).
    """

    prefix: str
    tasks: tuple[str, ...]
    lease: float
    done_prefix: str
    legacy_markers: bool = False

    def args(self, token: str) -> list[Arg]:
        """The read script's claim arguments, for a read whose tokens start ``token``."""
        if not self.tasks:
            return [""]
        lease_ms = max(1, round(self.lease * 1000))
        return [
            self.prefix, token, lease_ms, self.done_prefix, int(self.legacy_markers),
            *self.tasks,
        ]  # fmt: skip


def read_claim_args(claims: ReadClaims | None) -> tuple[str, list[Arg]]:
    """A fresh token prefix for one read, and the read script's claim arguments."""
    if claims is None:
        return "", [""]
    token = uuid.uuid4().hex[:16]
    return token, claims.args(token)


@dataclass(frozen=True, slots=True)
class Settlement:
    """How one delivery ends, ready to apply: the outcome and what it needs on the wire.

    Attributes:
        delivery: the delivery to settle.
        outcome: its decided end (never ``abandoned``: there is nothing to apply then).
        claim_key: the Redis key of the job's idempotency claim, if it has one.
        claim_token: that claim's owner token.
        claim_ttl: seconds the done marker lasts.
        legacy_claim_key: the claim's 0.1 name (``idempotent=True`` jobs) when the
            markers are also written there (``App(legacy_markers=True)``), else None.
        legacy_done: the done marker to write there as well (a 0.1 worker skips the job).
        done_prefix: the done-marker buckets' prefix (``Keys.done_bucket_prefix``).
        legacy_markers: also leave the string marker ``d:<token>`` under the claim key
            (what lockgate 0.2 workers read).
        record: dead: the dead letter's fields.
        trim: dead: [dead letters kept at most, their max age ms], 0 for no limit.
    """

    delivery: Delivery
    outcome: Outcome
    claim_key: str | None = None
    claim_token: str = ""
    claim_ttl: float = 0.0
    legacy_claim_key: str | None = None
    legacy_done: str = ""
    done_prefix: str = ""
    legacy_markers: bool = False
    record: Mapping[str, str | bytes] = field(default_factory=dict)
    trim: Sequence[int] = (0, 0)

    def claim_keys(self) -> list[str]:
        """The claim's key and its 0.1 name, when there are ones (the last KEYS)."""
        if self.claim_key is None:
            return []
        if self.legacy_claim_key is None:
            return [self.claim_key]
        return [self.claim_key, self.legacy_claim_key]

    def claim_args(self) -> list[Arg]:
        """Claim token, action, done-marker TTL ms, 0.1 done marker, done-marker buckets'
        prefix, string marker flag (both backends)."""
        if self.claim_key is None:
            return ["", "keep", 0, "", "", 0]
        ttl = max(1, round(self.claim_ttl * 1000))
        return [
            self.claim_token, self.outcome.claim, ttl, self.legacy_done, self.done_prefix,
            int(self.legacy_markers),
        ]  # fmt: skip

    def dead_args(self) -> list[Arg]:
        """Trim limits, then the dead letter's field/value pairs."""
        args: list[Arg] = [*self.trim]
        for name, value in self.record.items():
            args += [name, value]
        return args


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

    async def read(
        self, free: int, quotas: Sequence[int], running: Sequence[str] = ()
    ) -> ReadResult:
        """Take up to ``free`` messages, following the per-level quotas.

        ``running``: refs this worker still runs or settles; the sorted backend never
        hands them out again when their leases lapsed (streams reclaim: see reclaim).
        """

    async def wait_for_work(self, timeout: float) -> None:
        """Block until new work may be there, or ``timeout`` seconds pass."""

    def settle_call(self, settlement: Settlement) -> ScriptCall:
        """The one script call that applies a settlement, owner-checked (pure)."""

    async def settle(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Apply settle calls in one round trip; per call, its reply or the lockgate error
        it met (see :func:`translated_replies`).

        Raises:
            BrokerError: the round trip itself failed (nothing or some applied).
        """

    async def reclaim(self, min_idle: float, running: Sequence[str] = ()) -> Delivery | None:
        """Take over one job a worker left (streams); None when there is none.

        ``running``: refs this worker still runs or settles, never taken again.
        """

    async def forget_consumers(self, min_idle: float) -> int:
        """Remove consumers that are gone and own nothing."""

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> None:
        """Keep running (or not yet settled) deliveries from going to another worker."""

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
    """The URL with its secrets replaced by ``***``, for messages and logs.

    Masked: the password of the user-info (``redis://user:pw@host``) and the value of each
    query parameter whose name says secret (``?password=``, ``ssl_password=``, ``token=``,
    ...). Everything else is kept as written. Never raises, even on a malformed URL.
    """
    scheme, separator, rest = url.partition("://")
    if separator:
        # The user-info ends at the last "@" before the path, as urllib reads it; a
        # password with an unescaped "?" or "#" is masked too (urllib would cut it short).
        authority, slash, path = rest.partition("/")
        userinfo, at, host = authority.rpartition("@")
        if at and ":" in userinfo:
            user = userinfo.partition(":")[0]
            url = f"{scheme}://{user}:***@{host}{slash}{path}"
    head, question, query = url.partition("?")
    if not question:
        return url
    query, hash_, fragment = query.partition("#")
    query = "&".join(_masked_parameter(parameter) for parameter in query.split("&"))
    return f"{head}?{query}{hash_}{fragment}"


def _masked_parameter(parameter: str) -> str:
    name, equals, _ = parameter.partition("=")
    if equals and SECRET_PARAMETER.search(unquote_plus(name)):
        return f"{name}=***"
    return parameter


def _connection_options(url: str, socket_timeout: float | None) -> dict[str, Any]:
    """Keyword arguments for every connection to ``url``, suited to its transport."""
    options: dict[str, Any] = {
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "socket_timeout": socket_timeout,
        "health_check_interval": 30,
    }
    # Keepalive is a TCP option: redis-py's Unix socket connections reject it (TypeError).
    if urlsplit(url).scheme.lower() != "unix":
        options["socket_keepalive"] = True
        options["socket_keepalive_options"] = KEEPALIVE
    return options


def async_client(
    url: str,
    *,
    socket_timeout: float | None = SOCKET_TIMEOUT,
    max_connections: int | None = None,
) -> aioredis.Redis:
    """An async client for ``url`` (``redis://``, ``rediss://`` or ``unix://``).

    Its pool blocks: a call that finds every connection busy waits for one (up to
    ``POOL_WAIT_TIMEOUT``) instead of failing with "Too many connections".

    Args:
        socket_timeout: longest wait for a reply. None for a worker: its blocking reads
            outlast any fixed timeout, redis-py wraps every read and write in
            ``wait_for`` when one is set (a cost per command, and on Python 3.11 a
            cancellation that can be absorbed), and TCP keepalive (dead peer noticed
            within about a minute) plus health checks cover a connection whose server
            vanished.
        max_connections: the pool's size (default ``DEFAULT_MAX_CONNECTIONS``); size it
            to the number of calls that may be in flight at once.

    Raises:
        ConfigError: the URL is not a Redis URL, or ``max_connections`` is below 1.
    """
    size = DEFAULT_MAX_CONNECTIONS if max_connections is None else max_connections
    if size < 1:
        raise ConfigError(f"max_connections must be at least 1, got {size}")
    try:
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=size,
            timeout=POOL_WAIT_TIMEOUT,
            # One retry: a pooled connection that a server restart closed is replaced
            # instead of failing the call (from_url clients get none by default).
            retry=Retry(NoBackoff(), 1),
            **_connection_options(url, socket_timeout),
        )
    except ValueError as e:
        raise ConfigError(f"invalid Redis URL {masked(url)}: {e}") from e
    return aioredis.Redis.from_pool(with_hiredis_packing(pool))


async def connect_worker_client(url: str, *, max_connections: int) -> aioredis.Redis:
    """A worker's async client for ``url``, checked to be a Redis server that answers.

    The client has no socket timeout (see :func:`async_client`), so its first PING,
    connect included, is bounded by ``HANDSHAKE_TIMEOUT`` here: an open port that is not
    Redis would otherwise hang the worker silently. On failure the client is closed.

    Args:
        url: the Redis URL.
        max_connections: the pool's size: the worker's concurrency plus its own loops.

    Returns:
        The connected client; the caller closes it.

    Raises:
        ConfigError: the URL is not a Redis URL, or ``max_connections`` is below 1.
        ConnectionFailed: nothing answers at the URL, or what answers is not Redis.
        BrokerError: the server refused the client (a wrong password, an ACL: see
            :mod:`lockgate.faults` for which error).
    """
    client = async_client(url, socket_timeout=None, max_connections=max_connections)
    try:
        await _first_ping(client, url)
    except BaseException:
        await client.aclose()
        raise
    return client


async def _first_ping(client: aioredis.Redis, url: str) -> None:
    not_redis = "is this a Redis server?"
    try:
        async with asyncio.timeout(HANDSHAKE_TIMEOUT):
            with translated(url):
                try:
                    await client.ping()
                except redis.exceptions.InvalidResponse as e:
                    reason = f"not a Redis reply ({e}): {not_redis}"
                    raise ConnectionFailed(masked(url), reason) from e
    except TimeoutError as e:
        reason = f"no Redis reply within {HANDSHAKE_TIMEOUT:g} s: {not_redis}"
        raise ConnectionFailed(masked(url), reason) from e


async def server_warnings(client: aioredis.Redis) -> list[str]:
    """What in the server's configuration puts jobs at risk, as lines for a log.

    An evicting ``maxmemory-policy`` lets Redis delete keys under memory pressure, queued
    jobs' streams and done markers among them, without an error; only ``noeviction``
    (writes refused when memory is full) keeps them. A server that refuses CONFIG GET
    (an ACL, a managed Redis) gives no warning: this is advice, never a reason to stop.

    Returns:
        One text per risk found; empty when none is, or when the server would not say.
    """
    try:
        reply: Mapping[Any, Any] = await client.config_get("maxmemory-policy")
    except (redis.RedisError, OSError) as e:
        log.debug("maxmemory-policy not checked: the server would not say (%s)", e)
        return []
    policy = next((text(v) for k, v in reply.items() if text(k) == "maxmemory-policy"), None)
    if policy is None or policy == "noeviction":
        return []
    return [
        f"maxmemory-policy is {policy!r}: under memory pressure Redis may silently evict "
        "queued jobs and done markers; set it to 'noeviction'"
    ]


def sync_client(url: str) -> redis.Redis:
    """A sync client for ``url`` (``redis://``, ``rediss://`` or ``unix://``).

    For producers and the CLI: none of their calls block on the server, so every call is
    bounded by the connect and socket timeouts (a server that vanished, or a port that is
    not Redis, fails the call instead of hanging it).

    Raises:
        ConfigError: the URL is not a Redis URL.
    """
    try:
        # Blocking, and larger than redis-py's 100: a Django app's or a worker's threads
        # (claims inside sync tasks, the lease keeper) wait for a connection instead of
        # failing with "Too many connections"; connections are only made when needed.
        pool = redis.BlockingConnectionPool.from_url(
            url,
            max_connections=SYNC_MAX_CONNECTIONS,
            timeout=POOL_WAIT_TIMEOUT,
            **_connection_options(url, SOCKET_TIMEOUT),
        )
    except ValueError as e:
        raise ConfigError(f"invalid Redis URL {masked(url)}: {e}") from e
    return redis.Redis.from_pool(pool)


@contextlib.contextmanager
def translated(url: str) -> Iterator[None]:
    """Turn redis-py errors raised inside the block into lockgate's own (see faults)."""
    try:
        yield
    except (redis.RedisError, OSError) as e:
        raise faults.translate(e, masked(url)) from e


def safe_call(call: ScriptCall) -> ScriptCall:
    """The call with its text arguments as UTF-8 bytes, anything unencodable escaped.

    An error message may hold a lone surrogate (a file name read with surrogateescape):
    redis-py would fail to encode it at send time, for the whole pipeline, every time.
    """
    args = [a.encode("utf-8", "backslashreplace") if isinstance(a, str) else a for a in call.args]
    return ScriptCall(call.script, call.keys, args)


def translated_replies(replies: Sequence[Any], url: str) -> list[Any]:
    """Pipeline replies with each call's error translated into a lockgate error."""
    out: list[Any] = []
    for reply in replies:
        if isinstance(reply, redis.RedisError | OSError):
            reply = faults.translate(reply, masked(url))
        elif isinstance(reply, Exception):
            reply = BrokerError(f"{type(reply).__name__}: {reply}")
        out.append(reply)
    return out


def settle_sync(scripts: SyncScripts, url: str, calls: Sequence[ScriptCall]) -> list[Any]:
    """Apply settle calls through a sync client (a pool thread's path), one round trip.

    Returns:
        Per call, its reply or the lockgate error it met.
    """
    with translated(url):
        replies = scripts.run_each(calls)
    return translated_replies(replies, url)


def text(value: bytes | str) -> str:
    """A reply value as text (bytes that are not UTF-8 show as replacement characters)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value
