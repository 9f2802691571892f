"""Dramatiq with its Redis broker: a queue per level, one worker process of 8 threads.

Actors carry priorities (lower runs first): each queue's consumer prefetches into one
in-process work queue ordered by priority, so a critical message overtakes the low ones
already fetched. Default middleware (retries, time limits, age limits); no result store.
"""

from __future__ import annotations

import time

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from benchmarks import probe
from benchmarks.peers.base import LOW_JOB_SECONDS, Adapter, Kind, Profile, env, namespace, python

THREADS = 8

broker = RedisBroker(url=env("BENCH_URL"), namespace=f"{namespace()}-dramatiq")
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="normal", priority=50)
def noop() -> None:
    probe.noop_done()


@dramatiq.actor(queue_name="low", priority=100)
def low() -> None:
    time.sleep(LOW_JOB_SECONDS)
    probe.low_done()


@dramatiq.actor(queue_name="critical", priority=0)
def critical(sent: float) -> None:
    probe.critical_started(sent)


ACTORS = {"noop": noop, "low": low}


class DramatiqAdapter(Adapter):
    name = "dramatiq"
    distribution = "dramatiq"
    has_bulk_api = False
    profile = Profile(
        concurrency=THREADS,
        worker=f"dramatiq benchmarks.peers.dramatiq --processes 1 --threads {THREADS}",
        config="defaults: prefetch 2 x threads per queue, default middleware, no results",
        bulk="no bulk API: group(...).run() sends one message per call",
        priorities="a queue per level; actor priority orders the prefetched messages",
        delivery="acked after the run; a dead worker's messages are requeued by heartbeat",
    )

    async def enqueue_one(self, n: int, kind: Kind) -> None:
        actor = ACTORS[kind]
        for _ in range(n):
            actor.send()

    async def enqueue_bulk(self, n: int, kind: Kind) -> None:
        actor = ACTORS[kind]
        dramatiq.group(actor.message() for _ in range(n)).run()

    async def enqueue_critical(self, sent: float) -> None:
        critical.send(sent)

    async def close(self) -> None:
        broker.close()

    def worker_command(self) -> list[str]:
        return [
            python(), "-m", "dramatiq", "benchmarks.peers.dramatiq:broker",
            "--processes", "1", "--threads", str(THREADS),
        ]  # fmt: skip


ADAPTER = DramatiqAdapter
