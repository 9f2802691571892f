"""taskiq with taskiq-redis's ``RedisStreamBroker``: one stream, 16 tasks at once.

taskiq's own defaults otherwise: ack after the result is handled, no result backend,
uvloop (taskiq picks it up when installed), prefetch one batch of ``xread_count`` (100).
The stream is never trimmed (``maxlen=None``, the default): acked entries stay in Redis.
"""

from __future__ import annotations

import asyncio

from taskiq_redis import RedisStreamBroker

from benchmarks import probe
from benchmarks.peers.base import LOW_JOB_SECONDS, Adapter, Kind, Profile, env, namespace, python

CONCURRENCY = 16
CHUNK = 500

broker = RedisStreamBroker(url=env("BENCH_URL"), queue_name=f"{namespace()}-taskiq")


@broker.task
async def noop() -> None:
    probe.noop_done()


@broker.task
async def low() -> None:
    await asyncio.sleep(LOW_JOB_SECONDS)
    probe.low_done()


@broker.task
async def critical(sent: float) -> None:
    probe.critical_started(sent)


TASKS = {"noop": noop, "low": low}


class TaskiqAdapter(Adapter):
    name = "taskiq"
    distribution = "taskiq"
    has_bulk_api = False
    profile = Profile(
        concurrency=CONCURRENCY,
        worker=(
            f"taskiq worker benchmarks.peers.taskiq:broker --workers 1 "
            f"--max-async-tasks {CONCURRENCY}"
        ),
        config="RedisStreamBroker defaults (no trimming, xread_count 100), uvloop, no results",
        bulk=f"no bulk API: asyncio.gather of kiq(), {CHUNK} at a time",
        priorities="none: one stream, FIFO",
        delivery="acked after the run (ack_type when_saved); XAUTOCLAIM after 10 min idle",
    )

    async def start(self) -> None:
        await broker.startup()

    async def enqueue_one(self, n: int, kind: Kind) -> None:
        task = TASKS[kind]
        for _ in range(n):
            await task.kiq()

    async def enqueue_bulk(self, n: int, kind: Kind) -> None:
        task = TASKS[kind]
        for start in range(0, n, CHUNK):
            count = min(CHUNK, n - start)
            await asyncio.gather(*(task.kiq() for _ in range(count)))

    async def enqueue_critical(self, sent: float) -> None:
        await critical.kiq(sent)

    async def close(self) -> None:
        await broker.shutdown()

    def worker_command(self) -> list[str]:
        return [
            python(), "-m", "taskiq", "worker", "benchmarks.peers.taskiq:broker",
            "--workers", "1", "--max-async-tasks", str(CONCURRENCY), "--log-level", "WARNING",
        ]  # fmt: skip


ADAPTER = TaskiqAdapter
