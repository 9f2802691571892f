"""Shared fixtures: one real Redis for the session, a fresh namespace per test.

Redis is the one at 127.0.0.1:6379 when it answers PING, else a private embedded server
started for the session. No Redis at all fails the run: nothing here skips. Tests never
flush; each gets its own ``uuid4().hex`` namespace (the keys' hash tag) and its keys are
deleted at teardown, so tests can share a server and run in parallel.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import redis
from redis.connection import parse_url

from lockgate import App, Worker, WorkerConfig
from lockgate.backend.keys import GROUP, Keys, status_shard
from lockgate.backend.lua import SyncScripts
from lockgate.backend.partitions import Layout
from lockgate.integrations.embedded import EmbeddedServer

SHARED_REDIS_URL = "redis://127.0.0.1:6379/0"
CLUSTER_ENV = "LOCKGATE_TEST_CLUSTER"
# Loose bounds against hangs, never timing goals.
WAIT_TIMEOUT = 30.0
POLL_INTERVAL = 0.005


async def wait_until(
    predicate: Callable[[], Any],
    timeout: float = WAIT_TIMEOUT,
    message: str = "",
) -> Any:
    """Poll ``predicate`` (sync, or returning an awaitable) until it is truthy.

    Returns:
        The predicate's first truthy value.

    Raises:
        AssertionError: it stayed falsy for ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {message or predicate}")
        await asyncio.sleep(POLL_INTERVAL)


def wait_until_sync(
    predicate: Callable[[], Any],
    timeout: float = WAIT_TIMEOUT,
    message: str = "",
) -> Any:
    """Blocking :func:`wait_until`, for sync tests and subprocess supervision."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {message or predicate}")
        time.sleep(POLL_INTERVAL)


def _answers(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2)
    try:
        return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False
    finally:
        client.close()


def inspection_client(url: str) -> Any:
    """A sync client for what a test reads or writes by hand: a cluster client when the
    URL lists several seeds (the cluster run), else a plain one."""
    scheme, _, rest = url.partition("://")
    hosts = rest.partition("/")[0]
    if "," in hosts:
        # From host and port, not RedisCluster.from_url: a URL-made cluster client gives
        # each node's client a pool it does not own (Redis(connection_pool=...)), so its
        # close() leaves their sockets open for the garbage collector to close, which
        # may finalise a socket before its connection: ResourceWarning, an error here.
        options = parse_url(f"{scheme}://{hosts.split(',')[0]}")
        return redis.RedisCluster(**options)
    return redis.Redis.from_url(url)


def _utf8(text: str) -> str:
    """``text`` with any lone surrogate escaped (``\\udcff``): a log line may hold one (a
    file name read with surrogateescape), and pytest-xdist cannot send such a string from a
    worker, which stops the whole run."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Make every report sendable by pytest-xdist (``make test`` runs tests in parallel):
    its captured output and its failure text escape lone surrogates."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    report.sections = [(title, _utf8(text)) for title, text in report.sections]
    if report.longrepr is not None:
        text = str(report.longrepr)
        if _utf8(text) != text:
            report.longrepr = _utf8(text)


@pytest.fixture(scope="session", autouse=True)
def close_apps_at_the_end() -> Iterator[None]:
    """Close the sync clients of Apps still alive when the session ends (module-level
    ones, such as the CLI tests' app): a cluster client's node sockets are not closed by
    the garbage collector without a ResourceWarning."""
    yield
    from lockgate.api.app import _APPS

    for app in list(_APPS):
        app.close()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of the session's Redis: with ``LOCKGATE_TEST_CLUSTER=1`` the seeds of a local
    Redis Cluster started for the session (``make test-cluster``), else the shared local
    server, else a private embedded one."""
    if os.environ.get(CLUSTER_ENV) == "1":
        from clusters import LocalCluster

        with LocalCluster(primaries=3, replicas=1) as cluster:
            yield cluster.seeds
        return
    if _answers(SHARED_REDIS_URL):
        yield SHARED_REDIS_URL
        return
    # Raises (and so fails every test that needs Redis) when no server can be had.
    with EmbeddedServer() as server:
        yield server.url


@pytest.fixture
def namespace(redis_url: str) -> Iterator[str]:
    """A fresh namespace; its keys are deleted at teardown (never a flush)."""
    ns = uuid.uuid4().hex
    yield ns
    delete_namespace(redis_url, ns)


def delete_namespace(url: str, ns: str) -> None:
    """Delete every key of one namespace on the server at ``url``."""
    client = inspection_client(url)
    try:
        keys = [
            key
            for pattern in Layout(ns, 2).patterns  # its own tag's and any partition's
            for key in client.scan_iter(match=pattern, count=10000)
        ]
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
    finally:
        client.close()


@pytest.fixture
def keys(namespace: str) -> Keys:
    """The test namespace's key names (for calling scripts directly)."""
    return Keys(namespace)


@pytest.fixture
def scripts(rclient: redis.Redis) -> SyncScripts:
    """lockgate's scripts on a sync client (for calling them directly)."""
    return SyncScripts(rclient)


@pytest.fixture
def rclient(redis_url: str) -> Iterator[redis.Redis]:
    """A sync Redis client for inspecting what the library wrote."""
    client = inspection_client(redis_url)
    yield client
    client.close()


@pytest.fixture
async def make_app(redis_url: str, namespace: str) -> AsyncIterator[Callable[..., App]]:
    """Factory of Apps on the session's Redis and the test's namespace, closed at teardown.

    Keyword arguments go to :class:`App`; ``redis_url`` and ``namespace`` may be overridden.
    """
    apps: list[App] = []

    def factory(**kwargs: Any) -> App:
        kwargs.setdefault("redis_url", redis_url)
        kwargs.setdefault("namespace", namespace)
        app = App(**kwargs)
        apps.append(app)
        return app

    yield factory
    for app in apps:
        await app.aclose()
        app.close()


async def finish(worker: Worker, task: asyncio.Task[None], timeout: float = WAIT_TIMEOUT) -> None:
    """Await a worker's run() task that was asked to stop; fail if it does not end in time.

    A worker that hangs is cancelled and its connection closed (best effort), so the
    failure stays in this test instead of leaking unclosed sockets into later ones.
    """
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        await asyncio.wait({task}, timeout=5)
        consumer = worker._consumer  # cleanup after a hang only
        if consumer is not None:
            await consumer.close()
        raise AssertionError(f"the worker did not stop within {timeout}s of request_stop()")
    task.result()


@contextlib.asynccontextmanager
async def running(
    worker: Worker, *, stop_timeout: float = WAIT_TIMEOUT, **run_kwargs: Any
) -> AsyncIterator[asyncio.Task[None]]:
    """Run a worker in the background for the block; stop it and await it on the way out.

    A worker that crashed makes the block fail with its exception.
    """
    task = asyncio.create_task(worker.run(**run_kwargs))
    try:
        yield task
    finally:
        worker.request_stop()
        await finish(worker, task, stop_timeout)


def job_ended(client: Any, keys: Keys, job_id: str) -> bool:
    """Whether a job's id is free: its marker is gone (see ``lua/_marker.lua``)."""
    return not client.exists(keys.job(job_id))


def kept_status(client: Any, keys: Keys, job_id: str) -> bytes | None:
    """A job's final record as the scripts keep it (``lua/_status.lua``), read the way
    they read it: the newest live window's hash of its shard; None when none is kept."""
    seconds, micros = client.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    starts = client.zrangebyscore(keys.statuses(), f"({now_ms}", "+inf")
    for start in sorted((int(s) for s in starts), reverse=True):
        record = client.hget(f"{keys.statuses()}:{start}:{status_shard(job_id)}", job_id)
        if record is not None:
            return bytes(record)
    return None


# ARGV quiet ms, gap ms of the scripts that take jobs from other workers (_liveness.lua).
LIVENESS_ARGS = [30_000, 10_000]


def serving_forever(client: Any, keys: Keys) -> str:
    """Write ``keys``' liveness set as if workers had beaten without a gap forever, none
    of them named: every worker counts as dead once its job is idle long enough (what
    the scripts that take jobs from others decided before liveness). Its key."""
    client.zadd(keys.liveness(), {"~pulse": 10**13, "~since": 0})
    return keys.liveness()


def unacked_reads(
    rclient: redis.Redis, stream: str, consumer: str = "ghost", count: int = 1
) -> list[bytes]:
    """A consumer reads ``count`` new entries with XREADGROUP (the group made at id 0 if
    missing, as a worker's read does) and never acknowledges them, as a worker killed
    mid-job would: they stay pending for it. Returns their entry ids."""
    try:
        rclient.xgroup_create(stream, GROUP, id="0", mkstream=True)
    except redis.ResponseError as e:
        if "BUSYGROUP" not in str(e):
            raise
    ((_, entries),) = rclient.xreadgroup(GROUP, consumer, {stream: ">"}, count=count)
    assert len(entries) == count
    return [bytes(entry_id) for entry_id, _ in entries]


def worker_for(app: App, **config: Any) -> Worker:
    """A worker with a short idle wait (the wake-up path is tested on its own)."""
    config.setdefault("idle_wait", 1.0)
    config.setdefault("grace_period", 10.0)
    return Worker(app, WorkerConfig(**config))


async def drain(app: App, **config: Any) -> None:
    """Run a burst worker until nothing is queued, delayed or running (a loose bound
    against hangs): whatever would still run has run then."""
    await asyncio.wait_for(worker_for(app, **config).run(burst=True), WAIT_TIMEOUT)


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most spans (start, end) open at one moment (a ledger's concurrency)."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = now = 0
    for _, step in edges:  # an end at the very moment of a start closes first (-1 < 1)
        now += step
        most = max(most, now)
    return most
