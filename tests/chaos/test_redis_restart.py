"""A private Redis server killed and restarted under a running worker and a producer."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from conftest import delete_namespace, most_at_once, running, wait_until, worker_for
from lockgate import App, ConnectionFailed
from lockgate.integrations.embedded import EmbeddedServer

pytestmark = pytest.mark.chaos


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    """A server of this test's own (AOF fsync always), so killing it harms no one."""
    with EmbeddedServer(appendonly=True, fsync="always") as embedded:
        yield embedded


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_jobs_and_worker_survive_a_server_crash(
    make_app: Callable[..., App], server: EmbeddedServer, backend: str
) -> None:
    namespace = uuid.uuid4().hex
    app = make_app(redis_url=server.url, namespace=namespace, backend=backend)
    ran: list[str] = []

    @app.task
    async def job(name: str) -> None:
        ran.append(name)

    try:
        # Queued before the crash, with no worker: the AOF keeps them.
        for n in range(3):
            job.enqueue(f"before-{n}")
        server.kill()
        with pytest.raises(ConnectionFailed):
            job.enqueue("while-down")
        server.start()

        worker = worker_for(app, concurrency=2)
        async with running(worker):
            await wait_until(lambda: worker.processed == 3, message="jobs from before the crash")
            # Crash again under the running (idle) worker: it reconnects by itself, and
            # the scripts are loaded again on the new server process. (Async producers
            # after a restart are tested on their own below.)
            server.kill()
            server.start()
            for n in range(3):
                assert job.enqueue(f"after-{n}").created
            await wait_until(lambda: worker.processed == 6, message="jobs after the restart")
        assert sorted(ran) == [f"after-{n}" for n in range(3)] + [f"before-{n}" for n in range(3)]
        assert worker.dead == 0
    finally:
        delete_namespace(server.url, namespace)


async def test_producers_enqueue_again_after_a_server_restart(
    make_app: Callable[..., App], server: EmbeddedServer
) -> None:
    """Producers connected before a restart keep working after it, sync and async alike.

    Since the worker shares its client with the App on its loop, tasks and claims running
    in a worker depend on this too.
    """
    namespace = uuid.uuid4().hex
    app = make_app(redis_url=server.url, namespace=namespace)

    @app.task
    async def job(name: str) -> None: ...

    try:
        assert job.enqueue("sync-before").created
        assert (await job.enqueue_async("async-before")).created
        server.kill()
        server.start()
        assert job.enqueue("sync-after").created
        assert (await job.enqueue_async("async-after")).created
        assert queued(app) == 4
    finally:
        delete_namespace(server.url, namespace)


def queued(app: App) -> int:
    """How many jobs wait in the app's default stream (the AOF kept the first two)."""
    return int(app.client().xlen(app.keys.stream("default", "normal")))


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_slots_and_a_debounced_next_run_survive_a_server_crash(
    make_app: Callable[..., App], server: EmbeddedServer, backend: str
) -> None:
    """A crash (SIGKILL, restart from the AOF) while jobs of ``key_concurrency=2``
    hold their slots and a debounced job runs with a next run queued: every job ends once,
    never more than 2 of a key at once, no slot is left held, and the next run runs once
    with the last arguments."""
    namespace = uuid.uuid4().hex
    app = make_app(redis_url=server.url, namespace=namespace, backend=backend)
    spans: dict[str, list[tuple[float, float]]] = {}
    ended: list[str] = []
    debounced_runs: list[int] = []
    hold = asyncio.Event()

    @app.task(key_by="tenant", key_concurrency=2)
    async def limited(tenant: str, n: int) -> None:
        start = time.monotonic()
        await hold.wait()
        spans.setdefault(tenant, []).append((start, time.monotonic()))
        ended.append(f"{tenant}{n}")

    @app.task(debounce=0.05)
    async def rebuild(n: int) -> None:
        debounced_runs.append(n)
        await hold.wait()

    try:
        app.enqueue_many([limited.message(t, n) for t in "ab" for n in range(10)])
        rebuild.enqueue(0, job_id="feed")
        worker = worker_for(app, concurrency=8)
        async with running(worker):
            await wait_until(lambda: debounced_runs == [0], message="the debounced run started")
            slots = [app.keys.fair_slots(limited.name, t) for t in "ab"]
            await wait_until(lambda: sum(app.client().zcard(s) for s in slots) == 4,
                             message="both keys at their limit")  # fmt: skip
            assert [rebuild.enqueue(n, job_id="feed").created for n in (1, 2)] == [True, False]
            server.kill()
            server.start()
            hold.set()
            await wait_until(lambda: len(ended) == 20 and debounced_runs == [0, 2],
                             timeout=60, message="every job ended")  # fmt: skip
            await wait_until(lambda: app.job("feed").status == "done", message="next run ended")
        assert sorted(ended) == sorted(f"{t}{n}" for t in "ab" for n in range(10))
        assert all(most_at_once(runs) <= 2 for runs in spans.values()), spans
        assert sum(app.client().zcard(s) for s in slots) == 0
        assert worker.dead == 0
    finally:
        delete_namespace(server.url, namespace)
