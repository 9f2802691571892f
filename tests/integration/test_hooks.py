"""on_startup and on_shutdown: what they set up is there for the first job, they run in
order around every job, and a failing startup stops the worker in one line."""

from __future__ import annotations

import asyncio
import logging
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cli_runs import invoke, one_error_line

from conftest import worker_for
from lockgate import App, ConfigError, StartupFailed
from lockgate.ops.inspect import queue_stats


async def test_hooks_run_in_order_around_every_job_and_share_app_state(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    events: list[str] = []

    @app.on_startup
    def first() -> None:
        events.append("startup first")
        app.state.pool = ["connection"]

    @app.on_startup
    async def second(started: App) -> None:
        await asyncio.sleep(0)
        events.append(f"startup second, pool {started.state.pool}")

    @app.on_shutdown
    async def close_second() -> None:
        events.append("shutdown second")

    @app.on_shutdown
    def close_first(stopped: App) -> None:
        events.append(f"shutdown first, pool {stopped.state.pool}")
        stopped.state.pool = None

    @app.task
    async def job(n: int) -> None:
        events.append(f"job {n} with {app.state.pool}")

    await app.enqueue_many_async([job.message(n) for n in range(3)])
    await asyncio.wait_for(worker_for(app, concurrency=1).run(burst=True), 30)
    assert events[:2] == ["startup first", "startup second, pool ['connection']"]
    assert sorted(events[2:5]) == [f"job {n} with ['connection']" for n in range(3)]
    # Shutdown hooks run last declared first, after the last job.
    assert events[5:] == ["shutdown first, pool ['connection']", "shutdown second"]
    assert app.state.pool is None


async def test_a_failing_startup_hook_stops_the_worker_before_any_job(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    ran: list[str] = []

    @app.on_startup
    async def connect() -> None:
        raise OSError("pool unreachable")

    @app.on_shutdown
    def never() -> None:
        ran.append("shutdown")

    @app.task
    def job() -> None:
        ran.append("job")

    await job.enqueue_async()
    with pytest.raises(StartupFailed) as caught:
        await asyncio.wait_for(worker_for(app).run(burst=True), 30)
    assert str(caught.value) == "on_startup hook " + (
        "test_a_failing_startup_hook_stops_the_worker_before_any_job.<locals>.connect "
        "failed: OSError: pool unreachable"
    )
    assert isinstance(caught.value, ConfigError)
    assert ran == []
    stats = await queue_stats(app)
    assert sum(row.waiting for row in stats.levels) == 1  # untouched, for a worker that can


async def test_a_failing_shutdown_hook_is_logged_and_the_others_still_run(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    closed: list[str] = []

    @app.on_shutdown
    def last() -> None:
        closed.append("last")

    @app.on_shutdown
    def broken() -> None:
        raise RuntimeError("already closed")

    with caplog.at_level(logging.ERROR, logger="lockgate.api.hooks"):
        await asyncio.wait_for(worker_for(app).run(burst=True), 30)
    assert closed == ["last"]
    assert any("on_shutdown hook" in r.getMessage() and "broken" in r.getMessage()
               for r in caplog.records)  # fmt: skip


@pytest.mark.parametrize("hook", [lambda a, b: None, "not a function"])
def test_a_hook_of_the_wrong_shape_is_refused_at_declaration(
    make_app: Callable[..., App], hook: Any
) -> None:
    app = make_app()
    with pytest.raises(ConfigError):
        app.on_startup(hook)
    with pytest.raises(ConfigError):
        app.on_shutdown(hook)


@pytest.fixture
def hooks_app(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> Iterator[str]:
    namespace = uuid.uuid4().hex
    monkeypatch.setenv("LOCKGATE_TEST_NAMESPACE", namespace)
    monkeypatch.setenv("LOCKGATE_REDIS_URL", redis_url)
    monkeypatch.setenv("LOCKGATE_TEST_FAIL_STARTUP", "1")
    sys.modules.pop("hooks_app", None)
    yield namespace
    module = sys.modules.pop("hooks_app", None)
    if module is not None:
        module.app.close()


def test_the_cli_worker_exits_2_with_one_line_when_startup_fails(hooks_app: str) -> None:
    result = invoke("worker", "hooks_app:app", "--burst")
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert line == (
        "error: on_startup hook open_pool failed: ConnectionRefusedError: database at "
        "127.0.0.1:1 refused the connection"
    )
