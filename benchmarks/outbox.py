"""Commit-to-start latency of ``enqueue_on_commit``: the durable outbox against the send
after the commit.

``python -m benchmarks.outbox [--jobs 1000] [--interval 0.005]`` starts a private Redis
(lockgate's embedded server) and, per mode, a ``lockgate worker`` process; this process
commits ``--jobs`` psycopg 3 transactions one after another (``--interval`` seconds apart,
so the figure is the path's latency, not a queue's), each enqueueing one job on commit,
and notes the time each ``commit()`` returned. The job notes the time it started (the
wall clock: one machine). Latency: start less commit, per job; p50, p99 and max.

Modes: ``outbox`` (``App(outbox=DSN)``: the row commits with the transaction, the
``NOTIFY`` wakes a relay in the worker, which enqueues it) and ``after commit`` (no
outbox: the commit watcher asks PostgreSQL for the transaction's outcome, then sends).
PostgreSQL: ``$LOCKGATE_PG_DSN``, else the local ``test`` database.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg

from lockgate import App
from lockgate.integrations.embedded import EmbeddedServer
from lockgate.integrations.postgres import init_schema
from lockgate.integrations.transactions import drain

DSN = os.environ.get("LOCKGATE_PG_DSN", "host=127.0.0.1 dbname=test user=postgres")
ROOT = Path(__file__).resolve().parents[1]

# The worker's App (this module, imported by `lockgate worker benchmarks.outbox:app`).
app = App(namespace=os.environ.get("OUTBOX_BENCH_NAMESPACE", "outbox-bench"))


async def started(n: int) -> None:
    """Note when the job started (the wall clock, as the producer's commits are)."""
    client, _ = await app.async_connection()
    await client.hset(f"{app.keys.prefix}:bench:started", str(n), repr(time.time()))


app.task(started)  # the producer's App declares it too: the same task name


def measure(mode: str, jobs: int, interval: float, url: str) -> list[float]:
    """Latencies (seconds) of ``jobs`` commits in one mode."""
    namespace = uuid.uuid4().hex
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, LOCKGATE_REDIS_URL=url, OUTBOX_BENCH_NAMESPACE=namespace,
               PYTHONPATH=path)  # fmt: skip
    command = [sys.executable, "-m", "lockgate", "--log-level", "WARNING", "worker",
               "benchmarks.outbox:app", "--concurrency", "16"]  # fmt: skip
    if mode == "outbox":
        command += ["--outbox", DSN]
    worker = subprocess.Popen(command, env=env, cwd=ROOT)
    producer = App(redis_url=url, namespace=namespace, outbox=DSN if mode == "outbox" else None)
    task = producer.task(started)  # the same task, declared on the producer's App
    committed: dict[int, float] = {}
    try:
        time.sleep(2.0)  # the worker's start (its import, its relay's LISTEN)
        with psycopg.connect(DSN) as conn:
            for n in range(jobs):
                conn.execute("SELECT 1")  # a transaction is open
                task.enqueue_on_commit(conn, n)
                conn.commit()
                committed[n] = time.time()
                time.sleep(interval)
        drain(30)
        client = producer.client()
        key = f"{producer.keys.prefix}:bench:started"
        deadline = time.monotonic() + 120
        while client.hlen(key) < jobs:
            if time.monotonic() > deadline:
                raise SystemExit(f"{mode}: {client.hlen(key)} of {jobs} jobs started")
            time.sleep(0.05)
        starts = {int(n): float(t) for n, t in client.hgetall(key).items()}
    finally:
        worker.terminate()
        worker.wait(30)
        producer.close()
    return [starts[n] - committed[n] for n in range(jobs)]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=0.005)
    args = parser.parse_args()
    init_schema(DSN)
    print(f"{args.jobs} commits, {args.interval * 1000:g} ms apart; commit to start, ms")
    print("| mode | p50 | p99 | max | mean |")
    print("| --- | --: | --: | --: | --: |")
    with EmbeddedServer() as server:
        for mode in ("outbox", "after commit"):
            ms = [x * 1000 for x in measure(mode, args.jobs, args.interval, server.url)]
            print(f"| {mode} | {percentile(ms, 0.5):.1f} | {percentile(ms, 0.99):.1f} | "
                  f"{max(ms):.1f} | {statistics.fmean(ms):.1f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
