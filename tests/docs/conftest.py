"""Fixtures of the docs tests: a private Redis server, and how a docs script is run.

The server is a ``redis-server`` (else a ``valkey-server``) from PATH, started once for
the session on a free port in a temporary directory, and flushed before each test that
uses it: pages may use any namespace, and the shared Redis on 127.0.0.1:6379 is never
touched. No server binary fails the tests; nothing here skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from free_ports import free_port

ROOT = Path(__file__).resolve().parents[2]
DATABASE_URL = "postgresql://127.0.0.1:5432/test"
SHARED_PORT = 6379
START_TIMEOUT = 10.0
RUN_TIMEOUT = 60.0  # per script; each is meant to take seconds


def _start(binary: str, directory: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Start a server on a free port; a port taken in between is retried."""
    for _ in range(3):
        port = free_port()
        if port == SHARED_PORT:
            continue
        argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
                "--save", "", "--appendonly", "no", "--daemonize", "no",
                "--logfile", str(directory / "server.log")]  # fmt: skip
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)
        deadline = time.monotonic() + START_TIMEOUT
        try:
            while process.poll() is None and time.monotonic() < deadline:
                try:
                    if client.ping():
                        return process, port
                except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                    time.sleep(0.01)
        finally:
            client.close()
        _stop(process)
    raise RuntimeError(f"{binary} did not start; see {directory / 'server.log'}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def docs_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of the docs tests' private server."""
    binary = shutil.which("redis-server") or shutil.which("valkey-server")
    if binary is None:
        pytest.fail("the docs tests need redis-server (or valkey-server) on PATH")
    process, port = _start(binary, tmp_path_factory.mktemp("docs-redis"))
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        _stop(process)


@dataclass(frozen=True)
class DocsRun:
    """How a docs script runs: the interpreter, the repository root, the environment."""

    redis_url: str
    env: dict[str, str]

    def run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        """Run ``python ARGV...`` from the repository root; fail the test on a hang."""
        try:
            return subprocess.run(
                [sys.executable, *argv],
                cwd=ROOT,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
            err = e.stderr.decode() if isinstance(e.stderr, bytes) else e.stderr or ""
            pytest.fail(f"python {' '.join(argv)} ran over {RUN_TIMEOUT}s\n{out}\n{err}")


@pytest.fixture
def docs_run(docs_redis_url: str) -> DocsRun:
    """A flushed private server and the environment docs scripts run in."""
    client = redis.Redis.from_url(docs_redis_url)
    try:
        client.flushall()  # the private server only
    finally:
        client.close()
    env = dict(os.environ)
    env["LOCKGATE_REDIS_URL"] = docs_redis_url
    env["DATABASE_URL"] = DATABASE_URL
    # The script may live in a temporary directory: `import examples...` still works.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return DocsRun(docs_redis_url, env)
