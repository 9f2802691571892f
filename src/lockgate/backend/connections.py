"""Clients for a lockgate Redis URL: one server, a Redis Cluster, or a Sentinel's primary.

The URL's form (see :mod:`lockgate.backend.addresses`) picks the client: several hosts are a
cluster's seeds, ``redis+sentinel://`` names a primary that the Sentinels follow, one host
is probed once per process (``HELLO``) and gets the cluster client when the server
runs in cluster mode. A cluster has only database 0: any other number is a ConfigError.

Every client bounds its connect and every reply (``SOCKET_TIMEOUT``), the worker's too:
TCP keepalive never fires against a server that hangs (a stopped process, a black-holed
network), so without a deadline a worker would wait for as long as the server hangs. A
worker's blocking reads block for at most ``MAX_BLOCK`` on the server, inside that
deadline (see :func:`block_ms`). Pools block when full (a burst waits for a connection
instead of failing with "Too many connections"), except the async cluster client's,
which redis-py does not offer: it is sized for the concurrency instead.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Mapping
from typing import Any, TypeAlias

import redis
import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster
import redis.asyncio.sentinel as aiosentinel
import redis.cluster
import redis.sentinel
from redis.backoff import NoBackoff
from redis.connection import parse_url
from redis.retry import Retry

from lockgate.backend.addresses import Address, masked, parse_address
from lockgate.backend.cluster_keys import AsyncFcallKeys, FcallKeys
from lockgate.backend.faults import translated
from lockgate.backend.packing import with_hiredis_packing
from lockgate.backend.servers import ServerFacts, check_server, facts_from_hello, facts_from_info
from lockgate.backend.write_deadline import ChainedRetry, with_deadline_writes
from lockgate.core.logs import get_logger
from lockgate.errors import ConfigError, ConnectionFailed

SyncClient: TypeAlias = "redis.Redis | redis.cluster.RedisCluster"
AsyncClient: TypeAlias = "aioredis.Redis | aiocluster.RedisCluster"

# Probe an idle connection after 20 s, then every 10 s; 3 misses and it is dead.
KEEPALIVE = {socket.TCP_KEEPIDLE: 20, socket.TCP_KEEPINTVL: 10, socket.TCP_KEEPCNT: 3}
# Seconds: a connect (TCP or Unix) that takes longer fails.
CONNECT_TIMEOUT = 5.0
# Seconds for a first command, connect included. An open port that is not Redis accepts
# the connection and never answers.
HANDSHAKE_TIMEOUT = 5.0
# Seconds a reply may take, on every client: a call to a server that hangs fails then.
SOCKET_TIMEOUT = 5.0
# Seconds a blocking read (XREAD BLOCK, BLPOP) may block on the server: a longer wait for
# work (a worker's idle_wait) is cut into reads this long, each ending on the server with
# BLOCK_MARGIN to spare before the socket timeout would fail it.
BLOCK_MARGIN = 1.0
MAX_BLOCK = SOCKET_TIMEOUT - BLOCK_MARGIN
# Seconds an async caller waits for a free pooled connection: a full pool is load, not a
# fault, so the wait is long; past it the call fails as a connection error.
POOL_WAIT_TIMEOUT = 60.0
SYNC_MAX_CONNECTIONS = 512
# Pool size when the caller names none (redis-py's own default).
DEFAULT_MAX_CONNECTIONS = 100
NOT_REDIS = "is this a Redis server?"

log = get_logger(__name__)

# Whether a one-host URL names a cluster node, as found by its first probe in this process.
_in_cluster_mode: dict[str, bool] = {}
_probe_lock = threading.Lock()


def _address(url: str) -> Address:
    try:
        return parse_address(url)
    except ConfigError as e:
        raise ConfigError(f"invalid Redis URL {masked(url)}: {e}") from e


def _socket_options(address: Address, socket_timeout: float | None) -> dict[str, Any]:
    """Keyword arguments for every connection, suited to the transport."""
    options: dict[str, Any] = {
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "socket_timeout": socket_timeout,
        "health_check_interval": 30,
    }
    # Keepalive is a TCP option: redis-py's Unix socket connections reject it (TypeError).
    if address.kind != "unix":
        options["socket_keepalive"] = True
        options["socket_keepalive_options"] = KEEPALIVE
    return options


def _node_options(address: Address, *, db: bool) -> dict[str, Any]:
    """What a node's URL says (credentials, TLS, query options), as client keywords."""
    host, port = address.hosts[0]
    options = dict(parse_url(address.node_url(host, port, db=db)))  # type: ignore[no-untyped-call]
    options.pop("host", None)
    options.pop("port", None)
    # parse_url names TLS by its connection class, which only a pool takes: clients
    # (a probe, a cluster's nodes, a Sentinel's primary) take ssl=True instead.
    if options.pop("connection_class", None) is not None and address.tls:
        options["ssl"] = True
    return options


def _check_cluster_db(address: Address, url: str) -> None:
    if address.db not in (None, 0):
        raise ConfigError(
            f"Redis Cluster has only database 0, but {masked(url)} names database "
            f"{address.db}: leave the number out or use /0"
        )


def _cluster_nodes(address: Address, node_class: Any) -> list[Any]:
    return [node_class(host, port) for host, port in address.hosts]


def _sentinel_keywords(address: Address, socket_timeout: float | None) -> dict[str, Any]:
    """Connection keywords for the Sentinels themselves (their own password, TLS)."""
    keywords: dict[str, Any] = {
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "socket_timeout": socket_timeout or SOCKET_TIMEOUT,
    }
    for name, value in address.sentinel_options:
        keywords[name.removeprefix("sentinel_")] = value
    if address.tls:
        keywords["ssl"] = True
    return keywords


def _primary_keywords(address: Address, socket_timeout: float | None) -> dict[str, Any]:
    """Keywords for the clients of a Sentinel's primary (``ssl=True`` picks TLS there)."""
    return _node_options(address, db=True) | _socket_options(address, socket_timeout)


# --- sync ----------------------------------------------------------------------------------


def sync_client(url: str, *, cluster: bool | None = None) -> SyncClient:
    """A sync client for ``url`` (any form that :mod:`lockgate.backend.addresses` reads).

    For producers and the CLI: none of their calls block on the server, so every call is
    bounded by the connect and socket timeouts (a server that vanished, or a port that is
    not Redis, fails the call instead of hanging it).

    Args:
        cluster: for a one-host URL, whether it is a cluster node; None asks the server
            (``HELLO``, once per URL and process).

    Raises:
        ConfigError: the URL is not a Redis URL, or names a database other than 0 on a
            cluster.
        ConnectionFailed: the probe of a one-host URL found no Redis there.
    """
    address = _address(url)
    if address.kind == "sentinel":
        sentinel = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
            address.hosts, sentinel_kwargs=_sentinel_keywords(address, SOCKET_TIMEOUT)
        )
        assert address.service is not None
        client: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call, unused-ignore]
            address.service,
            redis_class=SentinelPrimary,
            **_primary_keywords(address, SOCKET_TIMEOUT),
        )
        return client
    if cluster is None and address.kind == "server":
        cluster = _probe_sync(address, url)
    if address.kind == "seeds" or (address.kind == "server" and cluster):
        _check_cluster_db(address, url)
        with translated(masked(url)):  # it asks a seed for the slots at once
            cluster_client = redis.cluster.RedisCluster(
                startup_nodes=_cluster_nodes(address, redis.cluster.ClusterNode),
                max_connections=SYNC_MAX_CONNECTIONS,
                **_node_options(address, db=False),
                **_socket_options(address, SOCKET_TIMEOUT),
            )
            cluster_client.commands_parser = FcallKeys(cluster_client)  # type: ignore[no-untyped-call]
        return cluster_client
    try:
        # Blocking, and larger than redis-py's 100: a Django app's or a worker's threads
        # (claims inside sync tasks, the lease keeper) wait for a connection instead of
        # failing with "Too many connections"; connections are only made when needed.
        pool = redis.BlockingConnectionPool.from_url(
            url,
            max_connections=SYNC_MAX_CONNECTIONS,
            timeout=POOL_WAIT_TIMEOUT,
            **_socket_options(address, SOCKET_TIMEOUT),
        )
    except ValueError as e:
        raise ConfigError(f"invalid Redis URL {masked(url)}: {e}") from e
    return redis.Redis.from_pool(pool)


def forget_server(host: str, port: int) -> None:
    """Forget what the probes found at ``host:port`` (whether it runs in cluster mode), so
    the next client of a URL naming it asks again: for a process that knows the server
    there was replaced by another (tests start servers on ports other servers had)."""
    with _probe_lock:
        for url in list(_in_cluster_mode):
            try:
                hosts = _address(url).hosts
            except ConfigError:
                continue
            if (host, port) in hosts:
                del _in_cluster_mode[url]


def _probe_sync(address: Address, url: str) -> bool:
    """Whether the one server of ``address`` runs in cluster mode (asked once per URL)."""
    with _probe_lock:
        known = _in_cluster_mode.get(url)
        if known is not None:
            return known
        host, port = address.hosts[0]
        probe = redis.Redis(
            host=host,
            port=port,
            socket_timeout=HANDSHAKE_TIMEOUT,
            socket_connect_timeout=CONNECT_TIMEOUT,
            retry=Retry(NoBackoff(), 0),  # one try: redis-py's default would try 4 times
            # No database: a cluster node refuses SELECT, and the number is checked below.
            **_node_options(address, db=False),
        )
        try:
            with translated(masked(url)):
                facts = _hello_sync(probe)
        finally:
            probe.close()
        check_server(facts, url)
        enabled = _in_cluster_mode[url] = facts.cluster
        return enabled


def _hello_sync(client: redis.Redis) -> ServerFacts:
    try:
        return facts_from_hello(client.execute_command("HELLO"))  # type: ignore[no-untyped-call]
    except redis.ResponseError as e:
        if not _unknown_command(e):
            raise
    return facts_from_info(client.info("server"))


# --- async ---------------------------------------------------------------------------------


def async_client(
    url: str,
    *,
    socket_timeout: float | None = SOCKET_TIMEOUT,
    max_connections: int | None = None,
    cluster: bool = False,
) -> AsyncClient:
    """An async client for ``url``, made without a round trip (see :func:`open_async_client`
    for one that finds out whether a one-host URL is a cluster node).

    Args:
        socket_timeout: longest wait for a reply (None: none, which only a test wants:
            TCP keepalive never notices a server that hangs). Blocking reads stay under
            it (see :func:`block_ms`).
        max_connections: the pool's size (default ``DEFAULT_MAX_CONNECTIONS``), per node
            on a cluster; size it to the number of calls that may be in flight at once.
        cluster: a one-host URL names a cluster node.

    Raises:
        ConfigError: the URL is not a Redis URL, names a database other than 0 on a
            cluster, or ``max_connections`` is below 1.
    """
    size = DEFAULT_MAX_CONNECTIONS if max_connections is None else max_connections
    if size < 1:
        raise ConfigError(f"max_connections must be at least 1, got {size}")
    address = _address(url)
    if address.kind == "sentinel":
        return _async_sentinel(address, socket_timeout, size)
    if address.kind == "seeds" or (address.kind == "server" and cluster):
        _check_cluster_db(address, url)
        client = aiocluster.RedisCluster(
            startup_nodes=_cluster_nodes(address, aiocluster.ClusterNode),
            max_connections=size,
            **_node_options(address, db=False),
            **_socket_options(address, socket_timeout),
        )
        client.commands_parser = AsyncFcallKeys(client, timeout=HANDSHAKE_TIMEOUT)
        _deadline_writes_on_nodes(client)
        return client
    return _async_plain(url, address, socket_timeout, size)


def _deadline_writes_on_nodes(client: aiocluster.RedisCluster) -> None:
    """Make every node's connections bound writes without a task each (see
    :mod:`lockgate.backend.write_deadline`): the startup nodes', and through the keywords the
    client gives each node it discovers, theirs."""
    keywords = client.nodes_manager.connection_kwargs
    keywords["connection_class"] = with_deadline_writes(keywords["connection_class"])
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_class = with_deadline_writes(node.connection_class)


async def open_async_client(
    url: str, *, socket_timeout: float | None = SOCKET_TIMEOUT, max_connections: int | None = None
) -> AsyncClient:
    """:func:`async_client` for any URL: a one-host URL is first asked ``HELLO``
    (within :data:`HANDSHAKE_TIMEOUT`; once per URL and process), and a cluster node gets
    the cluster client.

    Raises:
        ConfigError: as :func:`async_client`.
        ConnectionFailed: the one host does not answer, or what answers is not Redis.
        BrokerError: the server refused the client (a wrong password, an ACL).
    """
    options: dict[str, Any] = {"socket_timeout": socket_timeout, "max_connections": max_connections}
    address = _address(url)
    cluster = _in_cluster_mode.get(url)
    if cluster is None and address.kind == "server":
        # Without the database: a cluster node refuses SELECT (the number is checked next).
        probe = async_client(address.node_url(*address.hosts[0], db=False), max_connections=1)
        try:
            facts = await first_contact(probe, url)
        finally:
            await probe.aclose()
        cluster = _in_cluster_mode[url] = facts.cluster
    return async_client(url, cluster=bool(cluster), **options)


def _async_plain(
    url: str, address: Address, socket_timeout: float | None, size: int
) -> aioredis.Redis:
    try:
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=size,
            timeout=POOL_WAIT_TIMEOUT,
            # One retry: a pooled connection that a server restart closed is replaced
            # instead of failing the call (from_url clients get none by default). Not
            # after a timeout: a server that hangs would hang the retry too, doubling
            # the time a call takes to fail (and sending a write twice).
            retry=ChainedRetry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
            **_socket_options(address, socket_timeout),
        )
    except ValueError as e:
        raise ConfigError(f"invalid Redis URL {masked(url)}: {e}") from e
    pool.connection_class = with_deadline_writes(pool.connection_class)
    return aioredis.Redis.from_pool(with_hiredis_packing(pool))


class SentinelPrimary(redis.Redis):
    """The sync client of a Sentinel's primary; closing it closes the Sentinels' clients."""

    def close(self) -> None:
        super().close()
        for client in self.connection_pool.sentinel_manager.sentinels:  # type: ignore[attr-defined]
            client.close()


class AsyncSentinelPrimary(aioredis.Redis):
    """The async client of a Sentinel's primary; closing it closes the Sentinels' clients
    (left open, their sockets would outlive the client)."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        for client in self.connection_pool.sentinel_manager.sentinels:  # type: ignore[attr-defined]
            await client.aclose()


def _async_sentinel(address: Address, socket_timeout: float | None, size: int) -> aioredis.Redis:
    sentinel = aiosentinel.Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        address.hosts, sentinel_kwargs=_sentinel_keywords(address, socket_timeout)
    )
    assert address.service is not None
    connection = (
        aiosentinel.SentinelManagedSSLConnection
        if address.tls
        else aiosentinel.SentinelManagedConnection
    )
    client: aioredis.Redis = sentinel.master_for(
        address.service,
        redis_class=AsyncSentinelPrimary,
        max_connections=size,
        connection_class=with_deadline_writes(connection),
        **_primary_keywords(address, socket_timeout),
    )
    return client


async def first_contact(client: AsyncClient, url: str) -> ServerFacts:
    """``HELLO`` as the client's first command, bounded by HANDSHAKE_TIMEOUT, and the
    server checked (see :func:`check_server`).

    HELLO is the probe because no ACL can refuse it (``no-auth`` commands skip the
    command check): a user limited to lockgate's commands, INFO not among them, is served.
    Without arguments, so the connection keeps the protocol redis-py chose. A server
    older than 6.2 (no HELLO, or one that needs a protocol version) is asked ``INFO
    server`` instead.

    Raises:
        ConfigError: the server is older than 7.0, or is a Sentinel.
        ConnectionFailed: no reply in time, or a reply that is not Redis's (the reason
            says so: "is this a Redis server?").
        BrokerError: the server refused (a wrong password; see lockgate.faults).
    """
    try:
        async with asyncio.timeout(HANDSHAKE_TIMEOUT):
            with translated(masked(url)):
                try:
                    facts = await _hello_async(client)
                except redis.exceptions.InvalidResponse as e:
                    reason = f"not a Redis reply ({e}): {NOT_REDIS}"
                    raise ConnectionFailed(masked(url), reason) from e
    except TimeoutError as e:
        reason = f"no Redis reply within {HANDSHAKE_TIMEOUT:g} s: {NOT_REDIS}"
        raise ConnectionFailed(masked(url), reason) from e
    check_server(facts, url)
    return facts


async def _hello_async(client: AsyncClient) -> ServerFacts:
    try:
        return facts_from_hello(await client.execute_command("HELLO"))
    except redis.ResponseError as e:
        if not _unknown_command(e):
            raise
    return facts_from_info(await client.info("server"))


def _unknown_command(error: redis.ResponseError) -> bool:
    """Whether HELLO without arguments is beyond the server (older than 6.2)."""
    message = str(error).lower()
    return message.startswith("unknown command") or "wrong number of arguments" in message


async def connect_worker_client(url: str, *, max_connections: int) -> AsyncClient:
    """A worker's async client for ``url``, checked to be a Redis server that answers.

    Every call has the producers' deadline (``SOCKET_TIMEOUT``): a server or node that
    hangs fails the calls sent to it within seconds, which the worker treats as any lost
    connection (settles kept and retried: they are idempotent), and a cluster or Sentinel
    client then finds the promoted replica. Its blocking reads block for at most
    ``MAX_BLOCK`` (see :func:`block_ms`). The first command, connect included, is bounded
    by ``HANDSHAKE_TIMEOUT`` (:func:`open_async_client`). On failure the client is
    closed.

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
    client = await open_async_client(url, max_connections=max_connections)
    try:
        await first_contact(client, url)
    except BaseException:
        await client.aclose()
        raise
    return client


def block_ms(seconds: float) -> int:
    """The ``BLOCK`` (ms, at least 1) of a blocking read that waits ``seconds`` for work,
    capped at ``MAX_BLOCK``.

    One deadline for every call of a client (its socket timeout) rather than one per
    call: redis-py applies the client's socket timeout to every read, a blocking one
    included, so a read may block for no longer than that, less a margin for the reply
    to arrive. A longer wait is a series of reads (a wait for work is a longest wait).
    """
    return max(1, int(min(seconds, MAX_BLOCK) * 1000))


async def server_warnings(client: AsyncClient) -> list[str]:
    """What in the server's configuration puts jobs at risk, as lines for a log.

    An evicting ``maxmemory-policy`` lets Redis delete keys under memory pressure, queued
    jobs' streams and done markers among them, without an error; only ``noeviction``
    (writes refused when memory is full) keeps them. A server that refuses CONFIG GET
    (an ACL, a managed Redis) gives no warning: this is advice, never a reason to stop.

    Returns:
        One text per risk found; empty when none is, or when the server would not say.
    """
    try:
        reply: Any = await client.config_get("maxmemory-policy")
    except (redis.RedisError, redis.exceptions.RedisClusterException, OSError) as e:
        log.debug("maxmemory-policy not checked: the server would not say (%s)", e)
        return []
    # A cluster client answers per node: {node: {name: value}}; one node: {name: value}.
    replies = list(reply.values()) if _per_node(reply) else [reply]
    policies = {_text(v) for r in replies for k, v in r.items() if _text(k) == "maxmemory-policy"}
    risky = sorted(policy for policy in policies if policy != "noeviction")
    return [
        f"maxmemory-policy is {policy!r}: under memory pressure Redis may silently evict "
        "queued jobs and done markers; set it to 'noeviction'"
        for policy in risky
    ]


def _per_node(reply: Any) -> bool:
    return bool(reply) and all(isinstance(value, Mapping) for value in reply.values())


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


class Ping:
    """A server's answer to PING, asked again until it comes (a server starting up).

    Args:
        host: the server's host.
        port: its port.
    """

    def __init__(self, host: str, port: int) -> None:
        self._client = redis.Redis(host=host, port=port, socket_connect_timeout=1)

    def __call__(self) -> bool:
        """Whether it answered (False while it refuses connections or loads its data)."""
        try:
            return bool(self._client.ping())
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
            return False

    def close(self) -> None:
        """Close the connection."""
        self._client.close()
