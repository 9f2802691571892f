"""Which primary serves which slots of a local cluster, as a live node says now."""

from __future__ import annotations

from redis.crc import key_slot

from clusters import LocalCluster

SlotRanges = list[tuple[int, int, int]]


def primary_of_slots(cluster: LocalCluster) -> SlotRanges:
    """(first slot, last slot, primary's port) of each slot range."""
    live = next(node for node in cluster.nodes if node.alive)
    client = live.client()
    try:
        ranges = client.execute_command("CLUSTER", "SLOTS")
    finally:
        client.close()
    return [(int(r[0]), int(r[1]), int(r[2][1])) for r in ranges]


def owner(ranges: SlotRanges, key: str) -> int:
    """The port of the primary serving ``key``."""
    slot = key_slot(key.encode())
    return next(port for first, last, port in ranges if first <= slot <= last)
