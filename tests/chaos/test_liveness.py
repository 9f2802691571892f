"""Runs once when time misbehaves: a live worker never loses its job to another because
Redis was away for less than the lease, or because a task blocked its event loop.

Timing is not a proof of death. Each test runs long jobs on real workers against a real
server and injects the fault while they run; every job must run exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from conftest import delete_namespace, running, wait_until, worker_for
from faults.support import Gate, Runs, once
from lockgate import AlreadyProcessed, App, ClaimBusy, ConnectionFailed, Worker
from lockgate.integrations.embedded import EmbeddedServer

pytestmark = pytest.mark.chaos

LEASE = 3.0  # visibility timeout and claim lease of these workers
OUTAGE = 2.8  # seconds the server is down: shorter than the lease, longer than its gap


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    """A server of this test's own (AOF fsync always: a restart keeps every PEL entry and
    its idle time), so killing it harms no one."""
    with EmbeddedServer(appendonly=True, fsync="always") as embedded:
        yield embedded


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_an_outage_shorter_than_the_lease_runs_no_job_twice(
    make_app: Callable[..., App], server: EmbeddedServer, backend: str
) -> None:
    """Two workers run long jobs (half of them idempotent=True); Redis is killed and
    restarted from its AOF after OUTAGE seconds. Before liveness, the PEL entries (or
    leases) had aged past the visibility timeout meanwhile and the first reclaim after
    the restart took the other worker's running jobs: they ran twice, at the same time."""
    namespace = uuid.uuid4().hex
    app = make_app(redis_url=server.url, namespace=namespace, backend=backend)
    runs = Runs()
    release = Gate()  # a run taken over runs in a child process: it must end there too

    async def body(job_id: str) -> None:
        runs.record(job_id)
        await release.wait()

    @app.task
    async def plain(job_id: str) -> None:
        await body(job_id)

    @app.task(idempotent=True)
    async def claimed(job_id: str) -> None:
        await body(job_id)

    ids = [f"p{n}" for n in range(3)] + [f"c{n}" for n in range(3)]
    try:
        for job_id in ids:
            task = plain if job_id.startswith("p") else claimed
            task.enqueue(job_id, job_id=job_id)
        # Free slots: a worker reclaims only when it has room for the job.
        config = {"concurrency": 4, "visibility_timeout": LEASE, "claim_lease": LEASE}
        first, second = worker_for(app, **config), worker_for(app, **config)
        async with running(first), running(second):
            await wait_until(lambda: runs.ran_all(ids), message="every job running")
            server.kill()
            await asyncio.sleep(OUTAGE)  # the fault: how long Redis is away
            server.start()
            # Past a whole lease after the restart: any reclaim would have happened.
            await asyncio.sleep(2 * LEASE)
            release.set()
            settled = lambda: first.processed + second.processed >= len(ids)  # noqa: E731
            with contextlib.suppress(AssertionError):  # a job run twice settles once
                await wait_until(settled, timeout=20, message="every job settled")
        assert runs.counts() == once(ids)
        assert first.processed + second.processed == len(ids)
        assert first.dead == second.dead == 0
    finally:
        delete_namespace(server.url, namespace)


CLAIM_LEASE = 1.0  # the user claim's lease: shorter than the outage, unlike the worker's


async def test_a_claim_outlives_an_outage_longer_than_its_lease_while_its_holder_lives(
    make_app: Callable[..., App], server: EmbeddedServer
) -> None:
    """A task on a live worker holds ``app.idempotent(key, lease=CLAIM_LEASE)``; Redis
    is killed and restarted from its AOF after OUTAGE seconds, longer than the claim's
    lease but shorter than the worker's liveness lease. Before, the claim had lapsed
    meanwhile and the first caller after the restart took it while its holder still ran
    the side effect: it ran twice. Now every caller meets ``ClaimBusy`` until the holder
    ends, and then ``AlreadyProcessed``."""
    namespace = uuid.uuid4().hex
    app = make_app(redis_url=server.url, namespace=namespace)
    other = make_app(redis_url=server.url, namespace=namespace)  # another process's App
    holding, release = Gate(), Gate()

    @app.task
    async def hold(key: str) -> None:
        async with app.idempotent(key, lease=CLAIM_LEASE):
            holding.set()
            await release.wait()

    async def try_claim() -> str:
        try:
            async with other.idempotent("order-1", lease=CLAIM_LEASE):
                return "taken"
        except ClaimBusy:
            return "busy"
        except AlreadyProcessed:
            return "done"
        except ConnectionFailed:
            return "down"

    try:
        hold.enqueue("order-1")
        worker = worker_for(app, visibility_timeout=LEASE, claim_lease=LEASE)
        async with running(worker):
            await holding.wait()
            server.kill()
            await asyncio.sleep(OUTAGE)  # the fault: longer than the claim's lease
            server.start()
            answers: list[str] = []
            deadline = time.monotonic() + 2 * LEASE
            while time.monotonic() < deadline and "taken" not in answers:
                answers.append(await try_claim())
                await asyncio.sleep(0.02)
            assert "taken" not in answers, answers
            assert "busy" in answers, answers
            release.set()
            await wait_until(lambda: worker.processed == 1, message="the holder ended")
        assert await try_claim() == "done"
    finally:
        delete_namespace(server.url, namespace)


async def test_a_claim_settle_lost_to_an_outage_is_sent_again_once_redis_is_back(
    make_app: Callable[..., App], server: EmbeddedServer
) -> None:
    """A task leaves ``app.idempotent`` while Redis is down: its done marker cannot be
    written and the job fails. The claim, held by a live worker, would stay busy for its
    long hold; instead the lease keeper sends the settle again once Redis is back, and
    any caller finds the work done."""
    namespace = uuid.uuid4().hex
    app = make_app(redis_url=server.url, namespace=namespace)
    other = make_app(redis_url=server.url, namespace=namespace)
    holding, release, effects = Gate(), Gate(), Runs()

    @app.task(retries=3)
    async def charge(key: str) -> None:
        async with app.idempotent(key, lease=CLAIM_LEASE):
            effects.record(key)
            holding.set()
            await release.wait()

    async def done() -> bool:
        """Whether another caller finds the work done; busy or unreachable: not yet."""
        try:
            async with other.idempotent("order-2", lease=CLAIM_LEASE):
                effects.record("order-2 again")
        except AlreadyProcessed:
            return True
        except (ClaimBusy, ConnectionFailed):
            return False
        raise AssertionError(f"the claim was taken again: {effects.counts()}")

    try:
        charge.enqueue("order-2")
        worker = worker_for(app, visibility_timeout=LEASE, claim_lease=LEASE)
        async with running(worker):
            await holding.wait()
            server.kill()
            release.set()  # the block ends while Redis is down: its settle fails
            await asyncio.sleep(0.5)
            server.start()
            await wait_until(done, timeout=20, message="the claim's settle sent again")
            ended = lambda: worker.processed + worker.dead == 1  # noqa: E731
            await wait_until(ended, message="the job ended")
        assert effects.counts() == {"order-2": 1}
    finally:
        delete_namespace(server.url, namespace)


class InThread:
    """A worker run on an event loop of its own, in a thread: a task that blocks that
    loop blocks nothing else of the test."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.errors: list[BaseException] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()
        self.thread = threading.Thread(target=self._main, name="own-loop-worker", daemon=True)
        self.thread.start()
        assert self._started.wait(10)

    def _main(self) -> None:
        async def run() -> None:
            self._loop = asyncio.get_running_loop()
            self._started.set()
            await self.worker.run()

        try:
            asyncio.run(run())
        except BaseException as e:
            self.errors.append(e)

    async def stop(self) -> None:
        """Ask the worker to stop, from its own loop, and wait for its thread."""
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # its loop already closed
            self._loop.call_soon_threadsafe(self.worker.request_stop)
        await asyncio.to_thread(self.thread.join, 30)
        assert not self.thread.is_alive(), "the worker did not stop"
        assert not self.errors, self.errors


async def test_a_task_that_blocks_its_event_loop_keeps_its_job(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    """``time.sleep`` inside an ``async def`` for 3.5x the visibility timeout: its
    worker's entry heartbeats stop with its loop, but its liveness thread beats on, so
    the other worker (which reclaimed and ran it again before) leaves it alone; the stall
    is logged with the job's id."""
    visibility = 1.0
    app = make_app()
    runs = Runs()
    blocking = Gate()

    @app.task
    async def stubborn(job_id: str) -> None:
        runs.record(job_id)
        blocking.set()
        time.sleep(3.5 * visibility)  # blocks the loop: the defect under test

    @app.task
    async def quick(job_id: str) -> None:
        runs.record(job_id)

    config = {"concurrency": 2, "visibility_timeout": visibility, "claim_lease": visibility}
    blocked = worker_for(app, **config)
    other = worker_for(app, **config)
    stubborn.enqueue("stuck", job_id="stuck")
    caplog.set_level(logging.WARNING, logger="lockgate.worker.liveness")
    own = InThread(blocked)
    try:
        await blocking.wait()
        async with running(other):
            # The other worker keeps working meanwhile, and reclaims nothing.
            quick.enqueue("q", job_id="q")
            await wait_until(lambda: other.processed == 1, message="other worker's job")
            await wait_until(lambda: blocked.processed == 1, timeout=30, message="unblocked")
        assert runs.counts() == once(["stuck", "q"])
        stalls = [r.getMessage() for r in caplog.records if "event loop" in r.getMessage()]
        assert any("blocked for" in m and "'stuck'" in m for m in stalls), stalls
    finally:
        await own.stop()
