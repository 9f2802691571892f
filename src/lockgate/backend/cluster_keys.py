"""The command parsers lockgate gives redis-py's cluster clients (sync and async): they
find an FCALL's keys in the call itself, and the async one loads the command table from
any primary that answers."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis
import redis.asyncio.cluster as aiocluster

# redis-py's own parsers (exported by redis._parsers, used by its cluster clients).
from redis._parsers import AsyncCommandsParser, CommandsParser

from lockgate.core.logs import get_logger

# A cluster node that does not answer is logged at most this often (seconds).
LOG_NODE_EVERY = 60.0

log = get_logger(__name__)


def fcall_keys(args: tuple[Any, ...]) -> list[Any] | None:
    """The keys of an FCALL or FCALL_RO (``FCALL name numkeys key...``), else None."""
    if len(args) >= 3 and str(args[0]).upper() in ("FCALL", "FCALL_RO"):
        return list(args[3 : 3 + int(args[2])])
    return None


class FcallKeys(CommandsParser):
    """Finds an FCALL's keys where they are. redis-py's cluster client asks the server
    (``COMMAND GETKEYS``, a round trip per call) for the keys of every command whose keys
    move, FCALL among them; it knows them in place only for EVAL and EVALSHA."""

    def get_keys(self, redis_conn: Any, *args: Any) -> Any:
        keys = fcall_keys(args)
        return keys if keys is not None else super().get_keys(redis_conn, *args)  # type: ignore[no-untyped-call]


class AsyncFcallKeys(AsyncCommandsParser):
    """:class:`FcallKeys` for the async cluster client, whose command table comes from
    any primary that answers.

    redis-py 8's async cluster client loads the table (``COMMAND``) from its default node
    (the first primary the slots name) at every (re)initialisation, under its lock and
    outside its retries: while that one primary is down, before a failover or for good on
    a cluster that serves what it still covers, every call of the client failed, those of
    the live primaries' slots too (a hung node held them all for a socket timeout each,
    and for ever while the worker's client had none). Here each try is bounded by
    ``timeout``; a node that fails is moved last (redis-py then no longer makes it
    the default), and the first primary that answers becomes the default node (where
    ``HELLO`` and keyless calls go).
    """

    def __init__(self, cluster: aiocluster.RedisCluster, *, timeout: float) -> None:
        super().__init__()
        self._cluster = cluster
        self._timeout = timeout
        self._logged: dict[str, float] = {}

    async def initialize(self, node: aiocluster.ClusterNode | None = None) -> None:
        first = node if node is not None else self._cluster.get_default_node()
        error = await self._load_from(first)
        if error is None:
            return
        for other in self._cluster.get_primaries():
            if other is first or await self._load_from(other) is not None:
                continue
            self._cluster.set_default_node(other)
            self._log_once(first, error, other)
            return
        raise error

    async def _load_from(self, node: aiocluster.ClusterNode) -> Exception | None:
        """Load the table from ``node``; the error it met, else None."""
        try:
            async with asyncio.timeout(self._timeout):
                await super().initialize(node)
        except (redis.ConnectionError, redis.TimeoutError, TimeoutError) as e:
            self._cluster.nodes_manager.move_node_to_end_of_cached_nodes(node.name)
            return e
        return None

    def _log_once(self, down: aiocluster.ClusterNode, error: Exception, used: Any) -> None:
        """Log a node passed over, at most once a minute per node (every reconnection of
        the client meets it again)."""
        now = time.monotonic()
        if now - self._logged.get(down.name, -LOG_NODE_EVERY) >= LOG_NODE_EVERY:
            self._logged[down.name] = now
            log.warning("cluster node %s did not answer (%s): asking %s instead",
                        down.name, error or type(error).__name__, used.name)  # fmt: skip

    async def get_keys(self, *args: Any) -> Any:
        keys = fcall_keys(args)
        return tuple(keys) if keys is not None else await super().get_keys(*args)
