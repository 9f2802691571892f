"""arq: one sorted-set queue per worker, polled; no priorities, no bulk enqueue.

``poll_delay`` is lowered from 0.5 s to 10 ms: arq sleeps out the rest of the poll
interval after each batch it starts, which caps a default worker at a few hundred
short jobs a second. Results are kept an hour (the default). Logging at WARNING: arq's
CLI logs two lines per job at INFO, so the worker is started through ``run_worker``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

import uvloop
from arq import ArqRedis, create_pool, run_worker
from arq.connections import RedisSettings

from benchmarks import probe
from benchmarks.peers.base import LOW_JOB_SECONDS, Adapter, Kind, Profile, env, namespace, python

CONCURRENCY = 16
CHUNK = 500
QUEUE = f"{namespace()}:arq:queue"


async def noop(ctx: dict[str, Any]) -> None:
    probe.noop_done()


async def low(ctx: dict[str, Any]) -> None:
    await asyncio.sleep(LOW_JOB_SECONDS)
    probe.low_done()


async def critical(ctx: dict[str, Any], sent: float) -> None:
    probe.critical_started(sent)


class WorkerSettings:
    functions: ClassVar[list[Any]] = [noop, low, critical]
    redis_settings = RedisSettings.from_dsn(env("BENCH_URL"))
    queue_name = QUEUE
    max_jobs = CONCURRENCY
    poll_delay = 0.01


def run() -> None:
    """The worker process: uvloop, WARNING logs, then arq's ``run_worker``."""
    logging.basicConfig(level=logging.WARNING)
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    run_worker(WorkerSettings)  # type: ignore[arg-type]


class ArqAdapter(Adapter):
    name = "arq"
    distribution = "arq"
    has_bulk_api = False
    profile = Profile(
        concurrency=CONCURRENCY,
        worker=f"arq WorkerSettings (max_jobs={CONCURRENCY}, poll_delay=0.01)",
        config="poll_delay 10 ms (default 0.5 s), uvloop, results kept 1 h (default)",
        bulk=f"no bulk API: asyncio.gather of enqueue_job, {CHUNK} at a time",
        priorities="none: one FIFO queue per worker (a second worker per queue is the usual fix)",
        delivery="job key kept until done; a dead worker's job reruns after its timeout",
    )

    async def start(self) -> None:
        self.pool: ArqRedis = await create_pool(
            WorkerSettings.redis_settings, default_queue_name=QUEUE
        )

    async def enqueue_one(self, n: int, kind: Kind) -> None:
        for _ in range(n):
            await self.pool.enqueue_job(kind)

    async def enqueue_bulk(self, n: int, kind: Kind) -> None:
        for start in range(0, n, CHUNK):
            count = min(CHUNK, n - start)
            await asyncio.gather(*(self.pool.enqueue_job(kind) for _ in range(count)))

    async def enqueue_critical(self, sent: float) -> None:
        await self.pool.enqueue_job("critical", sent)

    async def close(self) -> None:
        await self.pool.aclose()

    def worker_command(self) -> list[str]:
        return [python(), "-c", "from benchmarks.peers.arq import run; run()"]


ADAPTER = ArqAdapter
