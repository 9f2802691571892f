"""A primary down, the rest of a partitioned namespace served (issue 14): on a cluster
that keeps serving the slots it still covers (``cluster-require-full-coverage no``, or
the seconds before it marks a failed primary), the partitions on the live primaries are
enqueued to and drained, by a worker that was running and by one started during the
outage, and every partition again once the primary is back. The primary struck is the
one redis-py's cluster client asks first (its default node: it would send its
``COMMAND`` and lockgate's ``HELLO`` there).
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator

import pytest
from redis.asyncio.cluster import RedisCluster as AsyncCluster

from cluster.slots import SlotRanges, owner, primary_of_slots
from clusters import CLUSTER_OPTIONS, LocalCluster, Node
from conftest import running, wait_until
from lockgate import App, Worker, WorkerConfig
from lockgate.backend.partitions import partition_of

pytestmark = pytest.mark.chaos

PARTITIONS = 9
PER_PHASE = 30


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """3 primaries without replicas, serving what they cover while one is down."""
    with LocalCluster(primaries=3, replicas=0) as local:
        for node in local.nodes:
            client = node.client()
            try:
                client.config_set("cluster-require-full-coverage", "no")
            finally:
                client.close()
        yield local


async def default_node(cluster: LocalCluster) -> Node:
    """The primary a fresh async cluster client of the seeds treats as its default."""
    probe = AsyncCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    try:
        await probe.initialize()
        port = int(probe.get_default_node().port)
    finally:
        await probe.aclose()
    return next(node for node in cluster.nodes if node.port == port)


def live_ids(app: App, down: int, ranges: SlotRanges, tag: str) -> list[str]:
    """PER_PHASE job ids in partitions the primary at port ``down`` does not hold, spread
    over all of them."""
    parts = app.store.layout.parts
    live = {p for p in range(PARTITIONS) if owner(ranges, parts[p].prefix) != down}
    found = (f"{tag}-{n}" for n in range(100_000))
    return [i for i in found if partition_of(i, PARTITIONS) in live][:PER_PHASE]


async def test_while_a_primary_is_down_the_other_partitions_are_served(
    cluster: LocalCluster,
) -> None:
    victim = await default_node(cluster)
    ranges = primary_of_slots(cluster)
    # The namespace's own tag (registry, wake-ups, partition record) on a live primary.
    namespace = next(
        ns for ns in (uuid.uuid4().hex for _ in range(1000))
        if owner(ranges, f"lockgate:{{{ns}}}:") != victim.port
    )  # fmt: skip
    ran: list[str] = []

    def build() -> App:
        app = App(cluster.seeds, namespace=namespace, partitions=PARTITIONS)

        @app.task
        async def job(tag: str) -> None:
            ran.append(tag)

        return app

    first, second = build(), build()
    before = [f"before-{n}" for n in range(PER_PHASE)]
    # A read whose reply the down node's failure cut off (redis-py closes every node's
    # connections then) leaves its jobs pending until the visibility timeout: short here.
    try:
        job = first.tasks["job"]
        first.enqueue_many([job.message(i, job_id=i) for i in before])
        worker = Worker(first, WorkerConfig(concurrency=4, idle_wait=0.5, visibility_timeout=5.0))
        async with running(worker):
            # Settled, not only run: a settle still bound for the primary about to die
            # could not land, and the worker would not stop while it waits.
            await wait_until(lambda: worker.processed == PER_PHASE, message="every job before")
            victim.signal(signal.SIGKILL)
            during = live_ids(first, victim.port, ranges, "during")
            for job_id in during[: PER_PHASE // 2]:
                await job.enqueue_async(job_id, job_id=job_id)
            rest = during[PER_PHASE // 2 :]
            first.enqueue_many([job.message(i, job_id=i) for i in rest])
            await wait_until(
                lambda: set(during) <= set(ran), timeout=60,
                message="the live partitions' jobs, by the running worker",
            )  # fmt: skip
        restarted = Worker(
            second, WorkerConfig(concurrency=4, idle_wait=0.5, visibility_timeout=5.0)
        )
        later = live_ids(second, victim.port, ranges, "later")
        second.enqueue_many([second.tasks["job"].message(i, job_id=i) for i in later])
        async with running(restarted):
            await wait_until(
                lambda: set(later) <= set(ran), timeout=60,
                message="the live partitions' jobs, by a worker started during the outage",
            )  # fmt: skip
            assert not victim.alive  # still down: those jobs ran without it
            # The primary comes back (empty, its slots its own again): its partitions
            # are served again by the worker that passed them over.
            victim.start("redis-server", *CLUSTER_OPTIONS)
            cluster.wait_ok()
            back = [f"back-{n}" for n in range(PER_PHASE)]
            assert {partition_of(i, PARTITIONS) for i in back} == set(range(PARTITIONS))
            await second.enqueue_many_async(
                [second.tasks["job"].message(i, job_id=i) for i in back]
            )
            await wait_until(
                lambda: set(back) <= set(ran), timeout=60,
                message="every partition's jobs once the primary is back",
            )  # fmt: skip
    finally:
        for app in (first, second):
            await app.aclose()
            app.close()
    assert sorted(ran) == sorted(before + during + later + back)
