"""Issue 27: a wait for a result that times out says when no live worker serves the job's
queue (none runs, or none serves that queue), and does not when one does."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

import pytest

from conftest import running, wait_until, worker_for
from lockgate import App
from lockgate.ops.inspect import live_workers

UNSERVED = "no live worker serves its queue"


async def test_a_timeout_with_no_worker_running_says_no_worker_serves_the_queue(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    @app.task(keep_result=60, queue="mail")
    def send(to: str) -> None: ...

    handle = send.enqueue("a@example.com", job_id="send-1")
    said = "no live worker serves its queue 'mail' (no worker is running)"
    whole = re.escape(f"job 'send-1' did not end within 0.1 s: {said}")
    with pytest.raises(TimeoutError, match=f"^{whole}$"):
        handle.result(timeout=0.1)
    with pytest.raises(TimeoutError, match=re.escape(said)):
        await handle.result_async(timeout=0.1)
    with pytest.raises(TimeoutError, match=re.escape(said)):
        app.wait_result("send-1", "send", timeout=0.1)


async def test_a_timeout_names_the_queues_the_live_workers_serve(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    @app.task(keep_result=60, queue="mail")
    def send(to: str) -> None: ...

    @app.task(keep_result=60)
    def other() -> None: ...

    handle = send.enqueue("a@example.com")
    worker = worker_for(app, queues=("default",))
    async with running(worker):
        (live,) = await wait_until(lambda: live_workers(app))
        assert live.queues == ("default",)
        with pytest.raises(TimeoutError) as raised:
            await handle.result_async(timeout=0.1)
    assert str(raised.value).endswith(
        "no live worker serves its queue 'mail' (the live workers serve default)"
    )


async def test_a_timeout_with_a_worker_serving_the_queue_says_nothing_of_workers(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    release = asyncio.Event()

    @app.task(keep_result=60)
    async def blocked() -> None:
        await release.wait()

    handle = blocked.enqueue()
    worker = worker_for(app)
    async with running(worker):
        await wait_until(lambda: handle.info().status == "running")
        await wait_until(lambda: live_workers(app))  # in the registry: it serves the queue
        with pytest.raises(TimeoutError) as raised:
            await handle.result_async(timeout=0.1)
        release.set()
    assert str(raised.value) == f"job {handle.job_id!r} did not end within 0.1 s"
    assert UNSERVED not in str(raised.value)
