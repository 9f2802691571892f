"""lockgate as a user runs it: acks, idempotency claims and dead-lettering all on.

Every task is ``idempotent=True`` (the worker claims the job id before running it and
leaves a done marker for 24 h), jobs are acknowledged and deleted only after they ran,
failures go to the dead-letter stream. Levels critical/normal/low (10:5:1), weighted
policy, streams backend; the worker is the ``lockgate worker`` command.
"""

from __future__ import annotations

import asyncio

from benchmarks import probe
from benchmarks.peers.base import LOW_JOB_SECONDS, Adapter, Kind, Profile, env, namespace, python
from lockgate import App

CONCURRENCY = 32  # drain at 8/16/32/64: 7.5k/9.6k/10.9k/11.6k jobs/s on this machine

app = App(
    redis_url=env("BENCH_URL"),
    namespace=namespace(),
    levels={"critical": 10, "normal": 5, "low": 1},
)


@app.task(priority="normal", idempotent=True)
async def noop() -> None:
    probe.noop_done()


@app.task(priority="low", idempotent=True)
async def low() -> None:
    await asyncio.sleep(LOW_JOB_SECONDS)
    probe.low_done()


@app.task(priority="critical", idempotent=True)
async def critical(sent: float) -> None:
    probe.critical_started(sent)


TASKS = {"noop": noop, "low": low}


class LockgateAdapter(Adapter):
    name = "lockgate"
    distribution = "lockgate"
    profile = Profile(
        concurrency=CONCURRENCY,
        worker=f"lockgate worker benchmarks.peers.lockgate:app --concurrency {CONCURRENCY}",
        config=(
            "defaults: streams backend, weighted policy (10:5:1), idempotent=True on every "
            "task (done markers kept 24 h, the default idempotency_ttl), dead-letter stream, "
            "visibility timeout 30 s, uvloop"
        ),
        bulk="app.enqueue_many([task.message() ...]) (one script call per 500 jobs)",
        priorities="a stream per level; the worker reads its free slots by weight (10:5:1)",
        delivery="acked and deleted after the run; claims make redeliveries run once",
    )

    async def enqueue_one(self, n: int, kind: Kind) -> None:
        task = TASKS[kind]
        for _ in range(n):
            task.enqueue()

    async def enqueue_bulk(self, n: int, kind: Kind) -> None:
        task = TASKS[kind]
        app.enqueue_many([task.message() for _ in range(n)])

    async def enqueue_critical(self, sent: float) -> None:
        critical.enqueue(sent)

    async def close(self) -> None:
        app.close()

    def worker_command(self) -> list[str]:
        return [
            python(), "-m", "lockgate", "--log-level", "WARNING", "worker",
            "benchmarks.peers.lockgate:app", "--concurrency", str(CONCURRENCY),
        ]  # fmt: skip


ADAPTER = LockgateAdapter
