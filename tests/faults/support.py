"""Helpers of the fault-injection tests: a private redis-server, run records, leftovers.

The server is a ``redis-server`` child process of the test, on a free loopback port, in its
own directory, so a test may kill it, reconfigure it or fill its memory without touching
the shared server on 6379.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from conftest import WAIT_TIMEOUT, wait_until
from free_ports import free_port
from lockgate import App, LockgateError
from lockgate.backend.connections import forget_server
from lockgate.ops.inspect import queue_stats

START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0
POLL = 0.01

# Holds the server busy in one script for ARGV[1] ms (other clients get BUSY meanwhile).
BUSY_SCRIPT = """
local t = redis.call('TIME')
local start = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit = tonumber(ARGV[1]) * 1000
while true do
  local now = redis.call('TIME')
  if tonumber(now[1]) * 1000000 + tonumber(now[2]) - start > limit then break end
end
return 1
"""


def redis_server_binary() -> str:
    """The ``redis-server`` on PATH (a missing one fails the test, it is never skipped)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not on PATH; the fault tests need it")
    return binary


class PrivateRedis:
    """A ``redis-server`` of one test, on a free port, in its own directory.

    Args:
        directory: where the server keeps its log and any AOF or RDB file.
        options: ``redis.conf`` directives (underscores become dashes), applied after the
            defaults ``save ""`` and ``appendonly no``; a tuple gives a directive several
            arguments (``rename_command=("FCALL", "")``). ``requirepass`` also becomes
            the password of the test's own clients.

    Attributes:
        port: the TCP port (the same after a restart).
        url: ``redis://`` URL without credentials.
        client: a sync client for the test (inspection and fault injection), closed at
            teardown; it reconnects by itself after a restart.
    """

    def __init__(self, directory: Path, options: Mapping[str, object]) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.options: dict[str, list[str]] = {"save": [""], "appendonly": ["no"]}
        for name, value in options.items():
            values = value if isinstance(value, list | tuple) else [value]
            self.options[name.replace("_", "-")] = [str(v) for v in values]
        self.password = self.options.get("requirepass", [None])[0]
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._process: subprocess.Popen[bytes] | None = None
        self._clients: list[redis.Redis] = []
        self.client = self.connect()

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self.directory / "redis.log"

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def connect(self, **kwargs: Any) -> redis.Redis:
        """Another sync client of this server, closed at teardown.

        Keyword arguments go to :class:`redis.Redis`; by default one immediate retry on a
        dropped connection and a 10 s socket timeout.
        """
        kwargs.setdefault("socket_timeout", 10.0)
        kwargs.setdefault("socket_connect_timeout", 2.0)
        kwargs.setdefault("retry", Retry(NoBackoff(), 1))
        kwargs.setdefault("password", self.password)
        client = redis.Redis(host="127.0.0.1", port=self.port, **kwargs)
        self._clients.append(client)
        return client

    def command(self) -> list[str]:
        """The command line that starts the server."""
        args = [
            redis_server_binary(),
            "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory),
            "--logfile", str(self.log_path), "--daemonize", "no",
        ]  # fmt: skip
        for name, values in self.options.items():
            args += [f"--{name}", *values]
        return args

    def start(self) -> PrivateRedis:
        """Start the server and wait until it answers PING (an AOF is loaded by then).

        Raises:
            RuntimeError: it is already running, or it exited or did not answer in time.
        """
        if self.running:
            raise RuntimeError(f"the private server on port {self.port} is already running")
        # The port may have served a cluster node of an earlier test: ask its mode afresh.
        forget_server("127.0.0.1", self.port)
        self._process = subprocess.Popen(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + START_TIMEOUT
        while not self._answers():
            if self._process.poll() is not None:
                self._process.wait()
                raise RuntimeError(
                    f"redis-server exited with {self._process.returncode}:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"redis-server did not answer:\n{self.log_tail()}")
            time.sleep(POLL)
        return self

    def restart(self) -> PrivateRedis:
        """Start again on the same port and directory (after :meth:`kill` or :meth:`stop`)."""
        return self.start()

    def kill(self) -> None:
        """SIGKILL the server, as a crash would, and reap it."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGKILL)
        self._process.wait()

    def stop(self) -> None:
        """Stop the server cleanly (SIGTERM: an AOF is flushed); SIGKILL if it hangs."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()
        self._process.wait()

    def pause(self) -> None:
        """SIGSTOP the server: it keeps its sockets (connects still complete in the
        kernel's backlog) and answers nothing, as a hung node does."""
        assert self._process is not None and self._process.poll() is None
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a server that :meth:`pause` stopped."""
        assert self._process is not None
        self._process.send_signal(signal.SIGCONT)

    def close(self) -> None:
        """Kill the server (a test's server keeps nothing) and close every client."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGCONT)  # a paused server dies on SIGKILL too
        self.kill()
        for client in self._clients:
            client.close()
        self._clients.clear()

    def used_memory(self) -> int:
        """``used_memory`` from INFO, in bytes."""
        return int(self.client.info("memory")["used_memory"])

    def log_tail(self, lines: int = 30) -> str:
        """The end of the server's log (for failure messages)."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _answers(self) -> bool:
        probe = redis.Redis(
            host="127.0.0.1", port=self.port, password=self.password,
            socket_timeout=1.0, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0),
        )  # fmt: skip
        try:
            return bool(probe.ping())
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return False  # not listening yet, or LOADING its AOF (a ConnectionError)
        finally:
            probe.close()


def closed_port() -> int:
    """A loopback port nothing listens on (for ``REPLICAOF`` to a master that is not there)."""
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0
    return port


class Runs:
    """Which jobs ran, and how often: recorded in a file of the test's, so that a run in a
    forked child process (a redelivered job runs in one) counts too.

    Each record is one small append (atomic with O_APPEND), from any thread or process.
    """

    def __init__(self) -> None:
        fd, self._path = tempfile.mkstemp(prefix="lockgate-runs-")
        os.close(fd)
        weakref.finalize(self, _unlink, self._path)

    def record(self, job_id: str) -> None:
        with open(self._path, "a", encoding="utf-8") as out:
            out.write(job_id + "\n")

    def counts(self) -> dict[str, int]:
        """Job id -> runs so far."""
        with open(self._path, encoding="utf-8") as records:
            return dict(Counter(line.rstrip("\n") for line in records if line.endswith("\n")))

    def total(self) -> int:
        return sum(self.counts().values())

    def ran_all(self, job_ids: Iterable[str]) -> bool:
        """Whether each of these jobs ran at least once."""
        counts = self.counts()
        return all(counts.get(job_id) for job_id in job_ids)


class Gate:
    """An event that a run in a forked child sees too (a file that exists once set)."""

    def __init__(self) -> None:
        self._path = Path(tempfile.mkdtemp(prefix="lockgate-gate-")) / "open"
        weakref.finalize(self, shutil.rmtree, self._path.parent, True)

    def set(self) -> None:
        self._path.touch()

    def is_set(self) -> bool:
        return self._path.exists()

    async def wait(self) -> None:
        while not self._path.exists():
            await asyncio.sleep(0.005)


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def once(job_ids: Iterable[str]) -> dict[str, int]:
    """What :meth:`Runs.counts` must be when each of these jobs ran exactly once."""
    return dict.fromkeys(job_ids, 1)


async def leftovers(app: App, server: PrivateRedis) -> list[str]:
    """What the server still holds of the app's jobs; empty when everything was settled.

    Queued, pending and delayed jobs and dead letters as ``lockgate stats`` counts them,
    plus any stream entry still pending in a consumer group (whatever its key), so a job
    whose acknowledgement was dropped shows here. An error reading counts as something
    left (the server is not back yet).
    """
    found: list[str] = []
    try:
        stats = await queue_stats(app)
    except LockgateError as e:
        return [f"stats failed: {e}"]
    for row in stats.levels:
        if row.length or row.pending or row.delayed:
            found.append(
                f"{row.queue}/{row.level}: {row.length} queued, {row.pending} pending, "
                f"{row.delayed} delayed"
            )
    if stats.dead_letters:
        found.append(f"{stats.dead_letters} dead letters")
    try:
        found += await asyncio.to_thread(_pending_entries, server.client)
    except redis.RedisError as e:
        found.append(f"scan failed: {e}")
    return found


def _pending_entries(client: redis.Redis) -> list[str]:
    found = []
    for key in client.scan_iter(_type="stream", count=1000):
        pending = sum(int(group["pending"]) for group in client.xinfo_groups(key))
        if pending:
            found.append(f"{key.decode()}: {pending} pending")
    return found


def stopped(worker_task: asyncio.Task[None]) -> str:
    """How a worker's run() task ended, for a failure message."""
    if worker_task.cancelled():
        return "the worker was cancelled"
    error = worker_task.exception()
    if error is None:
        return "the worker returned (it stopped by itself)"
    return f"the worker crashed: {type(error).__name__}: {error}"


async def wait_serving(
    worker_task: asyncio.Task[None],
    predicate: Callable[[], Any],
    timeout: float = WAIT_TIMEOUT,
    message: str = "",
) -> Any:
    """Poll ``predicate`` (sync or async) until truthy, failing at once if the worker stops.

    Returns:
        The predicate's first truthy value.

    Raises:
        AssertionError: the worker's run() ended (a crash: it must stay up through every
            fault), or the predicate stayed falsy for ``timeout`` seconds.
    """

    def while_serving() -> Any:
        if worker_task.done():
            raise AssertionError(f"{stopped(worker_task)} (while waiting for: {message})")
        return predicate()

    return await wait_until(while_serving, timeout, message or str(predicate))


async def hold(worker_task: asyncio.Task[None], seconds: float, what: str) -> None:
    """Keep a fault in place for ``seconds``; fail at once if the worker stops meanwhile."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if worker_task.done():
            raise AssertionError(f"{stopped(worker_task)} (during {what})")
        await asyncio.sleep(0.02)
    if worker_task.done():
        raise AssertionError(f"{stopped(worker_task)} (during {what})")


async def settled(
    worker_task: asyncio.Task[None],
    app: App,
    server: PrivateRedis,
    runs: Runs,
    job_ids: Iterable[str],
    timeout: float = WAIT_TIMEOUT,
) -> None:
    """Wait until these jobs all ran and nothing is left queued, pending, delayed or dead.

    Once nothing is pending no entry can be redelivered, so the run counts are final.
    """
    job_ids = list(job_ids)
    last: list[str] = []

    async def done() -> bool:
        nonlocal last
        if not runs.ran_all(job_ids):
            last = [f"{len([j for j in job_ids if j in runs.counts()])}/{len(job_ids)} ran"]
            return False
        last = await leftovers(app, server)
        return not last

    try:
        await wait_serving(worker_task, done, timeout, "every job run and settled")
    except AssertionError as e:
        raise AssertionError(f"{e}; last seen: {last}; runs: {runs.counts()}") from None


def env_without_lockgate(extra: Mapping[str, str]) -> dict[str, str]:
    """The environment for a CLI subprocess: no inherited ``LOCKGATE_*``, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env.update(extra)
    return env
