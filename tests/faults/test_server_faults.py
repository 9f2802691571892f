"""Redis refuses, pauses, forgets or dies under a running worker: nothing lost or doubled.

Each test runs an in-process worker against a private server, injects one fault while jobs
are running (their acknowledgements and the next reads meet the fault), lifts it, and then
requires that every job ran exactly once, that nothing is left queued, pending, delayed or
dead-lettered, and that the worker's run() never ended. Runs are recorded in the test
process, outside the faulted server.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
import redis

from conftest import running, wait_until, worker_for
from faults.support import (
    BUSY_SCRIPT,
    Gate,
    PrivateRedis,
    Runs,
    closed_port,
    hold,
    once,
    settled,
    wait_serving,
)
from lockgate import App, Worker, current_job
from lockgate.ops.metrics import WorkerMetrics

CONCURRENCY = 4
# Long enough that a worker stalled by a fault for a second or two is not taken for dead
# (its own jobs reclaimed and run twice), short enough that a dropped acknowledgement shows
# up as a second run within the test's bounds instead of a silent wait.
VISIBILITY = 5.0
MiB = 1024 * 1024
BACKENDS = ["streams", "sorted"]


class Scene:
    """An app on a private server with one async task, ``job``.

    A run records its job id, waits for the gate, then works for ``work`` seconds. With the
    gate closed the first :data:`CONCURRENCY` jobs are held running, so a fault injected
    then meets their acknowledgements as well as the worker's next reads.
    """

    def __init__(
        self,
        make_app: Callable[..., App],
        server: PrivateRedis,
        backend: str,
        work: float = 0.0,
    ) -> None:
        self.app = make_app(redis_url=server.url, namespace=uuid.uuid4().hex, backend=backend)
        self.server = server
        self.runs = Runs()
        self.gate = Gate()  # seen by a run in a child process too

        @self.app.task
        async def job(n: int) -> None:
            self.runs.record(current_job().job_id)
            await self.gate.wait()
            if work:
                await asyncio.sleep(work)

        self.job = job

    def enqueue(self, prefix: str, count: int, delay: float | None = None) -> list[str]:
        """Queue ``count`` jobs with ids ``prefix-0``...; returns their ids."""
        messages = [self.job.message(n, job_id=f"{prefix}-{n}", delay=delay) for n in range(count)]
        results = self.app.enqueue_many(messages)
        assert all(r.created for r in results)
        return [r.job_id for r in results]

    def worker(self) -> Worker:
        return worker_for(self.app, concurrency=CONCURRENCY, visibility_timeout=VISIBILITY)

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[asyncio.Task[None]]:
        """Run the worker for the block; the gate opens on the way out whatever happens."""
        worker = self.worker()
        async with running(worker) as task:
            try:
                yield task
            finally:
                self.gate.set()  # a failed test must not leave jobs waiting for the grace

    async def first_jobs_running(self, task: asyncio.Task[None]) -> None:
        await wait_serving(
            task, lambda: self.runs.total() == CONCURRENCY, message="the first jobs running"
        )

    async def settled(self, task: asyncio.Task[None], job_ids: list[str]) -> None:
        await settled(task, self.app, self.server, self.runs, job_ids)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_oom_with_due_delayed_jobs_the_worker_waits_and_runs_every_job_once(
    private_redis: Callable[..., PrivateRedis], make_app: Callable[..., App], backend: str
) -> None:
    """Issue 8, defect 6: over ``maxmemory`` with ``noeviction`` the worker backs off.

    Today the 10 immediate jobs run, then the first read after the delayed ones come due
    fails with OOM (their promotion is the script's first write) and the worker exits.
    """
    server = private_redis(maxmemory_policy="noeviction")
    scene = Scene(make_app, server, backend)
    scene.gate.set()
    job_ids = scene.enqueue("now", 10) + scene.enqueue("later", 10, delay=0.5)
    # Over the limit: 2 MiB of junk under a limit 1 MiB above what was used without it.
    # Appended in pieces: one 2 MiB command would inflate used_memory with its query
    # buffer for a moment, and the server would fall back under the limit when it shrinks.
    baseline = server.used_memory()
    for _ in range(32):
        server.client.append("junk", b"x" * (64 * 1024))
    server.client.config_set("maxmemory", baseline + MiB)
    assert server.used_memory() > baseline + MiB
    with pytest.raises(redis.OutOfMemoryError):
        server.client.set("probe", "x")

    async with scene.serving() as task:
        # The delayed jobs come due while the server is over its limit.
        await hold(task, 2.0, "OOM")
        # Draining 20 small jobs frees a few KiB, far from the 1 MiB excess: the operator
        # frees memory, and the worker must carry on by itself.
        server.client.delete("junk")
        await scene.settled(task, job_ids)
    assert scene.runs.counts() == once(job_ids)


def busy(client: redis.Redis) -> bool:
    """Whether the server answers BUSY (another client's script is running too long)."""
    try:
        client.ping()
    except redis.ResponseError as e:
        return str(e).startswith("BUSY")
    return False


@pytest.mark.parametrize("backend", BACKENDS)
async def test_busy_script_while_jobs_finish_every_job_acked_once(
    private_redis: Callable[..., PrivateRedis], make_app: Callable[..., App], backend: str
) -> None:
    """Issue 8, defect 6: ``BUSY`` (another client's long script) is transient.

    Today the acknowledgements that meet BUSY are dropped (the jobs would run again after
    the visibility timeout) and the next read's BUSY ends the worker.
    """
    server = private_redis(lua_time_limit=100)
    scene = Scene(make_app, server, backend)
    job_ids = scene.enqueue("job", 12)
    scripter = server.connect()
    async with scene.serving() as task:
        await scene.first_jobs_running(task)
        script = asyncio.ensure_future(asyncio.to_thread(scripter.eval, BUSY_SCRIPT, 0, 1500))
        try:
            await wait_serving(task, lambda: asyncio.to_thread(busy, server.client), message="BUSY")
            scene.gate.set()  # the running jobs finish while the server answers BUSY
            await wait_serving(task, script.done, message="the long script to end")
        finally:
            await script
        await scene.settled(task, job_ids)
    assert scene.runs.counts() == once(job_ids)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_readonly_replica_for_a_while_every_job_runs_once(
    private_redis: Callable[..., PrivateRedis], make_app: Callable[..., App], backend: str
) -> None:
    """Issue 8, must-have 2: ``READONLY`` (the server turned replica, e.g. a failover).

    ``REPLICAOF`` a master that is not there: the data stays, writes fail with READONLY
    (``replica-read-only`` is on by default) until ``REPLICAOF NO ONE``.
    """
    server = private_redis()
    assert server.client.config_get("replica-read-only") == {"replica-read-only": "yes"}
    scene = Scene(make_app, server, backend)
    job_ids = scene.enqueue("job", 12)
    async with scene.serving() as task:
        await scene.first_jobs_running(task)
        server.client.replicaof("127.0.0.1", closed_port())
        try:
            with pytest.raises(redis.ReadOnlyError):
                server.client.set("probe", "x")
            scene.gate.set()  # the running jobs finish while writes are refused
            await hold(task, 1.0, "READONLY")
        finally:
            server.client.replicaof("NO", "ONE")
        await scene.settled(task, job_ids)
    assert scene.runs.counts() == once(job_ids)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_function_flush_mid_run_every_job_runs_once(
    private_redis: Callable[..., PrivateRedis], make_app: Callable[..., App], backend: str
) -> None:
    """``FUNCTION FLUSH`` (or a failover to a server without the library): reload, go on."""
    server = private_redis()
    scene = Scene(make_app, server, backend, work=0.02)
    job_ids = scene.enqueue("job", 12)
    async with scene.serving() as task:
        await scene.first_jobs_running(task)
        server.client.function_flush()
        scene.gate.set()
        await wait_serving(task, lambda: scene.runs.total() >= 8, message="more jobs")
        server.client.function_flush()
        await scene.settled(task, job_ids)
    assert scene.runs.counts() == once(job_ids)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_client_kill_again_and_again_mid_run_every_job_runs_once(
    private_redis: Callable[..., PrivateRedis], make_app: Callable[..., App], backend: str
) -> None:
    """``CLIENT KILL TYPE normal`` from another client every few ms while jobs run, so
    kills land between a command and its reply (reads, acks, heartbeats, blocked waits).
    """
    server = private_redis()
    scene = Scene(make_app, server, backend, work=0.02)
    job_ids = scene.enqueue("job", 40)
    killer = server.connect()
    async with scene.serving() as task:
        await scene.first_jobs_running(task)
        kills = 0
        for _ in range(50):
            kills += int(killer.client_kill_filter(_type="normal", skipme=True))
            scene.gate.set()  # after the first kill: acks and reads meet the next ones
            await hold(task, 0.02, "CLIENT KILL")
        assert kills > 0
        await scene.settled(task, job_ids)
    assert scene.runs.counts() == once(job_ids)


def scripts_waiting(client: redis.Redis) -> int:
    """How many clients wait with a script call on a paused server."""
    return sum(
        1
        for c in client.client_list()
        if "b" in c.get("flags", "") and c.get("cmd") in {"fcall", "fcall_ro"}
    )


@pytest.mark.parametrize("backend", BACKENDS)
async def test_client_kill_of_settles_in_flight_every_job_runs_once(
    private_redis: Callable[..., PrivateRedis], make_app: Callable[..., App], backend: str
) -> None:
    """The same fault made certain to hit settles: with writes paused, the finished jobs'
    script calls wait at the server, and every connection that waits with one is killed,
    its retries too, for a second. Today the acknowledgements are dropped on the
    connection error and the jobs run again after the visibility timeout.
    """
    server = private_redis()
    scene = Scene(make_app, server, backend)
    job_ids = scene.enqueue("job", 12)
    async with scene.serving() as task:
        await scene.first_jobs_running(task)
        server.client.client_pause(10_000, all=False)  # lifted below, not by its timeout
        try:
            scene.gate.set()
            await wait_serving(
                task, lambda: scripts_waiting(server.client), message="settles in flight"
            )
            kills = 0
            for _ in range(50):
                if scripts_waiting(server.client):
                    kills += int(server.client.client_kill_filter(_type="normal", skipme=True))
                await hold(task, 0.02, "CLIENT KILL of waiting script calls")
            assert kills > 0
        finally:
            server.client.client_unpause()
        await scene.settled(task, job_ids)
    assert scene.runs.counts() == once(job_ids)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_client_pause_write_mid_run_every_job_runs_once(
    private_redis: Callable[..., PrivateRedis], make_app: Callable[..., App], backend: str
) -> None:
    """``CLIENT PAUSE 1500 WRITE`` (what a failover does): writes and scripts wait."""
    server = private_redis()
    scene = Scene(make_app, server, backend)
    job_ids = scene.enqueue("job", 12)
    async with scene.serving() as task:
        await scene.first_jobs_running(task)
        server.client.client_pause(1500, all=False)
        scene.gate.set()  # the running jobs finish while writes are paused
        await hold(task, 1.5, "CLIENT PAUSE")
        await scene.settled(task, job_ids)
    assert scene.runs.counts() == once(job_ids)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_flushall_mid_run_the_worker_keeps_serving(
    private_redis: Callable[..., PrivateRedis], make_app: Callable[..., App], backend: str
) -> None:
    """``FLUSHALL`` under a running worker: the streams, the consumer group and the
    pending entries are gone. Jobs queued before are lost by definition; the worker must
    survive the missing keys and group (NOGROUP) and run every job enqueued after once.
    """
    server = private_redis()
    scene = Scene(make_app, server, backend)
    before = scene.enqueue("before", 12)
    async with scene.serving() as task:
        await scene.first_jobs_running(task)
        server.client.flushall()
        # Kept running past a heartbeat (every third of the visibility timeout), which
        # meets the missing stream and group; then they finish with their entries gone.
        await hold(task, VISIBILITY / 3 + 0.5, "FLUSHALL under running jobs")
        scene.gate.set()
        after = scene.enqueue("after", 6)
        await scene.settled(task, after)
    runs = scene.runs.counts()
    assert {job_id: runs[job_id] for job_id in after} == once(after)
    assert all(runs.get(job_id, 0) <= 1 for job_id in before), runs


@pytest.mark.parametrize("backend", BACKENDS)
async def test_restart_without_persistence_the_worker_reconnects_and_serves(
    private_redis: Callable[..., PrivateRedis], make_app: Callable[..., App], backend: str
) -> None:
    """A crash of a server without persistence (everything in it lost) under running jobs:
    the worker reconnects, its settles meet an empty server, jobs enqueued after the
    restart run once.
    """
    server = private_redis()
    scene = Scene(make_app, server, backend)
    before = scene.enqueue("before", 8)
    async with scene.serving() as task:
        await scene.first_jobs_running(task)
        server.kill()
        await hold(task, 0.5, "the server down")
        server.restart()
        # Kept running past a heartbeat, which meets the empty server; then they finish.
        await hold(task, VISIBILITY / 3 + 0.5, "an empty server under running jobs")
        scene.gate.set()
        after = scene.enqueue("after", 6)
        await scene.settled(task, after)
    runs = scene.runs.counts()
    assert {job_id: runs[job_id] for job_id in after} == once(after)
    assert all(runs.get(job_id, 0) <= 1 for job_id in before), runs


async def status_of(url: str) -> int:
    """The HTTP status of a GET (in a thread: the probe must not block the loop)."""

    def get() -> int:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return int(response.status)
        except urllib.error.HTTPError as e:
            return int(e.code)

    return await asyncio.to_thread(get)


async def test_readyz_turns_503_while_the_server_hangs_and_200_after(
    private_redis: Callable[..., PrivateRedis], make_app: Callable[..., App]
) -> None:
    """A hung server (SIGSTOP) never makes a call raise, so "the last read did not
    raise" stayed true: /readyz said 200 through a 20 s hang. Readiness now needs a read
    or a liveness beat completed within twice the idle wait; /healthz stays 200."""
    server = private_redis()
    app = make_app(redis_url=server.url, namespace=uuid.uuid4().hex)

    @app.task
    async def noop() -> None:
        pass

    worker = worker_for(app, idle_wait=0.5)
    metrics = WorkerMetrics(worker, port=0, host="127.0.0.1")
    assert metrics.server is not None
    base = f"http://127.0.0.1:{metrics.server.port}"
    metrics.start(asyncio.get_running_loop())

    async def readiness(expected: int) -> bool:
        return await status_of(f"{base}/readyz") == expected

    try:
        async with running(worker):
            await wait_until(lambda: readiness(200), message="ready")
            server.pause()
            try:
                await wait_until(lambda: readiness(503), timeout=15, message="503 while hung")
                assert await status_of(f"{base}/healthz") == 200
            finally:
                server.resume()
            await wait_until(lambda: readiness(200), timeout=30, message="ready again")
            noop.enqueue()
            await wait_until(lambda: worker.processed == 1, message="a job after the hang")
    finally:
        metrics.close()
