"""Local Redis Clusters and Sentinel sets for tests, of private processes.

:class:`LocalCluster`: N primaries with M replicas each.

Each node is a ``redis-server --cluster-enabled yes`` child on a free port (and its
cluster bus at port + 10000, so ports are picked below 55536), in its own directory; the
cluster is created with ``redis-cli --cluster create`` and is ready once every node
reports ``cluster_state:ok`` and agrees on the slots. Nothing here touches 127.0.0.1:6379.

:class:`LocalSentinel`: one primary, its replicas and three Sentinels watching it, so a
killed primary is replaced by a promoted replica (``down-after-milliseconds`` 1000).

Run as a script, it starts a cluster and prints its seed URL until interrupted:
``python tests/clusters.py [--primaries 3] [--replicas 1]``.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import redis

from free_ports import free_port
from lockgate.backend.connections import forget_server

START_TIMEOUT = 30.0
POLL = 0.05
PORT_TRIES = 3  # a node whose port was taken between the pick and its start: elsewhere
CLUSTER_OPTIONS = (
    "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
    "--cluster-node-timeout", "2000",
)  # fmt: skip


def free_cluster_port(taken: set[int]) -> int:
    """A free port outside ``taken`` whose bus port (+10000) is free too (see
    tests/free_ports.py: safe across parallel test processes)."""
    return free_port(bus=True, taken=taken)


@dataclass
class Node:
    """One cluster node's process, port and directory."""

    port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self) -> redis.Redis:
        """A plain (non-cluster) client of this node alone."""
        return redis.Redis(port=self.port, socket_timeout=5, socket_connect_timeout=2)

    def start(self, binary: str, *options: str) -> None:
        """Start the node: ``binary`` with the common options, then ``options``."""
        self.directory.mkdir(parents=True, exist_ok=True)
        # The port may have served a plain server of an earlier test: ask its mode afresh.
        forget_server("127.0.0.1", self.port)
        argv = [
            binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.directory), "--daemonize", "no",
            "--logfile", str(self.directory / "redis.log"),
            "--save", "", "--appendonly", "no", *options,
        ]  # fmt: skip
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start_on_a_free_port(self, binary: str, taken: set[int], *options: str) -> None:
        """Start the node on a free port (its bus port free too) and wait until it
        answers; a port taken by another process in between is replaced by another."""
        for attempt in range(PORT_TRIES):
            self.port = free_cluster_port(taken)
            self.start(binary, *options)
            process = self.process
            assert process is not None
            wait_for(lambda p=process: p.poll() is not None or self.answers(), "the node answers")
            if process.poll() is None:
                taken.update({self.port, self.port + 10_000})
                return
            if attempt == PORT_TRIES - 1:
                log = (self.directory / "redis.log").read_text(errors="replace")
                raise RuntimeError(f"{binary} on port {self.port} exited:\n{log[-2000:]}")

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: signal.Signals) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signum)
            self.process.wait(10)

    def answers(self) -> bool:
        client = self.client()
        try:
            return bool(client.ping())
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
            return False
        finally:
            client.close()

    def info_cluster(self) -> dict[str, str]:
        client = self.client()
        try:
            raw = client.execute_command("CLUSTER", "INFO")
        finally:
            client.close()
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        return dict(line.split(":", 1) for line in text.split() if ":" in line)


class ServerSet:
    """What a set of private server processes shares: kill them all and delete their
    directory at the end (a test's servers keep nothing), also when starting fails."""

    root: Path

    def processes(self) -> list[Node]:
        """Every process of the set."""
        raise NotImplementedError

    def start(self) -> Self:
        raise NotImplementedError

    def close(self) -> None:
        """SIGKILL every process and delete the directory."""
        for node in self.processes():
            node.signal(signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class LocalCluster(ServerSet):
    """A Redis Cluster of private processes.

    Args:
        primaries: how many primaries (the 16,384 slots are split between them).
        replicas: replicas per primary.
        binary: the server binary (``redis-server``, or a ``valkey-server``).
    """

    primaries: int = 3
    replicas: int = 1
    binary: str = "redis-server"
    nodes: list[Node] = field(default_factory=list)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="lockgate-cluster-")))

    def processes(self) -> list[Node]:
        return list(self.nodes)

    @property
    def seeds(self) -> str:
        """A ``redis://`` URL listing every node as a seed."""
        return "redis://" + ",".join(node.address for node in self.nodes)

    def start(self) -> LocalCluster:
        """Start every node, create the cluster and wait until it serves every slot."""
        binary = shutil.which(self.binary)
        if binary is None:
            raise RuntimeError(f"{self.binary} is not on PATH; cluster tests need it")
        taken: set[int] = set()
        for index in range(self.primaries * (1 + self.replicas)):
            node = Node(0, self.root / f"node-{index}")
            self.nodes.append(node)
            node.start_on_a_free_port(binary, taken, *CLUSTER_OPTIONS)
        cli = shutil.which(self.binary.replace("-server", "-cli")) or "redis-cli"
        subprocess.run(
            [cli, "--cluster", "create", *(node.address for node in self.nodes),
             "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            check=True, capture_output=True, timeout=START_TIMEOUT,
        )  # fmt: skip
        self.wait_ok()
        return self

    def wait_ok(self) -> None:
        """Wait until every live node says ``cluster_state:ok`` with all slots assigned,
        and every live replica's link to its primary is up."""

        def ok() -> bool:
            for node in self.nodes:
                if not node.alive:
                    continue
                info = node.info_cluster()
                if info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != "16384":
                    return False
                client = node.client()
                try:
                    replication = client.info("replication")
                finally:
                    client.close()
                if replication["role"] == "slave" and replication["master_link_status"] != "up":
                    return False
            return True

        wait_for(ok, "cluster_state:ok on every node, every replica in sync")


def replicated(primary: Node, replica: Node) -> bool:
    """Whether ``replica`` has every write ``primary`` has (nothing acknowledged to lose)."""
    p, r = primary.client(), replica.client()
    try:
        return int(p.info("replication")["master_repl_offset"]) == int(
            r.info("replication")["slave_repl_offset"]
        )
    finally:
        p.close()
        r.close()


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = START_TIMEOUT) -> None:
    """Poll ``predicate`` (a Redis error counts as not yet) until true, or fail naming it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} within {timeout:g} s")
        time.sleep(POLL)


@dataclass
class LocalSentinel(ServerSet):
    """One primary, ``replicas`` replicas, and three Sentinels that watch it as ``service``.

    Attributes:
        url: the ``redis+sentinel://`` URL of the set.
    """

    replicas: int = 1
    service: str = "lockgate"
    binary: str = "redis-server"
    nodes: list[Node] = field(default_factory=list)
    sentinels: list[Node] = field(default_factory=list)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="lockgate-sentinel-")))

    def processes(self) -> list[Node]:
        return [*self.sentinels, *self.nodes]

    @property
    def url(self) -> str:
        hosts = ",".join(sentinel.address for sentinel in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}"

    def primary(self) -> Node:
        """The node the Sentinels name as primary now."""
        client = self.sentinels[0].client()
        try:
            _, port = client.sentinel_get_master_addr_by_name(self.service)
        finally:
            client.close()
        return next(node for node in self.nodes if node.port == int(port))

    def start(self) -> LocalSentinel:
        """Start the data nodes, then the Sentinels, and wait until all three see them."""
        binary = shutil.which(self.binary)
        if binary is None:
            raise RuntimeError(f"{self.binary} is not on PATH; Sentinel tests need it")
        taken: set[int] = set()
        for index in range(1 + self.replicas):
            node = Node(0, self.root / f"node-{index}")
            follow = ("--replicaof", "127.0.0.1", str(self.nodes[0].port)) if index else ()
            self.nodes.append(node)
            node.start_on_a_free_port(binary, taken, *follow)
        primary = self.nodes[0]
        for index in range(3):
            port = free_cluster_port(taken)
            taken.add(port)
            sentinel = Node(port, self.root / f"sentinel-{index}")
            sentinel.directory.mkdir(parents=True)
            config = sentinel.directory / "sentinel.conf"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {sentinel.directory}\n"
                f"sentinel monitor {self.service} 127.0.0.1 {primary.port} 2\n"
                f"sentinel down-after-milliseconds {self.service} 1000\n"
                f"sentinel failover-timeout {self.service} 5000\n"
            )
            sentinel.process = subprocess.Popen(
                [binary, str(config), "--sentinel", "--logfile", str(sentinel.directory / "log")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            self.sentinels.append(sentinel)
        wait_for(self._sentinels_see_everyone, "Sentinels agree on the primary and replicas")
        return self

    def _sentinels_see_everyone(self) -> bool:
        for sentinel in self.sentinels:
            client = sentinel.client()
            try:
                master = client.sentinel_master(self.service)
            finally:
                client.close()
            if int(master["num-other-sentinels"]) < 2 or int(master["num-slaves"]) < self.replicas:
                return False
        return True


def main() -> None:
    parser = argparse.ArgumentParser(description="Run a local Redis Cluster until Ctrl-C.")
    parser.add_argument("--primaries", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--binary", default="redis-server")
    args = parser.parse_args()
    with LocalCluster(args.primaries, args.replicas, args.binary) as cluster:
        print(cluster.seeds, flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
