"""What client and server allow: bare redis-py loops and ``redis-benchmark`` on XADD.

``python -m benchmarks.ceiling --jobs N --result FILE`` with ``BENCH_URL`` and
``BENCH_KEYS`` set; writes one JSON object. Every figure in the results can be read
against these: enqueue one by one against XADD one by one, bulk enqueue against
pipelined XADD, a worker's drain against XREADGROUP COUNT 100 + XACK, from one process.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis

PIPELINE = 500
READ_COUNT = 100
GROUP = "bench"


def rate(n: int, started: float) -> float:
    return n / (time.perf_counter() - started)


def xadd_one(client: redis.Redis, stream: str, n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        client.xadd(stream, {"f": "v"})
    return rate(n, started)


def xadd_pipelined(client: redis.Redis, stream: str, n: int) -> float:
    started = time.perf_counter()
    for start in range(0, n, PIPELINE):
        pipe = client.pipeline(transaction=False)
        for _ in range(min(PIPELINE, n - start)):
            pipe.xadd(stream, {"f": "v"})
        pipe.execute()
    return rate(n, started)


def xreadgroup_xack(client: redis.Redis, stream: str, n: int) -> float:
    client.xgroup_create(stream, GROUP, id="0")
    started, done = time.perf_counter(), 0
    while done < n:
        reply: list[Any] = client.xreadgroup(GROUP, "c", {stream: ">"}, count=READ_COUNT)  # type: ignore[assignment]
        ids = [entry_id for _, entries in reply for entry_id, _ in entries]
        client.xack(stream, GROUP, *ids)
        done += len(ids)
    return rate(n, started)


def redis_benchmark(url: str, key: str, n: int, clients: int) -> float | None:
    """XADD requests/s from ``redis-benchmark`` (None when it is not installed)."""
    binary = shutil.which("redis-benchmark")
    if binary is None:
        return None
    parts = urlsplit(url)
    db = parts.path.strip("/") or "0"
    argv = [binary, "-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 6379),
            "--dbnum", db, "-n", str(n), "-c", str(clients), "--csv"]  # fmt: skip
    if parts.password:
        argv += ["-a", parts.password, "--no-auth-warning"]
    output = subprocess.run(
        [*argv, "XADD", key, "*", "f", "v"], capture_output=True, text=True, check=True
    ).stdout
    rows = list(csv.reader(io.StringIO(output)))
    return float(rows[-1][1])


def measure(url: str, prefix: str, n: int) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    stream = f"{prefix}:ceiling"
    try:
        results: dict[str, Any] = {"redis_py": redis.__version__}
        results["xadd_one"] = xadd_one(client, stream, n)
        client.delete(stream)
        results["xadd_pipelined"] = xadd_pipelined(client, stream, n)
        results["xreadgroup_xack"] = xreadgroup_xack(client, stream, n)
        client.delete(stream)
        bench_n = max(n * 5, 10_000)
        results["redis_benchmark_n"] = bench_n
        results["redis_benchmark_c1"] = redis_benchmark(url, stream, bench_n, 1)
        client.delete(stream)
        results["redis_benchmark_c50"] = redis_benchmark(url, stream, bench_n, 50)
        client.delete(stream)
    finally:
        client.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ceiling")
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--result", required=True)
    args = parser.parse_args()
    outcome = measure(os.environ["BENCH_URL"], os.environ["BENCH_KEYS"], args.jobs)
    Path(args.result).write_text(json.dumps(outcome))


if __name__ == "__main__":
    main()
