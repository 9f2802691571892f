"""One measurement of one library, run inside that library's environment.

``python -m benchmarks.runner PEER MEASURE --jobs N --result FILE`` with ``BENCH_URL``,
``BENCH_NS`` and ``BENCH_KEYS`` in the environment; writes one JSON object to FILE.
The driver starts it once per measurement and run, and cleans Redis between runs.

Measures:
    enqueue_one   N no-op jobs, one call each: jobs/s.
    enqueue_bulk  N no-op jobs through the bulk API: jobs/s.
    drain         N no-op jobs queued, then one worker process: jobs/s from the first
                  job's start to the N-th job's end, the worker's peak RSS, and Redis
                  used memory empty, with N queued, and after the drain. When the worker
                  counts its round trips (``BENCH_COUNT_ROUND_TRIPS=1``), those from its
                  first job to the N-th, per job.
    latency       N low jobs (1 ms each) queued, one worker busy with them, then
                  CRITICAL critical jobs 5 ms apart: their enqueue-to-start wait, and the
                  low jobs done per second meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from benchmarks import probe, procs
from benchmarks.peers.base import Adapter

CRITICAL_INTERVAL = 0.005
SETTLE_SECONDS = 0.5  # after the last job, for its ack to land before INFO memory


def load(peer: str) -> Adapter:
    """The adapter of ``peer`` (imports its module, which reads the environment)."""
    module = importlib.import_module(f"benchmarks.peers.{peer}")
    adapter_class: type[Adapter] = module.ADAPTER
    return adapter_class()


def version(adapter: Adapter) -> str:
    """The installed version of the library (the module's own when not installed)."""
    own = adapter.library_version()
    if own is not None:
        return own
    try:
        return importlib.metadata.version(adapter.distribution)
    except importlib.metadata.PackageNotFoundError:
        module = importlib.import_module(adapter.distribution)
        return str(getattr(module, "__version__", "unknown"))


def used_memory() -> int:
    """Redis ``used_memory`` in bytes."""
    return int(probe.client().info("memory")["used_memory"])


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile, to a tenth (inclusive method); the value itself for one sample."""
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=1000, method="inclusive")[round(q * 10) - 1]


async def timed(call: Callable[[], Awaitable[None]], n: int) -> dict[str, Any]:
    started = time.perf_counter()
    await call()
    elapsed = time.perf_counter() - started
    return {"rate": n / elapsed, "seconds": elapsed}


def start_worker(adapter: Adapter, log: Path, target: int) -> Any:
    env = dict(os.environ, BENCH_TARGET=str(target))
    return procs.start(adapter.worker_command(), env, log.open("ab"))


def worker_gone(worker: Any, log: Path, what: str) -> RuntimeError:
    """The error for a worker that stopped short, with its log's last line if it exited."""
    if worker.poll() is None:
        return RuntimeError(f"worker timed out {what} (see {log})")
    tail = log.read_text(errors="replace").strip().splitlines()[-1:]
    return RuntimeError(f"worker exited {what}: {' '.join(tail)[:200]} (see {log})")


def round_trips(keys: probe.ProbeKeys, n: int) -> dict[str, Any]:
    """The worker's client round trips, when it counted them (else nothing)."""
    counted, startup = probe.client().mget(keys.trips, keys.trips_start)
    if counted is None:
        return {}
    trips = int(cast(bytes, counted))
    return {"round_trips": trips, "round_trips_per_job": trips / n,
            "round_trips_startup": int(cast(bytes, startup or b"0"))}  # fmt: skip


async def drain(adapter: Adapter, n: int, log: Path) -> dict[str, Any]:
    keys = probe.keys()
    empty = used_memory()
    await adapter.enqueue_bulk(n, "noop")
    queued = used_memory()
    worker = start_worker(adapter, log, n)
    try:
        finished = procs.wait_for(
            lambda: bool(probe.client().exists(keys.last)), 30 + n / 100, worker
        )
        rss = procs.peak_rss_bytes(worker.pid)
        if not finished:
            done = int(probe.client().get(keys.done) or 0)
            raise worker_gone(worker, log, f"after {done} of {n} jobs")
        time.sleep(SETTLE_SECONDS)
        after = used_memory()
    finally:
        procs.stop(worker)
    first, last = (float(cast(bytes, v)) for v in probe.client().mget(keys.first, keys.last))
    return {
        "jobs": n,
        "rate": n / (last - first),
        "seconds": last - first,
        "rss_bytes": rss,
        "memory": {"empty": empty, "queued": queued, "after": after},
        **round_trips(keys, n),
    }


async def latency(adapter: Adapter, n: int, critical: int, log: Path) -> dict[str, Any]:
    keys = probe.keys()
    client = probe.client()
    await adapter.enqueue_bulk(n, "low")
    worker = start_worker(adapter, log, 0)
    try:
        if not procs.wait_for(lambda: int(client.get(keys.low) or 0) >= 20, 60, worker):
            raise worker_gone(worker, log, "before it started low jobs")
        low_before, began = int(client.get(keys.low) or 0), time.monotonic()
        for _ in range(critical):
            await adapter.enqueue_critical(time.time())
            await asyncio.sleep(CRITICAL_INTERVAL)
        procs.wait_for(lambda: client.llen(keys.latencies) >= critical, 30 + n * 0.002, worker)
        low_after, ended = int(client.get(keys.low) or 0), time.monotonic()
    finally:
        procs.stop(worker)
    waits = [float(v) for v in client.lrange(keys.latencies, 0, -1)]
    if not waits:
        raise RuntimeError(f"no critical job started (see {log})")
    return {
        "p50_ms": percentile(waits, 50) * 1000,
        "p99_ms": percentile(waits, 99) * 1000,
        "p999_ms": percentile(waits, 99.9) * 1000,
        "max_ms": max(waits) * 1000,
        "critical_started": len(waits),
        "critical_sent": critical,
        "low_done_meanwhile": low_after - low_before,
        "low_left": n - low_after,  # about (low jobs count in tens): 0 if the backlog ran dry
        "low_rate_meanwhile": (low_after - low_before) / (ended - began),
        "window_seconds": ended - began,
    }


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    adapter = load(args.peer)
    await adapter.start()
    try:
        n, log = args.jobs, Path(args.log)
        if args.measure == "enqueue_one":
            result = await timed(lambda: adapter.enqueue_one(n, "noop"), n)
        elif args.measure == "enqueue_bulk":
            result = await timed(lambda: adapter.enqueue_bulk(n, "noop"), n)
        elif args.measure == "drain":
            result = await drain(adapter, n, log)
        else:
            result = await latency(adapter, n, args.critical, log)
    finally:
        await adapter.close()
    return {"version": version(adapter), "profile": asdict(adapter.profile), **result}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.runner")
    parser.add_argument("peer")
    parser.add_argument("measure", choices=["enqueue_one", "enqueue_bulk", "drain", "latency"])
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--critical", type=int, default=200)
    parser.add_argument("--result", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    run: Callable[[Coroutine[Any, Any, dict[str, Any]]], dict[str, Any]] = asyncio.run
    try:
        import uvloop

        run = uvloop.run
    except ImportError:
        pass
    outcome = run(measure(args))
    Path(args.result).write_text(json.dumps(outcome))
    sys.exit(0)


if __name__ == "__main__":
    main()
