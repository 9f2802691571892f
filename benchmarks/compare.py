"""Two lockgate trees side by side: ``python -m benchmarks.compare OLD_SRC [NEW_SRC]``.

For a change that must not cost plain jobs anything (issue 27: "drain, enqueue and Redis
bytes per job within 5% of the release before"), each run measures, in a subprocess that
imports the tree's ``src`` first (``PYTHONPATH``), on a private ``redis-server`` started
empty: the enqueue of ``--jobs`` plain no-op jobs (``enqueue_many_async`` in batches of
1,000, from this process: microseconds per job), the server's ``used_memory`` they added
(bytes per queued job), and their drain by one in-process burst worker (jobs/s). The trees
take turns (old, new, old, new, ...) for ``--runs`` runs each, so a machine that slows
down mid-way weighs on both; the report gives each figure's median per tree and new/old.
NEW_SRC defaults to this repository's ``src``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from benchmarks import servers

BATCH = 1000
FIGURES = (
    ("enqueue_us", "enqueue, us per job", "lower"),
    ("bytes_per_job", "Redis bytes per queued job", "lower"),
    ("jobs_per_s", "drain, jobs/s", "higher"),
)


async def measure(url: str, jobs: int, concurrency: int) -> dict[str, float]:
    """One run against the lockgate on ``sys.path`` (the child's side)."""
    import redis

    from lockgate import App, Worker, WorkerConfig

    app = App(url, namespace=uuid.uuid4().hex)
    done = [0]

    @app.task
    async def noop(n: int) -> None:
        done[0] += 1

    client = redis.Redis.from_url(url)
    before = int(client.info("memory")["used_memory"])
    started = time.perf_counter()
    for first in range(0, jobs, BATCH):
        await app.enqueue_many_async([noop.message(n) for n in range(first, first + BATCH)])
    enqueue = time.perf_counter() - started
    queued = int(client.info("memory")["used_memory"])
    started = time.perf_counter()
    await Worker(app, WorkerConfig(concurrency=concurrency)).run(burst=True)
    wall = time.perf_counter() - started
    await app.aclose()
    client.close()
    if done[0] != jobs:
        raise RuntimeError(f"{done[0]} of {jobs} jobs ran")
    return {
        "enqueue_us": enqueue / jobs * 1e6,
        "bytes_per_job": (queued - before) / jobs,
        "jobs_per_s": jobs / wall,
    }


def run_tree(src: Path, jobs: int, concurrency: int) -> dict[str, float]:
    """A run of the tree at ``src`` in a child process, on a server of its own."""
    with servers.private_server() as server:
        env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{Path.cwd()}"}
        argv = [sys.executable, "-m", "benchmarks.compare", "--child", server.url]
        argv += ["--jobs", str(jobs), "--concurrency", str(concurrency)]
        out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
    figures: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__)
    parser.add_argument("old", nargs="?", type=Path)
    parser.add_argument("new", nargs="?", type=Path, default=Path("src"))
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(asyncio.run(measure(args.child, args.jobs, args.concurrency))))
        return
    if args.old is None:
        parser.error("give the old tree's src folder")
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for i in range(args.runs):
        for name in ("old", "new"):
            figures = run_tree(getattr(args, name).resolve(), args.jobs, args.concurrency)
            runs[name].append(figures)
            shown = ", ".join(f"{key} {value:,.1f}" for key, value in figures.items())
            print(f"run {i + 1} {name}: {shown}", flush=True)
    print(f"\nmedians of {args.runs} interleaved runs, {args.jobs:,} plain jobs")
    print(f"| figure | {args.old} | {args.new} | new/old |\n| --- | --: | --: | --: |")
    for key, label, better in FIGURES:
        old = statistics.median(run[key] for run in runs["old"])
        new = statistics.median(run[key] for run in runs["new"])
        print(f"| {label} ({better} is better) | {old:,.1f} | {new:,.1f} | {new / old:.3f} |")


if __name__ == "__main__":
    main()
