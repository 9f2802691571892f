"""streaq: Redis Streams, a stream per priority, 16 tasks at once, prefetch 16 (default).

Priorities are listed lowest first; the worker reads the streams highest first. Results
are kept 5 minutes (the default task ``ttl``). uvloop through anyio's ``use_uvloop``.
The worker runs through ``Worker.run_sync`` with WARNING logs: ``streaq run`` logs a line
per task at INFO.
"""

from __future__ import annotations

import asyncio
import logging

from streaq import Worker

from benchmarks import probe
from benchmarks.peers.base import LOW_JOB_SECONDS, Adapter, Kind, Profile, env, namespace, python

CONCURRENCY = 16

worker = Worker(
    redis_url=env("BENCH_URL"),
    queue_name=f"{namespace()}-streaq",
    concurrency=CONCURRENCY,
    priorities=["low", "normal", "critical"],
    anyio_kwargs={"use_uvloop": True},
)


@worker.task()
async def noop() -> None:
    probe.noop_done()


@worker.task()
async def low() -> None:
    await asyncio.sleep(LOW_JOB_SECONDS)
    probe.low_done()


@worker.task()
async def critical(sent: float) -> None:
    probe.critical_started(sent)


TASKS = {"noop": (noop, "normal"), "low": (low, "low")}


def run() -> None:
    """The worker process, as ``streaq run`` starts it but with WARNING logs."""
    logging.basicConfig(level=logging.WARNING)
    worker.run_sync()


class StreaqAdapter(Adapter):
    name = "streaq"
    distribution = "streaq"
    profile = Profile(
        concurrency=CONCURRENCY,
        worker=f"streaq run benchmarks.peers.streaq:worker (concurrency={CONCURRENCY})",
        config="uvloop, prefetch = concurrency (default), results kept 5 min (default ttl)",
        bulk="Worker.enqueue_many([task.enqueue() ...]) (one pipeline)",
        priorities="a stream per priority, read highest first",
        delivery="acked after the run; idle tasks are reclaimed after idle_timeout (60 s)",
    )

    async def start(self) -> None:
        await worker.__aenter__()

    async def enqueue_one(self, n: int, kind: Kind) -> None:
        task, priority = TASKS[kind]
        for _ in range(n):
            await task.enqueue().start(priority=priority)

    async def enqueue_bulk(self, n: int, kind: Kind) -> None:
        task, priority = TASKS[kind]
        await worker.enqueue_many([task.enqueue().start(priority=priority) for _ in range(n)])

    async def enqueue_critical(self, sent: float) -> None:
        await critical.enqueue(sent).start(priority="critical")

    async def close(self) -> None:
        await worker.__aexit__(None, None, None)

    def worker_command(self) -> list[str]:
        return [python(), "-c", "from benchmarks.peers.streaq import run; run()"]


ADAPTER = StreaqAdapter
