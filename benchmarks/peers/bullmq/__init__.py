"""BullMQ for Node.js: one queue, job priorities, one worker process of 100 jobs at once.

The library is Node: ``worker.mjs`` (a ``Worker`` for the three tasks, reporting to the
probe's keys as ``benchmarks/probe.py`` does) and ``producer.mjs`` (the enqueue calls),
beside this module, with bullmq and ioredis from the npm folder ``venvs.ensure_node``
installs outside the repository. This module is the Python side: the adapter starts one
long-lived ``node producer.mjs`` per measurement, already connected, and each enqueue
call sends it one command line and waits for its ``ok``, so Node's start-up stays out of
the timed section.

Jobs are removed when they complete (``removeOnComplete: true``; the latest 100 failed
ones kept), as a setup without history would run. Critical jobs carry priority 1 and low
ones 3 (the latency measurement, where both flow). No-op jobs carry none: they are
measured alone (enqueue and drain), and BullMQ's plain wait list is its fastest path, so
BullMQ is measured at its best. (BullMQ serves jobs without a priority before every
prioritized one: with no-op jobs and critical ones mixed, a level would need priority 2.)
Environment, read at import: ``BENCH_BULLMQ_CONCURRENCY`` (100) and
``BENCH_BULLMQ_NORMAL_PRIORITY`` (0; 2 puts no-op jobs on the prioritized path).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

from benchmarks import probe, venvs
from benchmarks.peers.base import LOW_JOB_SECONDS, Adapter, Kind, Profile

HERE = Path(__file__).resolve().parent
PACKAGES = venvs.node_directory("bullmq")
CHUNK = 500
START_TIMEOUT = 30.0
CLOSE_TIMEOUT = 10.0


def _setting(name: str, default: int, least: int) -> int:
    value = os.environ.get(name, str(default))
    if not (value.isdigit() and int(value) >= least):
        raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")
    return int(value)


CONCURRENCY = _setting("BENCH_BULLMQ_CONCURRENCY", 100, 1)
NORMAL_PRIORITY = _setting("BENCH_BULLMQ_NORMAL_PRIORITY", 0, 0)


def node() -> str:
    """The ``node`` on PATH (``venvs.ensure_node`` checked it is there)."""
    return shutil.which("node") or "node"


class BullmqAdapter(Adapter):
    name = "bullmq"
    distribution = "bullmq"
    profile = Profile(
        concurrency=CONCURRENCY,
        worker=f"node worker.mjs: new Worker(queue, processor, {{concurrency: {CONCURRENCY}}})",
        config=(
            "Node.js, one Worker process; removeOnComplete: true (no history kept), "
            "removeOnFail: 100; events stream at its default cap (about 10,000 entries); "
            "enqueue calls sent to a long-lived, connected node producer over a pipe"
        ),
        bulk=f"queue.addBulk, {CHUNK} jobs per call (one pipeline of add-job scripts)",
        priorities=(
            "job priority option in one queue: critical 1, normal "
            + (f"{NORMAL_PRIORITY}" if NORMAL_PRIORITY else "none (plain wait list)")
            + ", low 3 (a prioritized sorted set, lowest first)"
        ),
        delivery=(
            "job locked while it runs (lockDuration 30 s, renewed every 15 s); the stalled "
            "check (every 30 s) moves a job whose lock expired back to wait, once "
            "(maxStalledCount 1), then fails it"
        ),
    )

    def __init__(self) -> None:
        self.producer: asyncio.subprocess.Process | None = None

    def library_version(self) -> str | None:
        manifest = PACKAGES / "node_modules" / "bullmq" / "package.json"
        return str(json.loads(manifest.read_text())["version"])

    async def start(self) -> None:
        argv = [
            node(), str(HERE / "producer.mjs"), "--packages", str(PACKAGES),
            "--chunk", str(CHUNK), "--normal-priority", str(NORMAL_PRIORITY),
        ]  # fmt: skip
        # stderr stays the runner's (its log); stdout carries the answers.
        self.producer = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        line = await asyncio.wait_for(self._read(), START_TIMEOUT)
        if not line.startswith("ready"):
            raise RuntimeError(f"bullmq producer did not start: {line or 'it exited'}")

    async def _read(self) -> str:
        assert self.producer is not None and self.producer.stdout is not None
        return (await self.producer.stdout.readline()).decode().strip()

    async def _call(self, command: str) -> None:
        """Send one command line to the producer and wait for its answer."""
        assert self.producer is not None and self.producer.stdin is not None
        self.producer.stdin.write(command.encode() + b"\n")
        await self.producer.stdin.drain()
        answer = await self._read()
        if answer != "ok":
            raise RuntimeError(f"bullmq producer, {command!r}: {answer or 'it exited'}")

    async def enqueue_one(self, n: int, kind: Kind) -> None:
        await self._call(f"one {n} {kind}")

    async def enqueue_bulk(self, n: int, kind: Kind) -> None:
        await self._call(f"bulk {n} {kind}")

    async def enqueue_critical(self, sent: float) -> None:
        await self._call(f"critical {sent!r}")

    async def close(self) -> None:
        producer, self.producer = self.producer, None
        if producer is None:
            return
        if producer.stdin is not None:
            producer.stdin.close()  # end of input: the producer closes its queue and exits
        try:
            await asyncio.wait_for(producer.wait(), CLOSE_TIMEOUT)
        except TimeoutError:
            producer.kill()
            await producer.wait()

    def worker_command(self) -> list[str]:
        return [
            node(), str(HERE / "worker.mjs"), "--packages", str(PACKAGES),
            "--concurrency", str(CONCURRENCY), "--batch", str(probe.BATCH),
            "--low-batch", str(probe.LOW_BATCH), "--low-ms", repr(LOW_JOB_SECONDS * 1000),
        ]  # fmt: skip


ADAPTER = BullmqAdapter
