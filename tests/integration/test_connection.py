"""Connecting to Redis: a port that is not Redis, Unix sockets, secrets, the pool, warnings.

Servers here are private ``redis-server`` processes on a Unix socket in a temporary
directory (never the shared server), so a test may set a password, an eviction policy or
an ACL user, and count the server's clients, without disturbing anyone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from cli_runs import cli_app_in, invoke, one_error_line, title

from conftest import wait_until_sync
from lockgate import App, Worker, WorkerConfig
from lockgate.backend.connections import (
    HANDSHAKE_TIMEOUT,
    async_client,
    connect_worker_client,
    server_warnings,
    sync_client,
)
from lockgate.backend.faults import translated
from lockgate.errors import ConnectionFailed, LockgateError

SECRET = "s3cret-pw"
# Loose: the handshake timeout plus room for a loaded machine; never a timing goal.
FAIL_WITHIN = 15.0
SPEC = "cli_app:app"


@dataclass
class PrivateRedis:
    """A private redis-server listening on a Unix socket only."""

    socket: Path
    process: subprocess.Popen[bytes]

    def url(self, userinfo: str = "", query: str = "db=0") -> str:
        """A ``unix://`` URL of the server (``userinfo`` like ``user:pw@`` or ``:pw@``)."""
        return f"unix://{userinfo}{self.socket}?{query}"

    def admin(self, password: str | None = None) -> redis.Redis:
        """A plain redis-py client for setting up and inspecting the server."""
        return redis.Redis(unix_socket_path=str(self.socket), password=password)


@pytest.fixture
def private_redis() -> Iterator[Callable[..., PrivateRedis]]:
    """Factory: start a private redis-server with extra arguments; all stopped at teardown."""
    started: list[tuple[PrivateRedis, str]] = []

    def start(*args: str, password: str | None = None) -> PrivateRedis:
        # A short directory: a Unix socket path must fit in about 100 bytes.
        directory = tempfile.mkdtemp(prefix="lg-", dir="/tmp")
        path = Path(directory) / "r.sock"
        command = ["redis-server", "--port", "0", "--unixsocket", str(path),
                   "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
                   "--dir", directory, *args]  # fmt: skip
        if password is not None:
            command += ["--requirepass", password]
        with open(Path(directory) / "redis.log", "wb") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        server = PrivateRedis(path, process)
        started.append((server, directory))

        def answers() -> bool:
            assert process.poll() is None, (Path(directory) / "redis.log").read_text()
            admin = server.admin(password)
            try:
                return bool(admin.ping())
            except (redis.ConnectionError, OSError):
                return False
            finally:
                admin.close()

        wait_until_sync(answers, message="private redis-server did not start")
        return server

    yield start
    for server, directory in started:
        server.process.terminate()
        try:
            server.process.wait(10)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait(10)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback TCP port that accepts connections and never sends a byte.

    The kernel completes the handshake of up to ``backlog`` connections nobody accepts, so
    a client sees an open port that never answers: what a non-Redis service looks like
    to a client waiting for a reply.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield int(listener.getsockname()[1])


@pytest.fixture
async def http_port() -> AsyncIterator[int]:
    """A loopback TCP port whose server answers anything with an HTTP error line."""
    writers: list[asyncio.StreamWriter] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await reader.read(1024)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    yield int(server.sockets[0].getsockname()[1])
    server.close()
    for writer in writers:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    await server.wait_closed()


@pytest.fixture
def cli_app(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``cli_app`` importable afresh for a CLI call, in a fresh namespace."""
    with cli_app_in(uuid.uuid4().hex, monkeypatch):
        yield


# --- a port that is not Redis -------------------------------------------------------------


async def test_worker_client_on_a_silent_port_fails_with_the_reason(silent_port: int) -> None:
    url = f"redis://:{SECRET}@127.0.0.1:{silent_port}/0?password={SECRET}"
    started = time.monotonic()
    with pytest.raises(ConnectionFailed) as info:
        await connect_worker_client(url, max_connections=4)
    elapsed = time.monotonic() - started
    assert elapsed < FAIL_WITHIN
    assert elapsed >= HANDSHAKE_TIMEOUT * 0.9  # it waited for a reply, then gave up
    assert "no Redis reply within" in info.value.reason
    assert "is this a Redis server?" in info.value.reason
    assert SECRET not in str(info.value)
    assert info.value.url == f"redis://:***@127.0.0.1:{silent_port}/0?password=***"


async def test_worker_client_on_a_server_that_is_not_redis(http_port: int) -> None:
    with pytest.raises(ConnectionFailed) as info:
        await connect_worker_client(f"redis://127.0.0.1:{http_port}/0", max_connections=4)
    assert info.value.reason.startswith("not a Redis reply")
    assert info.value.reason.endswith("is this a Redis server?")


async def test_worker_client_on_a_closed_port_fails_at_once() -> None:
    with socket.socket() as probe:  # a port nothing listens on (bound, never listening)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(ConnectionFailed) as info:
            await connect_worker_client(f"redis://127.0.0.1:{port}/0", max_connections=4)
    assert time.monotonic() - started < FAIL_WITHIN
    assert f"127.0.0.1:{port}" in str(info.value)


@pytest.mark.parametrize("cluster", [None, False])
def test_sync_client_on_a_silent_port_times_out(silent_port: int, cluster: bool | None) -> None:
    """Whether the client's probe (is it a cluster node?) or its first command meets the
    silence, the caller gets ConnectionFailed in bounded time, the password masked."""
    url = f"redis://127.0.0.1:{silent_port}/0?password={SECRET}"
    started = time.monotonic()
    with pytest.raises(ConnectionFailed) as info, translated(url):
        client = sync_client(url, cluster=cluster)
        try:
            client.ping()
        finally:
            client.close()
    assert time.monotonic() - started < FAIL_WITHIN
    assert SECRET not in str(info.value)


def test_stats_on_a_silent_port_is_one_line_and_exit_2(silent_port: int, cli_app: None) -> None:
    url = f"redis://127.0.0.1:{silent_port}/0?password={SECRET}"
    started = time.monotonic()
    result = invoke("stats", SPEC, "--url", url)
    assert time.monotonic() - started < FAIL_WITHIN
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert f"127.0.0.1:{silent_port}" in line
    assert SECRET not in result.output


# --- Unix sockets -------------------------------------------------------------------------


async def test_enqueue_worker_and_stats_over_a_unix_socket(
    private_redis: Callable[..., PrivateRedis], cli_app: None
) -> None:
    server = private_redis()
    app = App(redis_url=server.url(), namespace=os.environ["LOCKGATE_TEST_NAMESPACE"])
    ran: list[int] = []

    @app.task
    async def job(n: int) -> None:
        ran.append(n)

    try:
        assert job.enqueue(1).created  # the sync client
        assert (await job.enqueue_async(2)).created  # the async client
        worker_client = await connect_worker_client(server.url(), max_connections=4)
        try:
            assert await worker_client.ping()
        finally:
            await worker_client.aclose()
        # The worker builds its own client from the app's URL.
        worker = Worker(app, WorkerConfig(concurrency=2, idle_wait=1.0))
        await asyncio.wait_for(worker.run(burst=True), 60)
        assert sorted(ran) == [1, 2]
        job.enqueue(3)
    finally:
        await app.aclose()
        app.close()

    result = await asyncio.to_thread(invoke, "stats", SPEC, "--url", server.url(), "--json")
    assert result.exit_code == 0, result.output
    assert '"waiting": 1' in result.stdout


def test_stats_title_masks_a_password_in_the_query(
    private_redis: Callable[..., PrivateRedis], cli_app: None
) -> None:
    server = private_redis(password=SECRET)
    result = invoke("stats", SPEC, "--url", server.url(query=f"db=0&password={SECRET}"))
    assert result.exit_code == 0, result.output
    assert f"@ unix://{server.socket}?db=0&password=***" in title(result)
    assert SECRET not in result.output

    userinfo = invoke("stats", SPEC, "--url", server.url(userinfo=f":{SECRET}@"))
    assert userinfo.exit_code == 0, userinfo.output
    assert f"@ unix://:***@{server.socket}?db=0" in title(userinfo)
    assert SECRET not in userinfo.output


async def test_a_wrong_password_is_reported_masked(
    private_redis: Callable[..., PrivateRedis],
) -> None:
    server = private_redis(password=SECRET)
    url = server.url(query=f"db=0&password=not-{SECRET}")
    with pytest.raises(LockgateError) as info:
        await connect_worker_client(url, max_connections=4)
    assert SECRET not in str(info.value)
    assert "password=***" in str(info.value)


def test_demo_on_an_external_server_hides_the_password_and_says_where(
    private_redis: Callable[..., PrivateRedis],
) -> None:
    server = private_redis(password=SECRET)
    url = server.url(userinfo=f":{SECRET}@")
    env = dict(os.environ, LOCKGATE_REDIS_URL=url, COLUMNS="200")
    done = subprocess.run(
        [sys.executable, "-m", "lockgate", "demo"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    assert first == f"lockgate demo on unix://:***@{server.socket}?db=0", first
    assert "embedded" not in done.stdout
    assert done.stdout.count("5000") >= 3  # the runs finished on that server


# --- server warnings ----------------------------------------------------------------------


async def test_an_evicting_policy_is_warned_about(
    private_redis: Callable[..., PrivateRedis],
) -> None:
    server = private_redis("--maxmemory-policy", "allkeys-lru")
    client = async_client(server.url())
    try:
        (warning,) = await server_warnings(client)
    finally:
        await client.aclose()
    assert "allkeys-lru" in warning
    assert "noeviction" in warning


async def test_noeviction_gives_no_warning(private_redis: Callable[..., PrivateRedis]) -> None:
    server = private_redis("--maxmemory-policy", "noeviction")
    client = async_client(server.url())
    try:
        assert await server_warnings(client) == []
    finally:
        await client.aclose()


async def test_a_refused_config_get_gives_no_warning_and_no_error(
    private_redis: Callable[..., PrivateRedis],
) -> None:
    server = private_redis("--maxmemory-policy", "allkeys-lru")
    admin = server.admin()
    try:
        # As on managed Redis: the worker's user may not run CONFIG.
        admin.acl_setuser("worker", enabled=True, passwords=["+pw"], keys=["*"],
                          channels=["*"], commands=["+@all", "-config"])  # fmt: skip
    finally:
        admin.close()
    client = async_client(server.url(userinfo="worker:pw@"))
    try:
        assert await client.ping()
        with pytest.raises(redis.exceptions.NoPermissionError):
            await client.config_get("maxmemory-policy")
        assert await server_warnings(client) == []
    finally:
        await client.aclose()


# --- the pool -----------------------------------------------------------------------------


@pytest.mark.parametrize("factory", ["async_client", "connect_worker_client"])
async def test_a_busy_pool_makes_callers_wait_instead_of_failing(
    private_redis: Callable[..., PrivateRedis], factory: str
) -> None:
    server = private_redis()
    if factory == "async_client":
        client = async_client(server.url(), max_connections=4)
    else:
        client = await connect_worker_client(server.url(), max_connections=4)
    admin = server.admin()
    try:
        replies = await asyncio.gather(*(client.ping() for _ in range(200)))
        assert replies == [True] * 200
        clients = admin.info("clients")["connected_clients"]
        assert 1 < clients <= 4 + 1  # the pool's connections, and this admin client
    finally:
        admin.close()
        await client.aclose()


def test_many_threads_claiming_at_once_wait_for_a_connection_instead_of_failing(
    make_app: Callable[..., App],
) -> None:
    """Defect 19: more threads than redis-py's default pool of 100, each holding a
    connection for a moment, all get one (a blocking pool), none fails."""
    app = make_app()
    barrier = threading.Barrier(150)
    errors: list[BaseException] = []

    def claim(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            with app.idempotent(f"pool:{n}"):
                pass
        except BaseException as e:  # collected: the assertion below names it
            errors.append(e)

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(150)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    marked = [
        app.client().zscore(*app.keys.done_marker(app.keys.claim(f"pool:{n}"))) for n in range(150)
    ]
    assert all(marked)  # every claim was marked done


def test_the_url_may_change_after_asyncio_run_finished_its_loop(redis_url: str) -> None:
    """The CLI's --url on an app that enqueued from a finished ``asyncio.run`` earlier."""
    app = App(redis_url="redis://127.0.0.1:1/0", namespace=f"retarget-{uuid.uuid4().hex}")
    app.redis_url = redis_url
    task = app.task(name="noop")(lambda: None)
    loop = asyncio.new_event_loop()  # as asyncio.run, its client closed by hand after
    try:
        assert loop.run_until_complete(task.enqueue_async()).created
        client, _ = app.store._async[loop]
        loop.run_until_complete(client.aclose())
    finally:
        loop.close()
    app.redis_url = redis_url  # the finished loop's client is not in the way
    assert task.enqueue().created
    app.close()
