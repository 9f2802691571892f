"""The task pages' cost and what a job keeps after it ends: ``python -m benchmarks.history_pages``.

On a private ``redis-server`` started empty: (1) the bytes each record an ended job
leaves cost (``MEMORY USAGE``): a final record in its window's hash, a result record, a
history entry (a full list of 1,000 / 1,000) and a progress key; (2) the p95 of
``--requests`` requests to ``/tasks`` and ``/tasks/<name>`` (Starlette's TestClient, so
the page's own work and its Redis reads, not a network) with ``--tasks`` tasks whose
three history lists are full, on a namespace with no job waiting and on one with
``--jobs`` plain jobs waiting (1,000,000 by default), taking turns. The pages read
bounded windows, so the two should match.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
import uuid
from typing import Any

from benchmarks import servers

BATCH = 1000


def p95(samples: list[float]) -> float:
    """The 95th percentile (nearest rank) in ms."""
    ordered = sorted(samples)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)] * 1000


def page_times(
    apps: dict[str, Any], paths: list[str], requests: int, rounds: int = 5
) -> dict[tuple[str, str], tuple[float, float]]:
    """Per app and path: (median ms, p95 ms) of ``requests`` requests, the apps taking
    turns in ``rounds`` rounds (a machine that slows down mid-way weighs on both)."""
    from starlette.testclient import TestClient

    from lockgate.dashboard import create_app

    samples: dict[tuple[str, str], list[float]] = {}
    clients = {
        name: TestClient(
            create_app(app), base_url="http://127.0.0.1:8700", client=("127.0.0.1", 50000)
        )
        for name, app in apps.items()
    }
    for client in clients.values():
        client.__enter__()
    try:
        for client in clients.values():
            for path in paths:
                assert client.get(path).status_code == 200, path  # warm
        for _ in range(rounds):
            for name, client in clients.items():
                for path in paths:
                    for _ in range(max(1, requests // rounds)):
                        started = time.perf_counter()
                        response = client.get(path)
                        samples.setdefault((name, path), []).append(time.perf_counter() - started)
                        assert response.status_code == 200
    finally:
        for client in clients.values():
            client.__exit__(None, None, None)
    return {key: (statistics.median(found) * 1000, p95(found)) for key, found in samples.items()}


def record_bytes(client: Any, app: Any) -> dict[str, float]:
    """MEMORY USAGE of each record one ended job leaves, in bytes per job."""
    from lockgate.backend.keys import status_shard
    from lockgate.core import history, status
    from lockgate.core.outcome import DONE

    keys = app.keys
    ids = [uuid.uuid4().hex for _ in range(1000)]
    now = time.time()
    entries = [history.pack_end(i, DONE, 1, now - 0.01, now) for i in ids]
    listed = keys.history("bench", "d")
    client.lpush(listed, *entries)
    final = status.final_record("bench", 1, now - 1, now - 0.01, now, DONE)
    # 100 records in one shard's hash, as a window keeps them (lua/_status.lua)
    shard = f"{keys.statuses()}:1:{status_shard(ids[0])}"
    client.hset(shard, mapping={i: final for i in ids[:100]})
    client.pexpire(shard, 600_000)
    result = keys.result(ids[0])
    client.set(result, status.result_record(DONE), px=600_000)
    progress = f"{keys.prefix}:progress:{ids[0]}"
    client.set(progress, b'[0.5,"half way"]', px=600_000)
    return {
        "history entry (list of 1,000)": client.memory_usage(listed, samples=0) / 1000,
        "final record (hash of 100)": client.memory_usage(shard, samples=0) / 100,
        "result record (null result)": float(client.memory_usage(result, samples=0)),
        "progress key (H3)": float(client.memory_usage(progress, samples=0)),
        "history entry, encoded": statistics.mean(len(e) for e in entries),
    }


def fill_history(client: Any, app: Any, tasks: int) -> list[str]:
    """``tasks`` tasks, each with its three lists full (1,000 ends each)."""
    from lockgate.core import history
    from lockgate.core.outcome import DONE, ErrorInfo, Outcome, dead

    now = time.time()
    names = [f"task_{n}" for n in range(tasks)]
    failed = Outcome("retry", error=ErrorInfo("ConnectionError", "SMTP busy " * 10))
    for name in names:
        for code, outcome in (("d", DONE), ("r", failed), ("x", dead("failed", failed.error))):
            entries = [
                history.pack_end(uuid.uuid4().hex, outcome, 1, now - 1 - k / 100, now - k / 100)
                for k in range(history.KEEP)
            ]
            client.rpush(app.keys.history(name, code), *entries)
        client.zadd(app.keys.history_tasks(), {name: 0})
    return names


async def enqueue(app: Any, jobs: int) -> None:
    @app.task(name="waiting")
    def waiting(n: int) -> None: ...

    for first in range(0, jobs, BATCH):
        await app.enqueue_many_async([waiting.message(n) for n in range(first, first + BATCH)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--requests", type=int, default=50)
    options = parser.parse_args()
    import redis

    from lockgate import App

    with servers.private_server() as server:
        client = redis.Redis.from_url(server.url)
        app = App(server.url, namespace=uuid.uuid4().hex)
        for name, size in record_bytes(client, app).items():
            print(f"bytes per job: {name}: {size:.1f}")
        for key in client.scan_iter(match=f"{app.keys.prefix}:*"):
            client.delete(key)  # the pages below see only what fill_history writes
        names = fill_history(client, app, options.tasks)
        empty = App(server.url, namespace=uuid.uuid4().hex)
        fill_history(client, empty, options.tasks)
        asyncio.run(enqueue(app, options.jobs))
        print(f"waiting jobs: {client.xlen(app.keys.stream('default', 'normal')):,}")
        gc.collect()
        paths = ["/tasks", f"/tasks/{names[0]}", f"/tasks/{names[0]}?outcome=dead"]
        times = page_times({"empty": empty, "full": app}, paths, options.requests)
        print(f"| page | empty p50, p95 ms | {options.jobs:,} waiting p50, p95 ms | p95 ratio |")
        print("| --- | --: | --: | --: |")
        for path in paths:
            (e50, e95), (f50, f95) = times["empty", path], times["full", path]
            print(f"| {path} | {e50:.1f}, {e95:.1f} | {f50:.1f}, {f95:.1f} | {f95 / e95:.2f} |")
        empty.close()
        app.close()


if __name__ == "__main__":
    main()
