"""Issue 27: ``lockgate worker --wait``: a worker started before Redis waits for it.

The worker runs as the real command, in a subprocess, on ``cli_app`` against a private
redis-server (tests/faults/support.py) that the test starts late, stops and starts again.
Its log goes to a file the test reads while it runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from cli_runs import cli_app_module

from conftest import wait_until_sync
from faults.support import PrivateRedis, env_without_lockgate

HERE = Path(__file__).parent
EXIT_TIMEOUT = 60.0  # loose: a bound against hangs
SECRET = "s3cret-Pa55"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A private redis-server with a password, not started yet."""
    private = PrivateRedis(tmp_path / "redis", {"requirepass": SECRET})
    yield private
    private.close()


@pytest.fixture
def cli(server: PrivateRedis, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    with cli_app_module(secret_url(server), uuid.uuid4().hex, monkeypatch) as module:
        yield module


def secret_url(server: PrivateRedis) -> str:
    return f"redis://:{SECRET}@127.0.0.1:{server.port}/0"


def start_worker(url: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """``lockgate worker cli_app:app --url URL ARGS``, its output into ``log``."""
    env = env_without_lockgate({"LOCKGATE_TEST_NAMESPACE": os.environ["LOCKGATE_TEST_NAMESPACE"]})
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "lockgate", "worker", "cli_app:app", "--url", url, *args],
            cwd=HERE, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def stop(worker: subprocess.Popen[bytes]) -> int:
    worker.send_signal(signal.SIGTERM)
    return worker.wait(EXIT_TIMEOUT)


def test_a_worker_started_before_redis_waits_for_it_then_runs_jobs(
    cli: ModuleType, server: PrivateRedis, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    worker = start_worker(secret_url(server), log, "--wait", "60")
    try:
        wait_until_sync(lambda: "waiting up to 60 s" in log.read_text(), EXIT_TIMEOUT)
        assert worker.poll() is None, log.read_text()
        server.start()
        cli.later.enqueue(5)
        wait_until_sync(lambda: server.client.lrange(cli.record_key("later"), 0, -1) == [b"5"])
    finally:
        assert stop(worker) == 0, log.read_text()
    text = log.read_text()
    waits = [line for line in text.splitlines() if "waiting up to" in line]
    assert len(waits) == 1, text  # said once, however many tries
    assert f"cannot connect to Redis at redis://:***@127.0.0.1:{server.port}/0" in waits[0]
    assert SECRET not in text
    assert "Redis answers after" in text
    assert "Traceback" not in text


def test_a_worker_that_waits_in_vain_exits_2_with_one_line(
    cli: ModuleType, server: PrivateRedis, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    worker = start_worker(secret_url(server), log, "--wait", "1", "--log-level", "ERROR")
    assert worker.wait(EXIT_TIMEOUT) == 2
    lines = log.read_text().strip().splitlines()
    assert len(lines) == 1, lines
    masked = f"redis://:***@127.0.0.1:{server.port}/0"
    assert lines[0].startswith(f"error: cannot connect to Redis at {masked}: "), lines
    assert lines[0].endswith("(waited 1 s)"), lines


def test_a_running_worker_logs_when_redis_is_back_after_an_outage(
    cli: ModuleType, server: PrivateRedis, tmp_path: Path
) -> None:
    server.start()
    log = tmp_path / "worker.log"
    worker = start_worker(secret_url(server), log)
    try:
        wait_until_sync(lambda: "serving queues" in log.read_text(), EXIT_TIMEOUT)
        server.kill()
        wait_until_sync(lambda: "liveness beat failed" in log.read_text(), EXIT_TIMEOUT)
        server.restart()
        wait_until_sync(lambda: "Redis is back after" in log.read_text(), EXIT_TIMEOUT)
        cli.later.enqueue(6)  # and it serves again
        wait_until_sync(lambda: server.client.lrange(cli.record_key("later"), 0, -1) == [b"6"])
    finally:
        assert stop(worker) == 0, log.read_text()
