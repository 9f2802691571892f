"""Workflows on a real Redis Cluster: a 10,000-job group with a callback, with one
partition and with four (the flow's records and all its jobs in the flow's partition, so
each settle reaches the barrier in one call: no CROSSSLOT)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from clusters import LocalCluster
from conftest import running, worker_for
from lockgate import App, current_job, group


@pytest.fixture
def apps(cluster: LocalCluster) -> Iterator[list[App]]:
    made: list[App] = []
    yield made
    for app in made:
        app.close()


@pytest.mark.parametrize("partitions", [1, 4])
async def test_a_ten_thousand_job_group_and_its_callback_run_once(
    cluster: LocalCluster, apps: list[App], partitions: int
) -> None:
    app = App(cluster.seeds, namespace=uuid.uuid4().hex, partitions=partitions)
    apps.append(app)
    runs: list[int] = []
    callbacks: list[int] = []

    @app.task(priority="low")
    async def member(n: int) -> int:
        runs.append(n)
        return n

    @app.task(priority="critical")
    async def callback() -> int:
        callbacks.append(len(runs))
        return len(current_job().parent_results())

    members = 10_000
    flow = group(*(member.message(n) for n in range(members))).then(callback.message())
    try:
        result = await app.enqueue_flow_async(flow, flow_id="big")
        assert result.created
        async with running(worker_for(app, concurrency=64)):
            assert await result.result_async(timeout=240) == members
        assert (await app.flow_async("big")).state == "done"
    finally:
        await app.aclose()
    assert sorted(runs) == list(range(members))
    assert callbacks == [members]
