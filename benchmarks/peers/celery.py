"""Celery with the Redis broker: a queue per level, read in strict order, 8 threads.

One worker process: the threads pool with 8 threads (prefork would be 8 processes).
``queue_order_strategy="priority"`` makes the worker read the listed queues in order
instead of round-robin; the prefetch multiplier stays at its default (4 per thread).
No result backend; gossip, mingle and heartbeat off (one worker, nothing to sync).
"""

from __future__ import annotations

import time

from celery import Celery, group

from benchmarks import probe
from benchmarks.peers.base import LOW_JOB_SECONDS, Adapter, Kind, Profile, env, namespace, python

THREADS = 8
QUEUES = {level: f"{namespace()}-{level}" for level in ("critical", "normal", "low")}

app = Celery("bench", broker=env("BENCH_URL"))
app.conf.update(
    broker_transport_options={"queue_order_strategy": "priority"},
    broker_connection_retry_on_startup=True,
    task_ignore_result=True,
    worker_hijack_root_logger=False,
)


@app.task(queue=QUEUES["normal"])
def noop() -> None:
    probe.noop_done()


@app.task(queue=QUEUES["low"])
def low() -> None:
    time.sleep(LOW_JOB_SECONDS)
    probe.low_done()


@app.task(queue=QUEUES["critical"])
def critical(sent: float) -> None:
    probe.critical_started(sent)


TASKS = {"noop": noop, "low": low}


class CeleryAdapter(Adapter):
    name = "celery"
    distribution = "celery"
    has_bulk_api = False
    profile = Profile(
        concurrency=THREADS,
        worker=(
            f"celery -A benchmarks.peers.celery worker --pool threads -c {THREADS} "
            "-Q critical,normal,low --without-gossip --without-mingle --without-heartbeat"
        ),
        config="threads pool, queue_order_strategy=priority, no result backend, acks early",
        bulk="no bulk API: group(...).apply_async() publishes one message per call",
        priorities="a queue per level read in order; up to 4 x 8 prefetched low jobs go first",
        delivery="acked when the task starts (default); a crash loses running jobs",
    )

    async def enqueue_one(self, n: int, kind: Kind) -> None:
        task = TASKS[kind]
        for _ in range(n):
            task.delay()

    async def enqueue_bulk(self, n: int, kind: Kind) -> None:
        task = TASKS[kind]
        group(task.s() for _ in range(n)).apply_async()

    async def enqueue_critical(self, sent: float) -> None:
        critical.delay(sent)

    async def close(self) -> None:
        app.close()

    def worker_command(self) -> list[str]:
        return [
            python(), "-m", "celery", "-A", "benchmarks.peers.celery", "worker",
            "--pool", "threads", "--concurrency", str(THREADS), "--loglevel", "WARNING",
            "-Q", ",".join(QUEUES.values()),
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip


ADAPTER = CeleryAdapter
