"""Issue 8, defect 5: an ``idempotent=True`` job through a crash of Redis with AOF ``always``.

The task's claim lives in Redis only (no PostgreSQL). The server is SIGKILLed while the
job runs and restarted; nothing acknowledged is lost with ``appendfsync always``, so the
job must end having run once, acknowledged, with its done marker written: a duplicate of
the finished job is acknowledged without running. Today, when the job finishes while the
server is down, the failed acknowledgement drops its done marker and lets its lease go:
the entry is reclaimed and the job runs (charges) a second time.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Literal

import pytest

from conftest import WAIT_TIMEOUT, running, worker_for
from faults.support import PrivateRedis, Runs, hold, settled, wait_serving
from lockgate import App, Task, current_job

# The lease of the job's claim and of its stream entry; it must outlive the outage, or a
# correct worker would see the job taken over while the server was down.
VISIBILITY = 5.0
JOB_ID = "pay:A1"

Kind = Literal["sync", "async"]


class Charge:
    """An idempotent ``charge`` task that records its run, then blocks until released."""

    def __init__(self, app: App, kind: Kind) -> None:
        self.runs = Runs()
        self.finished = Runs()
        self._thread_gate = threading.Event()
        self._loop_gate = asyncio.Event()
        self.task: Task[..., None]
        if kind == "sync":

            @app.task(idempotent=True, name="charge")
            def charge_sync(order: str) -> None:
                job_id = current_job().job_id
                self.runs.record(job_id)
                self._thread_gate.wait(WAIT_TIMEOUT)
                self.finished.record(job_id)

            self.task = charge_sync
        else:

            @app.task(idempotent=True, name="charge")
            async def charge_async(order: str) -> None:
                job_id = current_job().job_id
                self.runs.record(job_id)
                await self._loop_gate.wait()
                self.finished.record(job_id)

            self.task = charge_async

    def release(self) -> None:
        self._thread_gate.set()
        self._loop_gate.set()


@pytest.fixture
def aof_server(private_redis: Callable[..., PrivateRedis]) -> Iterator[PrivateRedis]:
    """A private server that loses nothing acknowledged when SIGKILLed."""
    yield private_redis(appendonly="yes", appendfsync="always")


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("finish", ["after-restart", "while-down"])
async def test_idempotent_job_through_a_redis_crash_runs_once_and_keeps_its_done_marker(
    make_app: Callable[..., App], aof_server: PrivateRedis, kind: Kind, finish: str
) -> None:
    """``after-restart``: killed and restarted while the job runs, then the job finishes.
    ``while-down``: killed while the job runs, the job finishes while the server is down,
    and the server comes back only after that.
    """
    server = aof_server
    app = make_app(redis_url=server.url, namespace=uuid.uuid4().hex)
    charge = Charge(app, kind)
    assert charge.task.enqueue("A1", job_id=JOB_ID).created
    worker = worker_for(app, concurrency=2, visibility_timeout=VISIBILITY)
    try:
        async with running(worker) as task:
            await wait_serving(task, lambda: charge.runs.total() == 1, message="the job running")
            server.kill()
            if finish == "after-restart":
                server.restart()
                charge.release()
            else:
                charge.release()
                await wait_serving(
                    task, lambda: charge.finished.total() == 1, message="the job finished"
                )
                # Held down a while, so the job's settle meets the dead server.
                await hold(task, 0.5, "the server down after the job finished")
                server.restart()
            await settled(task, app, server, charge.runs, [JOB_ID])
            assert charge.runs.counts() == {JOB_ID: 1}

            # The done marker made it: a duplicate of the finished job is acknowledged
            # without running (or refused at enqueue).
            if charge.task.enqueue("A1", job_id=JOB_ID).created:
                await settled(task, app, server, charge.runs, [JOB_ID])
        assert charge.runs.counts() == {JOB_ID: 1}
    finally:
        charge.release()
