"""Fair shares inside a level: ``python -m benchmarks.fairness``.

On a private ``redis-server``, with everything queued before one in-process worker
starts (concurrency ``--concurrency``, 8 by default):

- **starvation**: one tenant's ``--flood`` low jobs (50,000), then four other tenants'
  ``--few`` (100) each; the number of starts until the four others' jobs have all started,
  with ``key_by="tenant"`` and without it (lockgate 0.3's behaviour: they wait behind the
  flood);
- **level shares**: keyed floods on all three levels (10:5:1); the share of each level in
  the first ``--share-starts`` starts.

The drain with keys against without is ``python -m benchmarks.costs --keys N`` (same
harness as the other drain figures). ``--json FILE`` writes the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks import servers
from benchmarks.costs import loop_runner

LEVELS = {"critical": 10, "normal": 5, "low": 1}
BATCH = 1000


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fairness", description=__doc__)
    parser.add_argument("--flood", type=int, default=50_000)
    parser.add_argument("--few", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--share-starts", type=int, default=3_000)
    parser.add_argument("--json", type=Path, metavar="FILE")
    return parser.parse_args(argv)


async def starvation(url: str, args: argparse.Namespace, keyed: bool) -> dict[str, Any]:
    """Starts until the few tenants' jobs all started (and the wall time to there)."""
    from lockgate import App, Worker, WorkerConfig

    app = App(url, namespace=uuid.uuid4().hex, levels=LEVELS)
    others = 4 * args.few
    started: list[str] = []
    finished = asyncio.Event()
    seen = [0]
    options: dict[str, Any] = {"key_by": "tenant"} if keyed else {}

    @app.task(priority="low", **options)
    async def report(tenant: str, n: int) -> None:
        started.append(tenant)
        if tenant != "big":
            seen[0] += 1
            if seen[0] == others:
                finished.set()

    messages = [report.message("big", n) for n in range(args.flood)]
    messages += [report.message(f"t{t}", n) for n in range(args.few) for t in range(4)]
    for first in range(0, len(messages), BATCH):
        await app.enqueue_many_async(messages[first : first + BATCH])
    worker = Worker(app, WorkerConfig(concurrency=args.concurrency, grace_period=30))
    began = time.perf_counter()
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(finished.wait(), timeout=600)
    wall = time.perf_counter() - began
    worker.request_stop()
    await task
    await app.aclose()
    last = max(i for i, tenant in enumerate(started) if tenant != "big") + 1
    return {"keyed": keyed, "starts_until_others_started": last, "seconds": wall}


async def shares(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Each level's share of the first starts, every level busy with keyed floods."""
    from lockgate import App, Worker, WorkerConfig

    app = App(url, namespace=uuid.uuid4().hex, levels=LEVELS)
    started: list[str] = []
    enough = asyncio.Event()
    tasks = {}
    for level in LEVELS:

        async def run(tenant: str, n: int, level: str = level) -> None:
            started.append(level)
            if len(started) >= args.share_starts:
                enough.set()

        tasks[level] = app.task(name=f"work_{level}", priority=level, key_by="tenant")(run)
    per_level = args.share_starts * 2
    for level, task in tasks.items():
        messages = [task.message(f"{level}{n % 10}", n) for n in range(per_level)]
        for first in range(0, len(messages), BATCH):
            await app.enqueue_many_async(messages[first : first + BATCH])
    worker = Worker(app, WorkerConfig(concurrency=args.concurrency, grace_period=30))
    run_task = asyncio.create_task(worker.run())
    await asyncio.wait_for(enough.wait(), timeout=600)
    worker.request_stop()
    await run_task
    await app.aclose()
    counts = Counter(started[: args.share_starts])
    total = sum(LEVELS.values())
    return {
        level: {
            "share": counts[level] / args.share_starts,
            "weight_share": weight / total,
        }
        for level, weight in LEVELS.items()
    }


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    figures: dict[str, Any] = {"starvation": [], "shares": None}
    for keyed in (True, False):
        with servers.private_server() as server:
            row = loop_runner()(starvation(server.url, args, keyed))
        figures["starvation"].append(row)
        print(
            f"  {'keyed' if keyed else 'unkeyed'}: the others' {4 * args.few} jobs had all "
            f"started after {row['starts_until_others_started']:,} starts "
            f"({row['seconds']:.2f} s; {args.flood:,} + {4 * args.few} queued, "
            f"concurrency {args.concurrency})"
        )
    with servers.private_server() as server:
        figures["shares"] = loop_runner()(shares(server.url, args))
    for level, row in figures["shares"].items():
        share, weight = row["share"], row["weight_share"]
        print(f"  {level}: {share:.1%} of the first starts (its weight's share: {weight:.1%})")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
