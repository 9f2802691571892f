"""lockgate on a real Redis Cluster: found from any node's URL or from seeds, every job
run once on both backends, claims and dead letters, and database numbers refused."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable

import pytest
import redis

from clusters import LocalCluster
from conftest import worker_for
from lockgate import App, ConfigError, current_job
from lockgate.backend.keys import Keys
from lockgate.ops.deadletter import list_dead, replay
from lockgate.ops.inspect import queue_stats

BACKENDS = ["streams", "sorted"]


def slot_owner(cluster: LocalCluster, namespace: str) -> int:
    """The port of the primary that serves the namespace's slot."""
    client = redis.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    try:
        node = client.get_node_from_key(Keys(namespace).prefix)
        return int(node.port)
    finally:
        client.close()


def other_node(cluster: LocalCluster, port: int) -> str:
    """A node's address that does not serve ``port``'s slots (a primary or a replica)."""
    return next(node.address for node in cluster.nodes if node.port != port)


@pytest.fixture
def cluster_app(cluster: LocalCluster) -> Callable[..., App]:
    """Factory of Apps on the cluster, each in a fresh namespace."""
    made: list[App] = []

    def factory(url: str | None = None, **kwargs: object) -> App:
        app = App(url or cluster.seeds, namespace=uuid.uuid4().hex, **kwargs)  # type: ignore[arg-type]
        made.append(app)
        return app

    yield factory  # type: ignore[misc]
    for app in made:
        app.close()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_every_job_runs_once_from_a_url_naming_a_node_that_does_not_own_the_slot(
    cluster: LocalCluster, cluster_app: Callable[..., App], backend: str
) -> None:
    probe = cluster_app()
    url = f"redis://{other_node(cluster, slot_owner(cluster, probe.namespace))}/0"
    app = cluster_app(url, backend=backend)
    runs: Counter[str] = Counter()

    @app.task(priority="critical", idempotent=True)
    async def pay(n: int) -> None:
        runs[f"pay-{n}"] += 1

    @app.task(priority="low")
    def note(n: int) -> None:
        runs[f"note-{n}"] += 1

    for node in cluster.nodes:  # count from here: what this test's calls cost
        node_client = node.client()
        node_client.config_resetstat()
        node_client.close()
    app.enqueue_many([pay.message(n, job_id=f"p{n}") for n in range(60)])
    await app.enqueue_many_async([note.message(n) for n in range(60)])
    assert not pay.enqueue(0, job_id="p0").created  # a duplicate id, found on the cluster
    worker = worker_for(app, concurrency=8)
    await asyncio.wait_for(worker.run(burst=True), timeout=60)
    assert runs == Counter({**{f"pay-{n}": 1 for n in range(60)},
                            **{f"note-{n}": 1 for n in range(60)}})  # fmt: skip
    stats = await queue_stats(app)
    assert sum(row.waiting + row.pending + row.delayed for row in stats.levels) == 0
    await app.aclose()
    # redis-py asks a node for the keys of a command it cannot place (COMMAND GETKEYS, one
    # more round trip); lockgate's FCALLs never need it.
    assert getkeys_calls(cluster) == 0


def getkeys_calls(cluster: LocalCluster) -> int:
    """COMMAND GETKEYS calls served by the cluster's nodes since their stats were reset."""
    total = 0
    for node in cluster.nodes:
        client = node.client()
        try:
            stats = client.info("commandstats")
        finally:
            client.close()
        total += int(stats.get("cmdstat_command|getkeys", {}).get("calls", 0))
    return total


async def test_claims_retries_and_dead_letters_on_the_cluster(
    cluster_app: Callable[..., App],
) -> None:
    app = cluster_app()
    effects: Counter[str] = Counter()

    @app.task(retries=1, backoff=0.01)
    def flaky(name: str) -> None:
        if current_job().attempt == 1:
            raise TimeoutError("first try")
        with app.idempotent(f"effect:{name}", ttl=60):
            effects[name] += 1

    @app.task(dead_on=(ValueError,))
    def broken() -> None:
        raise ValueError("always")

    app.enqueue_many([flaky.message(f"e{n}") for n in range(20)] + [broken.message()])
    worker = worker_for(app, concurrency=4)
    await asyncio.wait_for(worker.run(burst=True), timeout=60)
    assert effects == Counter({f"e{n}": 1 for n in range(20)})
    (letter,) = list_dead(app, 10)
    assert (letter.task, letter.error_type) == ("broken", "ValueError")


async def test_dead_letters_of_every_partition_replay_once_on_the_cluster(
    cluster_app: Callable[..., App],
) -> None:
    """Each letter's replay is one script call on its partition's node (its letter, the
    job's stream and marker share the partition's slot); a second replay of the same
    listing finds every letter gone and enqueues nothing."""
    app = cluster_app(partitions=6)
    fixed = False
    runs: Counter[str] = Counter()

    @app.task(retries=0)
    def charge(n: int) -> None:
        if not fixed:
            raise ValueError("down")
        runs[current_job().job_id] += 1

    handles = app.enqueue_many([charge.message(n) for n in range(24)])
    await asyncio.wait_for(worker_for(app, concurrency=4).run(burst=True), timeout=60)
    letters = list_dead(app, 100)
    assert len({letter.id.split("/")[0] for letter in letters}) > 1  # several partitions
    assert len(letters) == 24
    fixed = True
    assert [r.outcome for r in replay(app, letters)] == ["enqueued"] * 24
    assert [r.outcome for r in replay(app, letters)] == ["gone"] * 24
    await asyncio.wait_for(worker_for(app, concurrency=4).run(burst=True), timeout=60)
    assert runs == Counter({handle.job_id: 1 for handle in handles})
    assert list_dead(app, 100) == []


async def test_a_database_number_other_than_0_is_a_config_error(
    cluster: LocalCluster, cluster_app: Callable[..., App]
) -> None:
    for url in (f"{cluster.seeds}/2", f"redis://{cluster.nodes[0].address}/3"):
        app = cluster_app(url)

        @app.task
        def job() -> None: ...

        with pytest.raises(ConfigError, match="only database 0"):
            job.enqueue()
        with pytest.raises(ConfigError, match="only database 0"):
            await worker_for(app).run(burst=True)


@pytest.mark.parametrize("legacy_markers", [False, True])
@pytest.mark.parametrize("partitions", [1, 6])
async def test_job_and_step_claims_read_their_old_names_in_one_slot_on_the_cluster(
    cluster_app: Callable[..., App], partitions: int, legacy_markers: bool
) -> None:
    """A job's claim and a step's are read under their new and their 0.2/0.3 names by
    one script (issue 22, item 7), so each pair shares a slot: no CROSSSLOT, in a
    partitioned namespace too; names that joined alike under 0.3 all run."""
    app = cluster_app(partitions=partitions, legacy_markers=legacy_markers)
    ran: Counter[tuple[str, str]] = Counter()

    def body(task: str) -> None:
        job = current_job()
        with job.step("email"):
            ran[task, job.job_id] += 1

    @app.task(name="a", idempotent=True)
    def task_a() -> None:
        body("a")

    @app.task(name="a:b", idempotent=True)
    def task_ab() -> None:
        body("a:b")

    ids = [f"b:c{n}" for n in range(10)]
    app.enqueue_many([task_a.message(job_id=i) for i in ids] +
                     [task_ab.message(job_id=i.removeprefix("b:")) for i in ids])  # fmt: skip
    assert app.incr_once("a:b", "c") == (True, 1) and app.incr_once("a", "b:c") == (True, 1)
    worker = worker_for(app, concurrency=4)
    await asyncio.wait_for(worker.run(burst=True), timeout=60)
    assert ran == Counter([("a", i) for i in ids] + [("a:b", i[2:]) for i in ids])
    assert (worker.dead, list_dead(app, 10)) == (0, [])
