"""The drain's regression gate: ``python -m benchmarks.gate`` (CI, after the test tiers).

Three rounds, each on a new private ``redis-server``: the bare redis-py loop
(``XREADGROUP COUNT 100`` + ``XACK`` of ``--bare-jobs`` entries, ``ceiling.py``), then
lockgate's drain of ``--jobs`` plain no-op jobs by one in-process worker at concurrency
100 (``costs.py``). lockgate's share of the bare loop is a ratio of two rates measured
side by side, so it holds on a slower or busier machine where a time would not. The gate
fails when the median share falls below :data:`FLOOR` of the share recorded in
``RESULTS.md`` (the line ``<!-- gate-share: ... -->``): a loss like 0.3's, a quarter of
the drain, is caught the day it lands. ``--record`` writes the measured median there
instead (after a change that moves it on purpose, in a quiet sitting).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

import redis

from benchmarks import ceiling, costs, servers

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
FLOOR = 0.6  # of the recorded share
MARK = re.compile(r"<!-- gate-share: ([0-9.]+) -->")
SECTION = "## Regression gate"


def bare_rate(url: str, jobs: int) -> float:
    client = redis.Redis.from_url(url)
    try:
        stream = "gate:bare"
        ceiling.xadd_pipelined(client, stream, jobs)
        return ceiling.xreadgroup_xack(client, stream, jobs)
    finally:
        client.close()


def lockgate_rate(url: str, jobs: int) -> float:
    args = costs.parse(["--jobs", str(jobs), "--concurrency", "100"])
    figures = costs.loop_runner()(costs.drain_once(url, args, None))
    return float(figures["jobs_per_s"])


def recorded(text: str) -> float | None:
    found = MARK.search(text)
    return float(found.group(1)) if found else None


def section(share: float, shares: list[float]) -> str:
    """The RESULTS.md section that records ``share`` (pure)."""
    rounds = ", ".join(f"{s:.2%}" for s in shares)
    return (
        f"{SECTION}\n\n"
        "lockgate's drain (plain no-op jobs, one in-process worker at concurrency 100) as a\n"
        "share of the bare redis-py `XREADGROUP COUNT 100` + `XACK` loop, measured side by\n"
        f"side (`python -m benchmarks.gate --record`): median {share:.2%} (rounds: {rounds}).\n"
        f"CI fails when a run's median falls below {FLOOR:.0%} of it.\n\n"
        f"<!-- gate-share: {share:.4f} -->\n"
    )


def record(share: float, shares: list[float], path: Path = RESULTS) -> None:
    """Write the gate's section with ``share`` as the recorded one (in place, or last)."""
    text = MARK.sub("", path.read_text()).rstrip("\n") + "\n"
    at = text.find(SECTION + "\n")
    if at >= 0:
        end = text.find("\n## ", at + len(SECTION))
        text = text[:at] + (text[end + 1 :] if end >= 0 else "")
    path.write_text(text.rstrip("\n") + "\n\n" + section(share, shares))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gate", description=__doc__)
    parser.add_argument("--jobs", type=int, default=5_000, help="lockgate jobs per round")
    parser.add_argument("--bare-jobs", type=int, default=50_000, help="bare entries per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--record", action="store_true", help="record the median share")
    args = parser.parse_args(argv)
    shares = []
    for i in range(args.rounds):
        with servers.private_server() as server:
            bare = bare_rate(server.url, args.bare_jobs)
        time.sleep(0.2)
        with servers.private_server() as server:
            drained = lockgate_rate(server.url, args.jobs)
        shares.append(drained / bare)
        print(f"round {i + 1}: lockgate {drained:,.0f} jobs/s, bare loop {bare:,.0f} jobs/s,"
              f" share {drained / bare:.2%}")  # fmt: skip
    share = statistics.median(shares)
    if args.record:
        record(share, shares)
        print(f"recorded the median share, {share:.2%}, in {RESULTS}")
        return 0
    reference = recorded(RESULTS.read_text())
    if reference is None:
        print(f"gate FAILED: no recorded share in {RESULTS} (run with --record)")
        return 1
    verdict = "ok" if share >= FLOOR * reference else "FAILED"
    print(f"gate {verdict}: median share {share:.2%}, recorded {reference:.2%}, "
          f"floor {FLOOR:.0%} of it ({FLOOR * reference:.2%})")  # fmt: skip
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
