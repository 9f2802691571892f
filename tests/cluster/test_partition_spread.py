"""Partitions spread a namespace over the cluster (issue 14): with ``partitions=9`` on a
fresh cluster of 3 primaries, each primary holds 3 partition tags, and carries between
28.3% and 38.3% (a third, +-15%) of a uniform workload's commands and memory, as its own
``INFO commandstats`` and ``used_memory`` count them."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import redis

from cluster.slots import owner, primary_of_slots
from clusters import LocalCluster
from lockgate import App, Worker, WorkerConfig
from lockgate.backend.partitions import Layout
from lockgate.ops.inspect import queue_stats

PARTITIONS = 9
JOBS = 6_000
LEVELS = ("critical", "normal", "low")
LOW_SHARE, HIGH_SHARE = 0.283, 0.383
# The test's own commands, left out of the counts.
OWN_COMMANDS = ("cmdstat_info", "cmdstat_config|resetstat")
SETTLE_POLL = 0.5
SETTLE_TIMEOUT = 10.0


def primary_clients(cluster: LocalCluster) -> dict[int, redis.Redis]:
    """A plain client of each primary, by port."""
    ports = {port for _, _, port in primary_of_slots(cluster)}
    return {node.port: node.client() for node in cluster.nodes if node.port in ports}


def calls(client: redis.Redis) -> Counter[str]:
    stats = client.info("commandstats")
    return Counter({k: int(v["calls"]) for k, v in stats.items() if k not in OWN_COMMANDS})


def settled_memory(clients: dict[int, redis.Redis]) -> dict[int, int]:
    """Each primary's ``used_memory`` once it has not moved for a second: a connection's
    query buffer (a batch of jobs, the Functions library) and a replica's output buffer
    are trimmed by the node's cron, about a second later."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    readings: list[dict[int, int]] = []
    while True:
        readings.append({p: int(c.info("memory")["used_memory"]) for p, c in clients.items()})
        steady = len(readings) >= 3 and readings[-1] == readings[-2] == readings[-3]
        if steady or time.monotonic() > deadline:
            return readings[-1]
        time.sleep(SETTLE_POLL)


def shares(values: dict[int, int]) -> dict[int, float]:
    total = sum(values.values())
    return {port: round(value / total, 4) for port, value in values.items()}


def test_nine_partitions_put_three_tags_on_each_primary(cluster: LocalCluster) -> None:
    ranges = primary_of_slots(cluster)
    layout = Layout(uuid.uuid4().hex, PARTITIONS)
    held = Counter(owner(ranges, keys.prefix) for keys in layout.parts)
    assert sorted(held.values()) == [3, 3, 3], held
    assert set(held) == {port for _, _, port in ranges}


async def test_each_primary_carries_a_third_of_a_uniform_workload(cluster: LocalCluster) -> None:
    app = App(cluster.seeds, namespace=uuid.uuid4().hex, partitions=PARTITIONS)
    clients = primary_clients(cluster)
    try:

        @app.task
        async def noop(n: int) -> None:
            pass

        await queue_stats(app)  # the producer's connections exist before the first reading
        before = settled_memory(clients)
        for client in clients.values():
            client.config_resetstat()
        for first in range(0, JOBS, 1_000):
            await app.enqueue_many_async(
                [noop.message(n, priority=LEVELS[n % 3]) for n in range(first, first + 1_000)]
            )
        queued = settled_memory(clients)
        await Worker(app, WorkerConfig(concurrency=32, idle_wait=1.0)).run(burst=True)
        counted = {port: calls(client) for port, client in clients.items()}
        stats = await queue_stats(app)
    finally:
        await app.aclose()
        for client in clients.values():
            client.close()

    assert sum(row.waiting + row.pending + row.delayed for row in stats.levels) == 0
    command_shares = shares({port: c.total() for port, c in counted.items()})
    memory_shares = shares({port: queued[port] - before[port] for port in clients})
    top = {port: c.most_common(4) for port, c in counted.items()}
    print(f"command shares {command_shares}, memory shares {memory_shares}, top {top}")
    assert all(LOW_SHARE <= s <= HIGH_SHARE for s in command_shares.values()), (
        command_shares, top,
    )  # fmt: skip
    assert all(LOW_SHARE <= s <= HIGH_SHARE for s in memory_shares.values()), memory_shares
