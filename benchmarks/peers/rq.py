"""RQ: one queue per level; the worker takes the first non-empty queue in the order given.

``SimpleWorker`` runs jobs in the worker process: the default ``Worker`` forks a child
per job (isolation at several milliseconds a job), which no one picks for short jobs.
RQ runs one job at a time per worker process, so the concurrency is 1.
"""

from __future__ import annotations

import time

from redis import Redis
from rq import Queue

from benchmarks import probe
from benchmarks.peers.base import LOW_JOB_SECONDS, Adapter, Kind, Profile, env, namespace, python

URL = env("BENCH_URL")
QUEUES = {level: f"{namespace()}-{level}" for level in ("critical", "normal", "low")}


def noop() -> None:
    probe.noop_done()


def low() -> None:
    time.sleep(LOW_JOB_SECONDS)
    probe.low_done()


def critical(sent: float) -> None:
    probe.critical_started(sent)


TASKS = {"noop": (noop, "normal"), "low": (low, "low")}


class RqAdapter(Adapter):
    name = "rq"
    distribution = "rq"
    profile = Profile(
        concurrency=1,
        worker="rq worker --worker-class rq.worker.SimpleWorker --quiet critical normal low",
        config=(
            "SimpleWorker (no fork per job), --quiet (no log line per job); results kept "
            "500 s (default result_ttl)"
        ),
        bulk="Queue.enqueue_many([Queue.prepare_data(...)]) (one pipeline)",
        priorities="a queue per level, listed in order: strict",
        delivery="job moved to a started registry; a dead worker's jobs are failed, not rerun",
    )

    def __init__(self) -> None:
        self.connection = Redis.from_url(URL)
        self.queues = {level: Queue(name, connection=self.connection)
                       for level, name in QUEUES.items()}  # fmt: skip

    async def enqueue_one(self, n: int, kind: Kind) -> None:
        fn, level = TASKS[kind]
        queue = self.queues[level]
        for _ in range(n):
            queue.enqueue(fn)

    async def enqueue_bulk(self, n: int, kind: Kind) -> None:
        fn, level = TASKS[kind]
        self.queues[level].enqueue_many([Queue.prepare_data(fn) for _ in range(n)])

    async def enqueue_critical(self, sent: float) -> None:
        self.queues["critical"].enqueue(critical, sent)

    async def close(self) -> None:
        self.connection.close()

    def worker_command(self) -> list[str]:
        return [
            python(), "-m", "rq.cli", "worker", "--url", URL, "--quiet",
            "--worker-class", "rq.worker.SimpleWorker", *QUEUES.values(),
        ]  # fmt: skip


ADAPTER = RqAdapter
