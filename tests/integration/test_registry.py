"""The worker registry and the activity counts on a real Redis: a running worker is
listed with its fields, a cleanly stopped one is gone at once, one that never left drops
out when its entry expires; ``lockgate stats`` shows live workers only, and done, retried
and dead counts that equal what ran, on both backends."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from types import ModuleType

import pytest
import redis
from cli_runs import invoke

from conftest import running, wait_until, worker_for
from lockgate import App, ConfigError, RetryableError, current_job
from lockgate.backend.registry import SWEEP_AFTER, WorkerInfo
from lockgate.core.activity import counter_name, minute_of
from lockgate.ops.inspect import activity, live_workers
from lockgate.worker.registry import EXPIRES_AFTER

BACKENDS = ["streams", "sorted"]
STATS_APP = "registry_stats_app"  # the module the CLI imports the test's app from


def entry(name: str, queues: tuple[str, ...] = ("default",)) -> WorkerInfo:
    """A registry entry as a worker on another host would write it."""
    now = datetime.fromtimestamp(round(time.time(), 3), UTC)
    return WorkerInfo(name=name, host="elsewhere", pid=4242, queues=queues, concurrency=2,
                      running=1, started_at=now, last_heartbeat=now, version="0.3.0")  # fmt: skip


async def names(app: App) -> list[str]:
    return [info.name for info in await live_workers(app)]


async def test_a_running_worker_is_listed_with_its_fields_and_leaves_at_a_clean_stop(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    gate = asyncio.Event()

    @app.task
    async def hold() -> None:
        await gate.wait()

    @app.task(queue="reports")
    def report() -> None: ...

    before = datetime.now(UTC)
    worker = worker_for(app, concurrency=3)
    async with running(worker):
        await hold.enqueue_async()

        async def holding() -> WorkerInfo | None:
            found = await live_workers(app)
            return found[0] if found and found[0].running == 1 else None

        info = await wait_until(holding, timeout=5, message="the worker listed, running 1")
        assert info.name == worker.name
        assert (info.host, info.pid) == (socket.gethostname(), os.getpid())
        assert info.queues == ("default", "reports")
        assert info.concurrency == 3
        assert info.version == importlib.metadata.version("lockgate")
        assert before.timestamp() - 1 <= info.started_at.timestamp()
        assert info.started_at <= info.last_heartbeat <= datetime.now(UTC)
        assert info.last_heartbeat.tzinfo is UTC
        # A worker that dies drops out when its entry expires.
        assert 0 < rclient.pttl(app.keys.worker(worker.name)) <= EXPIRES_AFTER * 1000
        gate.set()
    assert await live_workers(app) == []  # at once, not after the expiry
    assert rclient.zscore(app.keys.workers(), worker.name) is None


async def test_a_worker_that_never_left_drops_out_when_its_entry_expires(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    killed, alive = entry("killed-1"), entry("alive-1")
    await app.store.registry.heartbeat_worker(killed, 0.3, {})  # its last heartbeat, short-lived
    await app.store.registry.heartbeat_worker(alive, 30, {})
    assert await names(app) == ["alive-1", "killed-1"]

    async def expired() -> bool:
        return await names(app) == ["alive-1"]

    await wait_until(expired, timeout=5, message="the killed worker's entry expired")
    # The index forgets names long past their expiry at the next heartbeat of any worker.
    rclient.zadd(app.keys.workers(), {"gone-long-ago": time.time() - SWEEP_AFTER - 1})
    await app.store.registry.heartbeat_worker(alive, 30, {})
    assert rclient.zscore(app.keys.workers(), "gone-long-ago") is None


async def test_a_heartbeat_is_on_the_server_clock_whatever_the_worker_says(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    # A worker whose clock is 10 minutes fast: it started 5 s ago and counted two runs
    # this minute, by its clock. Only durations count: the entry's times and the
    # counts' minute are the server's. (The store's own clock is right here; a whole
    # worker under libfaketime is test_worker_clocks.py.)
    app = make_app()
    fast = time.time() + 600
    info = dataclasses.replace(
        entry("fast-1"), started_at=datetime.fromtimestamp(fast - 5, UTC),
        last_heartbeat=datetime.fromtimestamp(fast, UTC),
    )  # fmt: skip
    counts = {minute_of(fast): {counter_name("done", "default", "normal"): 2}}
    assert await app.store.registry.heartbeat_worker(info, 30, counts) == {}
    (shown,) = await live_workers(app)
    server = float(rclient.time()[0])
    assert abs(shown.last_heartbeat.timestamp() - server) < 2
    assert abs(shown.started_at.timestamp() - (server - 5)) < 2
    assert (await activity(app, minutes=2)).of("default", "normal").totals.done == 2
    # The index is scored on the server's clock too: nobody is swept by this heartbeat.
    assert abs(float(rclient.zscore(app.keys.workers(), "fast-1") or 0) - (server + 30)) < 2


async def test_counts_whose_minute_was_guessed_wrong_are_placed_at_the_second_try(
    make_app: Callable[..., App],
) -> None:
    # The store's guess of the server's clock is 10 minutes off (a clock that jumped
    # since the last heartbeat): no candidate key is the minute, so the script leaves the
    # counts, and the store sends them again with the offset the reply showed.
    app = make_app()
    now = time.time()
    counts = {minute_of(now): {counter_name("done", "default", "normal"): 3}}
    app.store.registry._clock_offset = 600.0
    assert await app.store.registry.heartbeat_worker(entry("jumped-1"), 30, counts) == {}
    assert abs(app.store.registry._clock_offset) < 5
    assert (await activity(app, minutes=2)).of("default", "normal").totals.done == 3
    app.store.registry._clock_offset = -600.0
    left = await app.store.registry.remove_worker(
        "jumped-1", {minute_of(time.time()): {"done:normal:default": 1}}
    )
    assert left == {}
    assert (await activity(app, minutes=2)).of("default", "normal").totals.done == 4
    assert await live_workers(app) == []


async def test_an_entry_that_is_not_one_is_skipped(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    rclient.zadd(app.keys.workers(), {"odd": time.time() + 30})
    rclient.set(app.keys.worker("odd"), b"not json", px=30_000)
    await app.store.registry.heartbeat_worker(entry("fine"), 30, {})
    assert await names(app) == ["fine"]


def define_tasks(app: App) -> dict[str, int]:
    """Tasks that end done, retried then done, and retried then dead; returns how many
    runs of each kind enqueueing them all once makes."""

    @app.task
    def ok(n: int) -> None: ...

    @app.task(retries=1, backoff=0.01)
    def flaky() -> None:
        if current_job().attempt == 1:
            raise RetryableError("first try")

    @app.task(retries=1, backoff=0.01)
    def doomed() -> None:
        raise RetryableError("never works")

    for n in range(3):
        ok.enqueue(n)
    flaky.enqueue()
    doomed.enqueue()
    return {"done": 4, "retried": 2, "dead": 1}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_activity_counts_what_the_worker_ran(
    make_app: Callable[..., App], backend: str
) -> None:
    app = make_app(backend=backend)
    expected = define_tasks(app)
    worker = worker_for(app)
    await asyncio.wait_for(worker.run(burst=True), 10)
    # A clean stop sends the last counts: no wait for the next heartbeat.
    ran = {"done": worker.processed, "retried": worker.retried, "dead": worker.dead}
    assert ran == expected
    totals = (await activity(app, minutes=5)).of("default", "normal").totals
    assert {"done": totals.done, "retried": totals.retried, "dead": totals.dead} == ran
    assert totals.cancelled == 0
    # Five first attempts started, each after a short wait.
    assert sum(totals.waits.values()) == 5
    assert totals.wait_p50 is not None and 0 <= totals.wait_p50 < 10
    assert totals.done_per_second == pytest.approx(4 / totals.seconds)
    assert totals.failed_per_second == pytest.approx(1 / totals.seconds)
    for minutes in (0, 121):  # the counts of a minute are kept for 120
        with pytest.raises(ConfigError):
            await activity(app, minutes=minutes)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stats_shows_live_workers_only_and_what_ran(
    redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    app = App(redis_url=redis_url, namespace=namespace, backend=backend)  # type: ignore[arg-type]
    module = ModuleType(STATS_APP)
    module.app = app  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, STATS_APP, module)
    expected = define_tasks(app)

    async def work_and_register_others() -> None:
        try:
            # A worker ran and stopped cleanly (its stream consumer is left in the group).
            await asyncio.wait_for(worker_for(app).run(burst=True), 10)
            # Two workers on other hosts are live and serve the queue, one serves another.
            for name, queues in (("live-1", ("default",)), ("live-2", ("elsewhere",)),
                                 ("live-3", ("elsewhere", "default"))):  # fmt: skip
                await app.store.registry.heartbeat_worker(entry(name, queues), 30, {})
        finally:
            await app.aclose()

    try:
        asyncio.run(work_and_register_others())
        result = invoke("stats", f"{STATS_APP}:app", "--json")
        assert result.exit_code == 0, result.output
        shown = json.loads(result.stdout)
        level = "*" if backend == "sorted" else "normal"
        rows = {(row["queue"], row["level"]): row for row in shown["levels"]}
        row = rows[("default", level)]
        assert row["live_workers"] == 2
        assert {key: row[key] for key in ("done", "retried", "dead")} == expected
        if backend == "streams":
            assert row["consumers"] == 1  # the group remembers the stopped one
        assert shown["recent_minutes"] == 15
        assert sorted(info["name"] for info in shown["workers"]) == ["live-1", "live-2", "live-3"]

        table = invoke("stats", f"{STATS_APP}:app")
        assert table.exit_code == 0, table.output
        lines = table.stdout.splitlines()
        header = lines[1].split()
        cells = next(line.split() for line in lines if line.split()[:2] == ["default", level])
        by_header = dict(zip(header[:9], cells[:9], strict=True))
        assert (by_header["workers"], by_header["done"], by_header["retried"],
                by_header["dead"]) == ("2", "4", "2", "1")  # fmt: skip
    finally:
        app.close()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_run_that_never_settles_drops_out_of_the_heartbeat(
    make_app: Callable[..., App], backend: str
) -> None:
    """A run whose ending is dropped (an async task that raised CancelledError itself:
    abandoned, no claim to release, left pending) is no longer listed once its run ended."""
    app = make_app(backend=backend)
    gate, ran = asyncio.Event(), asyncio.Event()

    @app.task
    async def vanish() -> None:
        ran.set()
        await gate.wait()
        raise asyncio.CancelledError

    worker = worker_for(app, concurrency=2)
    async with running(worker):
        job = await vanish.enqueue_async()

        async def listed() -> tuple[str, ...] | None:
            found = await live_workers(app)
            return tuple(job_id for job_id, _ in found[0].jobs) if found else None

        await wait_until(lambda: ran.is_set())
        assert await wait_until(listed) == (job.job_id,)  # listed while it runs
        gate.set()

        async def none_listed() -> bool:
            return await listed() == ()

        await wait_until(none_listed, timeout=10, message="the heartbeat lists no run")
        assert (await app.job_async(job.job_id)).status == "running"  # left pending
