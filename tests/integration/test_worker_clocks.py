"""Workers whose clocks are wrong, beside a right one: monitoring runs on the server's
clock (issue 22 item 8). Three real worker processes, one under libfaketime 10 minutes
slow, one 10 minutes fast (the preload ``faketime -f`` sets: the worker's ``time.time()``
is shifted, checked below from a job it runs), each run jobs; the
registry lists all three all the time, and the 15-minute activity counts include every
finished job. Needs the ``faketime`` package (``make faketime``); missing, it fails."""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import redis

from conftest import wait_until
from lockgate.ops.inspect import live_workers, stats_report
from lockgate.worker.registry import HEARTBEAT_EVERY

HERE = Path(__file__).parent
SKEWS = {"slow": "-10m", "right": None, "fast": "+10m"}
OFFSETS = {"slow": -600.0, "right": 0.0, "fast": 600.0}
OFFSET_SLACK = 60.0  # loose: the record's latency, not the skew's precision
WORK_JOBS = 30
RUN_TIMEOUT = 60  # loose: a bound against hangs


@pytest.fixture
async def clock_app(
    redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[ModuleType]:
    """``clock_app`` imported for this test's Redis and namespace (to enqueue, inspect)."""
    monkeypatch.setenv("LOCKGATE_REDIS_URL", redis_url)
    monkeypatch.setenv("LOCKGATE_TEST_NAMESPACE", namespace)
    sys.modules.pop("clock_app", None)
    module = importlib.import_module("clock_app")
    yield module
    await module.app.aclose()
    module.app.close()
    sys.modules.pop("clock_app", None)


def faked(skew: str) -> dict[str, str]:
    """The variables the ``faketime`` wrapper sets to shift a command's clock by ``skew``
    (``LD_PRELOAD`` of libfaketime and ``FAKETIME``), set on the worker itself instead, so
    the worker is the test's own child (its pid is the one it records and registers)."""
    shown = subprocess.run(["faketime", "-f", skew, "env"], capture_output=True, check=True)
    found = dict(line.split("=", 1) for line in shown.stdout.decode().splitlines() if "=" in line)
    return {name: found[name] for name in ("LD_PRELOAD", "FAKETIME")}


WORKER = [sys.executable, "-m", "lockgate", "worker", "clock_app:app", "--concurrency", "1"]


@contextlib.contextmanager
def workers(env: dict[str, str], logs: Path) -> Iterator[dict[int, str]]:
    """The three worker processes, one per skew: pid -> its skew's name. Each must stop
    cleanly at SIGTERM, with no traceback in its log."""
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, skew in SKEWS.items():
            with (logs / f"{name}.log").open("wb") as out:
                procs[name] = subprocess.Popen(
                    WORKER, cwd=HERE, env=env if skew is None else {**env, **faked(skew)},
                    stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                )  # fmt: skip
        yield {proc.pid: name for name, proc in procs.items()}
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for name, proc in procs.items():
            assert proc.wait(RUN_TIMEOUT) == 0, (logs / f"{name}.log").read_text()
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    for name in SKEWS:
        text = (logs / f"{name}.log").read_text()
        assert "Traceback" not in text, text


async def clocks(rclient: redis.Redis, key: str, by_pid: dict[int, str]) -> dict[str, float]:
    """Each worker's clock less this host's (s), from the held job each ran."""

    def all_started() -> list[bytes] | None:
        found = rclient.lrange(key, 0, -1)
        return found if len(found) == len(SKEWS) else None

    records = await wait_until(all_started, timeout=RUN_TIMEOUT, message="held jobs started")
    now = time.time()
    offsets = {}
    for record in records:
        pid, at = record.decode().split()
        offsets[by_pid[int(pid)]] = float(at) - now
    return offsets


async def test_workers_with_wrong_clocks_are_listed_and_counted_on_the_server_clock(
    clock_app: ModuleType, redis_url: str, namespace: str, rclient: redis.Redis, tmp_path: Path
) -> None:
    assert shutil.which("faketime"), "libfaketime's faketime is missing: make faketime"
    app = clock_app.app
    env = dict(os.environ, LOCKGATE_REDIS_URL=redis_url, LOCKGATE_TEST_NAMESPACE=namespace)
    finished = len(SKEWS) + WORK_JOBS
    with workers(env, tmp_path) as by_pid:
        # One held job in each (one at a time each): each reports its own clock.
        for _ in SKEWS:
            await clock_app.hold.enqueue_async()
        offsets = await clocks(rclient, clock_app.record_key("started"), by_pid)
        for name, offset in OFFSETS.items():  # libfaketime shifts time.time() in the worker
            assert abs(offsets[name] - offset) < OFFSET_SLACK, offsets

        async def all_listed() -> bool:
            workers = (await stats_report(app)).workers
            return sorted(info.pid for info in workers) == sorted(by_pid)

        await wait_until(all_listed, timeout=RUN_TIMEOUT, message="all three workers listed")
        # And they stay listed, whatever the order of their heartbeats.
        until = time.monotonic() + 3 * HEARTBEAT_EVERY
        while time.monotonic() < until:
            report = await stats_report(app)
            assert sorted(info.pid for info in report.workers) == sorted(by_pid), report.workers
        for info in report.workers:  # shown on the server's clock, not the worker's
            now = time.time()
            assert abs(info.last_heartbeat.timestamp() - now) < OFFSET_SLACK, info
            assert abs(info.started_at.timestamp() - now) < OFFSET_SLACK, info

        rclient.set(clock_app.record_key("gate"), 1)
        for _ in range(WORK_JOBS):
            await clock_app.work.enqueue_async()
        runs = clock_app.record_key("runs")
        await wait_until(
            lambda: sum(int(v) for v in rclient.hvals(runs)) == WORK_JOBS,
            timeout=RUN_TIMEOUT, message="the work jobs ran",
        )  # fmt: skip

        async def all_counted() -> bool:
            report = await stats_report(app)
            return report.activity.of("default", "normal").totals.done == finished

        await wait_until(all_counted, timeout=RUN_TIMEOUT, message="every finished job counted")
    # Still every finished job counted once the workers left (their last counts too).
    assert (await stats_report(app)).activity.of("default", "normal").totals.done == finished
    assert await live_workers(app) == []
