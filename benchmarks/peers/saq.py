"""saq with its Redis queue: no priorities and no bulk enqueue; 16 jobs at once.

Jobs keep their record (and result) for 600 s after they finish (saq's default ``ttl``).
uvloop is the loop: saq's worker builds its loop with ``asyncio.new_event_loop``, which
follows the policy this module sets.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvloop
from saq import Queue

from benchmarks import probe
from benchmarks.peers.base import LOW_JOB_SECONDS, Adapter, Kind, Profile, env, namespace, python

CONCURRENCY = 16
CHUNK = 500

asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
queue = Queue.from_url(env("BENCH_URL"), name=f"{namespace()}-saq")


async def noop(ctx: dict[str, Any]) -> None:
    probe.noop_done()


async def low(ctx: dict[str, Any]) -> None:
    await asyncio.sleep(LOW_JOB_SECONDS)
    probe.low_done()


async def critical(ctx: dict[str, Any], *, sent: float) -> None:
    probe.critical_started(sent)


settings = {"queue": queue, "functions": [noop, low, critical], "concurrency": CONCURRENCY}


class SaqAdapter(Adapter):
    name = "saq"
    distribution = "saq"
    has_bulk_api = False
    profile = Profile(
        concurrency=CONCURRENCY,
        worker=f"saq benchmarks.peers.saq.settings (concurrency={CONCURRENCY})",
        config="uvloop; job records kept 600 s after they finish (default ttl)",
        bulk=f"no bulk API: asyncio.gather of enqueue, {CHUNK} at a time",
        priorities="none: one FIFO list per queue",
        delivery="job held in an active list until it finishes; a sweep retries stuck ones",
    )

    async def start(self) -> None:
        await queue.connect()

    async def enqueue_one(self, n: int, kind: Kind) -> None:
        for _ in range(n):
            await queue.enqueue(kind)

    async def enqueue_bulk(self, n: int, kind: Kind) -> None:
        for start in range(0, n, CHUNK):
            count = min(CHUNK, n - start)
            await asyncio.gather(*(queue.enqueue(kind) for _ in range(count)))

    async def enqueue_critical(self, sent: float) -> None:
        await queue.enqueue("critical", sent=sent)

    async def close(self) -> None:
        await queue.disconnect()

    def worker_command(self) -> list[str]:
        return [python(), "-m", "saq", "benchmarks.peers.saq.settings"]


ADAPTER = SaqAdapter
