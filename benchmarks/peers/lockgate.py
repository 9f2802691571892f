"""lockgate as a user runs it: acks, idempotency claims and dead-lettering all on.

Every task is ``idempotent=True`` (the worker claims the job id before running it and
leaves a done marker for 24 h), jobs are acknowledged and deleted only after they ran,
failures go to the dead-letter stream. Levels critical/normal/low (10:5:1), weighted
policy, streams backend; the worker is the ``lockgate worker`` command.

The driver's lockgate variants change that through the environment, read at import:
``BENCH_LG_IDEMPOTENT`` (1, or 0 for plain tasks), ``BENCH_LG_CONCURRENCY`` (100),
``BENCH_LG_BACKEND`` (streams or sorted) and ``BENCH_LG_PROCESSES`` (1; the worker gets
``--processes N`` only when N > 1). ``BENCH_COUNT_ROUND_TRIPS=1`` counts the client's
round trips (``benchmarks.roundtrips``).
"""

from __future__ import annotations

import asyncio
import os
from typing import Literal

from benchmarks import probe, roundtrips
from benchmarks.peers.base import LOW_JOB_SECONDS, Adapter, Kind, Profile, env, namespace, python
from lockgate import App

CONCURRENCY_DEFAULT = 100  # as BullMQ's worker in this benchmark (and the performance issue's runs)


def _setting(name: str, default: str, allowed: tuple[str, ...] | None = None) -> str:
    value = os.environ.get(name, default)
    if allowed is not None and value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    if allowed is None and not (value.isdigit() and int(value) >= 1):
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    return value


IDEMPOTENT = _setting("BENCH_LG_IDEMPOTENT", "1", ("0", "1")) == "1"
CONCURRENCY = int(_setting("BENCH_LG_CONCURRENCY", str(CONCURRENCY_DEFAULT)))
BACKEND: Literal["streams", "sorted"] = (
    "sorted" if _setting("BENCH_LG_BACKEND", "streams", ("streams", "sorted")) == "sorted"
    else "streams"
)  # fmt: skip
PROCESSES = int(_setting("BENCH_LG_PROCESSES", "1"))
if roundtrips.enabled():
    roundtrips.install()

app = App(
    redis_url=env("BENCH_URL"),
    namespace=namespace(),
    levels={"critical": 10, "normal": 5, "low": 1},
    backend=BACKEND,
)


@app.task(priority="normal", idempotent=IDEMPOTENT)
async def noop() -> None:
    probe.noop_done()


@app.task(priority="low", idempotent=IDEMPOTENT)
async def low() -> None:
    await asyncio.sleep(LOW_JOB_SECONDS)
    probe.low_done()


@app.task(priority="critical", idempotent=IDEMPOTENT)
async def critical(sent: float) -> None:
    probe.critical_started(sent)


TASKS = {"noop": noop, "low": low}
WORKER_OPTIONS = ["--concurrency", str(CONCURRENCY)]
if PROCESSES > 1:  # an option of newer workers: older ones run without it
    WORKER_OPTIONS += ["--processes", str(PROCESSES)]


class LockgateAdapter(Adapter):
    name = "lockgate"
    distribution = "lockgate"
    profile = Profile(
        concurrency=CONCURRENCY,
        worker=" ".join(["lockgate worker benchmarks.peers.lockgate:app", *WORKER_OPTIONS]),
        config=(
            f"defaults: {BACKEND} backend, weighted policy (10:5:1), "
            + (
                "idempotent=True on every task (done markers kept 24 h, the default "
                "idempotency_ttl)"
                if IDEMPOTENT
                else "plain tasks (idempotent=False: no claim, no done marker)"
            )
            + ", dead-letter stream, visibility timeout 30 s, uvloop"
        ),
        bulk="app.enqueue_many([task.message() ...]) (one script call per 500 jobs)",
        priorities=(
            "a stream per level; the worker reads its free slots by weight (10:5:1)"
            if BACKEND == "streams"
            else "one ranked sorted set per queue, by level and age (aging 60 s)"
        ),
        delivery=(
            "acked and deleted after the run; claims make redeliveries run once"
            if IDEMPOTENT
            else "acked and deleted after the run; a redelivery runs again"
        ),
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
            "benchmarks.peers.lockgate:app", *WORKER_OPTIONS,
        ]  # fmt: skip


ADAPTER = LockgateAdapter
