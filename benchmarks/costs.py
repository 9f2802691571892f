"""Where a drained job's time goes: ``python -m benchmarks.costs``.

One in-process worker (``Worker(...).run(burst=True)``, uvloop when installed) drains
``--jobs`` no-op jobs from a private ``redis-server``, and the run reports per job:

- **worker CPU** (``time.process_time`` over the drain) and wall time;
- **Redis CPU** (``INFO cpu``, the main thread's user + system time over the drain);
- **commands**: ``INFO commandstats`` calls over the drain, reset after the enqueue, per
  job; scripts' own commands are counted there too, beside the ``evalsha``/``fcall``
  that ran them;
- **client round trips** (``roundtrips``: one per command or pipeline sent);
- with ``--py-spy DIR``: the worker's CPU by component and its hottest functions, from
  ``py-spy record`` sampling this process during the drain (``py-spy`` on the PATH).

It measures the lockgate it imports, so another tree is measured by putting its ``src``
first: ``PYTHONPATH=/tmp/v02/src python -m benchmarks.costs`` (run from this repository's
root; the API it uses, ``App``, ``Worker``, ``WorkerConfig`` and ``enqueue_many_async``,
is the same since 0.1). ``--json FILE`` writes the figures for comparisons.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib.metadata
import json
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import redis

from benchmarks import roundtrips, servers

BATCH = 1000
# Components of a sampled stack, by the first frame (from the leaf up) whose file matches.
COMPONENTS = (
    ("lockgate/worker/", "lockgate worker"),
    ("lockgate/backend/", "lockgate backend"),
    ("lockgate/core/", "lockgate core"),
    ("lockgate/api/", "lockgate api"),
    ("lockgate/", "lockgate (other)"),
    ("redis/", "redis-py"),
    ("hiredis", "hiredis"),
    ("msgspec", "msgspec"),
    ("uvloop", "uvloop"),
    ("asyncio/", "asyncio"),
)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.costs", description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--idempotent", action="store_true", help="idempotent=True tasks")
    parser.add_argument(
        "--keys", type=int, default=0, help="fairness keys the jobs are spread over (key_by)"
    )
    parser.add_argument("--runs", type=int, default=1, help="drains, each on a new server")
    parser.add_argument("--py-spy", type=Path, metavar="DIR", help="sample the drain")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the figures")
    parser.add_argument("--enqueue", nargs=2, metavar=("URL", "NAMESPACE"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])


def loop_runner() -> Callable[[Coroutine[Any, Any, Any]], Any]:
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return lambda main: asyncio.Runner(loop_factory=uvloop.new_event_loop).run(main)


def sampler(out: Path) -> subprocess.Popen[bytes]:
    binary = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    argv = [binary, "record", "--pid", str(__import__("os").getpid()), "--rate", "1000",
            "--format", "raw", "--output", str(out), "--nonblocking"]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # attached before the drain starts
    return process


def bench_app(
    url: str, namespace: str, idempotent: bool, keys: int = 0
) -> tuple[Any, Any, list[int]]:
    """The app, its no-op task (keyed by ``n % keys`` when ``keys``), and the count of its
    runs (one item)."""
    from lockgate import App

    app = App(url, namespace=namespace, levels={"critical": 10, "normal": 5, "low": 1})
    done = [0]
    options: dict[str, Any] = {"key_by": lambda n: str(n % keys)} if keys else {}

    @app.task(priority="normal", idempotent=idempotent, **options)
    async def noop(n: int) -> None:
        done[0] += 1

    return app, noop, done


async def enqueue(url: str, namespace: str, jobs: int, idempotent: bool, keys: int = 0) -> None:
    app, noop, _ = bench_app(url, namespace, idempotent, keys)
    for first in range(0, jobs, BATCH):
        end = min(jobs, first + BATCH)
        await app.enqueue_many_async([noop.message(n) for n in range(first, end)])
    await app.aclose()


async def drain_once(url: str, args: argparse.Namespace, spy: Path | None) -> dict[str, Any]:
    from lockgate import Worker, WorkerConfig

    namespace = uuid.uuid4().hex
    # Enqueued by a child process, so that a profiler of this one (py-spy, or valgrind's
    # callgrind, which does not follow children) sees the drain alone.
    argv = [sys.executable, "-m", "benchmarks.costs", "--enqueue", url, namespace]
    argv += ["--jobs", str(args.jobs), "--keys", str(args.keys)]
    argv += ["--idempotent"] if args.idempotent else []
    subprocess.run(argv, check=True)
    app, _, done_box = bench_app(url, namespace, args.idempotent, args.keys)
    client = redis.Redis.from_url(url, client_name=roundtrips.PROBE_NAME)
    memory_queued = int(client.info("memory")["used_memory"])
    client.config_resetstat()
    process = sampler(spy) if spy else None
    cpu, server, trips = time.process_time(), redis_cpu(client), roundtrips.take()
    started = time.perf_counter()
    await Worker(app, WorkerConfig(concurrency=args.concurrency)).run(burst=True)
    wall = time.perf_counter() - started
    cpu, server = time.process_time() - cpu, redis_cpu(client) - server
    trips = roundtrips.take()
    if process is not None:
        process.send_signal(signal.SIGINT)
        process.wait(30)
    stats = client.info("commandstats")
    memory_after = int(client.info("memory")["used_memory"])
    await app.aclose()
    client.close()
    if done_box[0] != args.jobs:
        raise RuntimeError(f"{done_box[0]} of {args.jobs} jobs ran")
    n = args.jobs
    calls = {
        name.removeprefix("cmdstat_"): value["calls"] / n
        for name, value in stats.items()
        if name not in ("cmdstat_info", "cmdstat_config", "cmdstat_client")
    }
    return {
        "jobs_per_s": n / wall,
        "worker_cpu_us": cpu / n * 1e6,
        "redis_cpu_us": server / n * 1e6,
        "round_trips": trips / n,
        "commands": sum(calls.values()),
        "calls": dict(sorted(calls.items(), key=lambda kv: -kv[1])),
        "memory_per_job_left": (memory_after - memory_queued) / n,
    }


def component(frame: str) -> str | None:
    for part, name in COMPONENTS:
        if part in frame:
            return name
    return None


def read_samples(path: Path) -> tuple[collections.Counter[str], collections.Counter[str], int]:
    """(samples by component, by leaf function, total) from a py-spy raw file."""
    parts: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        leaves[frames[-1]] += count
        found = next((c for f in reversed(frames) if (c := component(f))), "other")
        parts[found] += count
    return parts, leaves, total


def report(figures: dict[str, Any], spy: Path | None, cpu_us: float) -> None:
    print(
        f"  {figures['jobs_per_s']:,.0f} jobs/s · worker CPU {figures['worker_cpu_us']:.1f} µs/job"
        f" · Redis CPU {figures['redis_cpu_us']:.1f} µs/job · {figures['commands']:.2f}"
        f" commands/job · {figures['round_trips']:.3f} round trips/job"
        f" · {figures['memory_per_job_left']:.0f} B/job left"
    )
    print("  commands per job: " + ", ".join(
        f"{name} {per:.3f}" for name, per in figures["calls"].items() if per >= 0.001
    ))  # fmt: skip
    if spy is None or not spy.exists():
        return
    parts, leaves, total = read_samples(spy)
    if not total:
        return
    print(f"  worker CPU by component ({total} samples; µs/job at {cpu_us:.1f} µs/job):")
    for name, count in parts.most_common():
        print(f"    {name:<18} {count / total:6.1%} {count / total * cpu_us:6.1f}")
    print("  hottest functions (self):")
    for name, count in leaves.most_common(25):
        print(f"    {count / total:6.1%} {count / total * cpu_us:6.1f}  {name[:110]}")


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.enqueue:  # the child that enqueues for a drain
        loop_runner()(enqueue(*args.enqueue, args.jobs, args.idempotent, args.keys))
        return
    import lockgate

    roundtrips.install()
    version = importlib.metadata.version("lockgate")
    print(f"lockgate {version} from {Path(lockgate.__file__).parent}")
    print(f"  {args.jobs:,} jobs, concurrency {args.concurrency}, idempotent={args.idempotent}")
    runs = []
    for i in range(args.runs):
        spy = args.py_spy / f"run{i + 1}.txt" if args.py_spy else None
        if spy:
            spy.parent.mkdir(parents=True, exist_ok=True)
        with servers.private_server() as server:
            figures = loop_runner()(drain_once(server.url, args, spy))
        report(figures, spy, figures["worker_cpu_us"])
        runs.append(figures)
    if args.json:
        args.json.write_text(json.dumps({"version": version, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
