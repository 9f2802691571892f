"""The chaos test's private Redis: one embedded server with one partition, or a local
cluster of 3 primaries with ``partitions=4``, each with AOF and fsync always, and how each
crashes (see test_chaos.py)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import time
from collections.abc import Iterator
from typing import Any, Protocol

import pytest
import redis
from redis.cluster import ClusterNode
from redis.exceptions import ClusterError, RedisClusterException, TryAgainError

from clusters import CLUSTER_OPTIONS, LocalCluster, Node, wait_for
from lockgate import App
from lockgate.integrations.embedded import EmbeddedServer

# A chaos run draws its faults from a seed; setting this replays a run.
SEED_ENV = "LOCKGATE_CHAOS_SEED"


def chaos_seed() -> int:
    """The seed in ``LOCKGATE_CHAOS_SEED``, else a fresh one."""
    value = os.environ.get(SEED_ENV, "").strip()
    if not value:
        return random.SystemRandom().randrange(2**32)
    try:
        return int(value)
    except ValueError:
        pytest.fail(f"{SEED_ENV}={value!r} is not an integer")


# What a read of the queues meets while the server, or one primary, is down.
OUTAGE = (redis.ConnectionError, redis.TimeoutError, ClusterError, RedisClusterException,
          TryAgainError)  # fmt: skip
# The cluster's primaries persist every write before answering, as the embedded server does.
DURABLE = {"appendfsync": "always", "appendonly": "yes"}


class Server(Protocol):
    """Where a run's jobs live: its URL, the namespace's partitions, and the crash."""

    url: str
    partitions: int

    def client(self) -> Any:
        """A sync client for the supervisor's reads."""

    def crash(self, app: App, down_for: float) -> str:
        """SIGKILL Redis (on a cluster, one primary), leave it down ``down_for`` seconds,
        start it again from its AOF, wait until it serves; what was crashed."""


class SingleServer:
    """One embedded server (AOF, fsync always) and one partition: the crash restarts it."""

    partitions = 1

    def __init__(self, server: EmbeddedServer) -> None:
        self.server, self.url = server, server.url

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=5, socket_connect_timeout=5)

    def crash(self, app: App, down_for: float) -> str:
        self.server.kill()
        time.sleep(down_for)  # the fault: how long Redis is away
        self.server.start()
        return "the server"


class DurableCluster:
    """3 primaries with AOF, fsync always, and 4 partitions: the crash SIGKILLs the primary
    that serves the most of the namespace's partitions (on a tie, the one that serves its
    own tag too: registry, wake-up lists) and restarts it from its AOF.

    No replica, so no failover: a promoted replica may lack the last acknowledged writes
    (asynchronous replication), a loss the cluster fault tests leave aside too, while a
    primary restarted from its AOF loses nothing, as the single server does. While it is
    down, and while it waits out the rejoin delay of a restarted primary (the node
    timeout, 2 s here), its slots fail; the other primaries serve on.
    """

    partitions = 4

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster, self.url = cluster, cluster.seeds
        for node in cluster.nodes:
            with contextlib.closing(node.client()) as client:
                for name, value in DURABLE.items():
                    client.config_set(name, value)
        wait_for(lambda: all(map(aof_on, cluster.nodes)), "the AOF on every primary")

    def client(self) -> redis.RedisCluster:
        # From hosts and ports, not from_url: see inspection_client in tests/conftest.py.
        seeds = [ClusterNode("127.0.0.1", node.port) for node in self.cluster.nodes]
        return redis.RedisCluster(startup_nodes=seeds, socket_timeout=5, socket_connect_timeout=5)

    def crash(self, app: App, down_for: float) -> str:
        victim, served = self.busiest(app)
        victim.signal(signal.SIGKILL)
        time.sleep(down_for)  # the fault: how long the primary is away
        binary = shutil.which(self.cluster.binary) or self.cluster.binary
        durable = [option for name, value in DURABLE.items() for option in (f"--{name}", value)]
        victim.start(binary, *CLUSTER_OPTIONS, *durable)  # the later --appendonly wins
        wait_for(victim.answers, "the restarted primary")
        self.cluster.wait_ok()
        if not aof_on(victim):
            raise AssertionError(f"{victim.address} restarted without its AOF")
        return f"primary {victim.address} serving {served}"

    def busiest(self, app: App) -> tuple[Node, str]:
        """The primary to crash, and what of the namespace it serves."""
        layout = app.store.layout
        with contextlib.closing(self.client()) as client:
            ports = [
                int(client.get_node_from_key(keys.prefix).port)
                for keys in (layout.base, *layout.parts)
            ]
        own, parts = ports[0], ports[1:]
        victim = max(self.cluster.nodes, key=lambda n: (parts.count(n.port), n.port == own))
        served = [f"p{i}" for i, port in enumerate(parts) if port == victim.port]
        return victim, ", ".join(served + ["the namespace's own tag"] * (own == victim.port))


def aof_on(node: Node) -> bool:
    """Whether the node appends every write to its AOF (no rewrite still to come)."""
    with contextlib.closing(node.client()) as client:
        info = client.info("persistence")
    return bool(
        info["aof_enabled"] == 1
        and info["aof_rewrite_in_progress"] == 0
        and info["aof_rewrite_scheduled"] == 0
        and info["loading"] == 0
    )


@contextlib.contextmanager
def serving(where: str) -> Iterator[Server]:
    """The run's private Redis: one embedded server, or a local cluster of 3 primaries."""
    if where == "cluster":
        with LocalCluster(primaries=3, replicas=0) as cluster:
            yield DurableCluster(cluster)
    else:
        with EmbeddedServer(appendonly=True, fsync="always") as server:
            yield SingleServer(server)
