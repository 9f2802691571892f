"""Partitioned levels on a local 3-primary Redis Cluster: ``python -m benchmarks.partitions``.

For each partition count (1 and 9), on a fresh cluster of three private primaries without
replicas (``tests/clusters.py``): enqueue ``--jobs`` jobs of a trivial async task, the
three levels in turn (critical, normal, low, critical, ...; random job ids), in batches
of 1,000, then drain them with one in-process worker (``Worker(...).run(burst=True)``,
``--concurrency`` 32). Each P runs ``--runs`` times (3), the P's in turn, and the run of
median busiest-node CPU per job is shown. Per node, from its own ``INFO``:

- **command share**: the node's ``calls`` summed over ``INFO commandstats`` from before
  the enqueue to the end of the drain, over every node's (a script's commands count, as
  they cost the node; the benchmark's own ``INFO`` and ``CONFIG RESETSTAT`` do not);
- **Redis CPU per job**: the node's ``used_cpu_sys + used_cpu_user`` delta over the
  enqueue and over the drain, divided by the jobs (all of them, not the node's);
- **memory share**: the node's ``used_memory`` delta over the enqueue (the jobs queued),
  over every node's. The producer's connections are opened before the first reading, and
  each reading waits until memory stops moving, so client buffers are not counted as jobs.

And in the worker, its client round trips over the drain (``benchmarks.roundtrips``).

Then the scaling model: a node saturates when its Redis CPU reaches one second per
second, so the namespace's ceiling is ``1 / (CPU seconds per job on its busiest node)``.
Every process (three Redis nodes, the producer, the worker) shares this machine's cores,
so the measured jobs/s cannot grow with the partitions here; the CPU per job is what
carries over to a cluster whose nodes have cores of their own.

``--smoke``: 2,000 jobs, one run, RESULTS.md left alone. Otherwise the section "Partitions on a
3-primary cluster" of ``benchmarks/RESULTS.md`` is written (replaced when it exists).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
from redis.crc import key_slot

from benchmarks import machine, report, roundtrips
from benchmarks.report import markdown_rows
from lockgate import App, Worker, WorkerConfig
from lockgate.backend.partitions import Layout
from lockgate.ops.inspect import queue_stats

if TYPE_CHECKING:
    from clusters import LocalCluster, Node

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "RESULTS.md"
TESTS = REPO / "tests"
SECTION = "## Partitions on a 3-primary cluster"
PRIMARIES = 3
WIDTH = 90  # RESULTS.md's prose
BATCH = 1_000
LEVELS = ("critical", "normal", "low")
SETTLE_POLL = 0.5
SETTLE_TIMEOUT = 5.0
# The benchmark's own commands, left out of the command counts.
OWN_COMMANDS = ("cmdstat_info", "cmdstat_config|resetstat")


@dataclass(frozen=True)
class Reading:
    """One node's counters at one moment."""

    calls: dict[str, int]
    cpu: float
    memory: int

    @property
    def total_calls(self) -> int:
        return sum(n for name, n in self.calls.items() if name not in OWN_COMMANDS)


@dataclass
class NodeFigures:
    """One node's figures over a run."""

    port: int
    partitions: int
    base: bool
    calls: int = 0
    cpu_enqueue: float = 0.0
    cpu_drain: float = 0.0
    memory: int = 0
    top: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class RunFigures:
    """One partition count's run."""

    partitions: int
    jobs: int
    enqueue_rate: float
    drain_rate: float
    round_trips: int
    nodes: list[NodeFigures]

    @property
    def calls(self) -> int:
        return sum(node.calls for node in self.nodes)

    @property
    def memory(self) -> int:
        return sum(node.memory for node in self.nodes)

    def cpu_per_job(self, node: NodeFigures) -> float:
        """The node's Redis CPU seconds per job of the run, enqueue and drain."""
        return (node.cpu_enqueue + node.cpu_drain) / self.jobs

    @property
    def busiest(self) -> NodeFigures:
        return max(self.nodes, key=self.cpu_per_job)

    @property
    def ceiling(self) -> float:
        """Jobs/s at which the busiest node's Redis would use one core."""
        return 1 / self.cpu_per_job(self.busiest)


def local_cluster() -> LocalCluster:
    """A fresh cluster of :data:`PRIMARIES` primaries and no replicas (not started)."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    from clusters import LocalCluster

    return LocalCluster(primaries=PRIMARIES, replicas=0)


def read(client: redis.Redis) -> Reading:
    calls = {name: int(row["calls"]) for name, row in client.info("commandstats").items()}
    cpu = client.info("cpu")
    memory = int(client.info("memory")["used_memory"])
    return Reading(calls, float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]), memory)


def settle(clients: list[redis.Redis]) -> None:
    """Wait (up to :data:`SETTLE_TIMEOUT`) until no node's ``used_memory`` moved for a
    second: a connection's query buffer (the Functions library loaded at connect, a batch
    of jobs) is only trimmed by the node's cron, about a second later."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    readings: list[list[int]] = []
    while time.monotonic() < deadline:
        readings.append([int(client.info("memory")["used_memory"]) for client in clients])
        if len(readings) >= 3 and readings[-1] == readings[-2] == readings[-3]:
            return
        time.sleep(SETTLE_POLL)


@contextmanager
def node_clients(nodes: list[Node]) -> Iterator[list[redis.Redis]]:
    """One plain client per node, open for the whole run: a connection opened for each
    reading would show in the node's ``used_memory`` as much as a few hundred jobs."""
    clients = [node.client() for node in nodes]
    try:
        yield clients
    finally:
        for client in clients:
            client.close()


def placement(cluster: LocalCluster, layout: Layout) -> dict[int, tuple[int, bool]]:
    """Per primary's port: how many partitions it holds, and whether it holds the
    namespace's own tag (registry, partition record, wake-up lists)."""
    client = cluster.nodes[0].client()
    try:
        ranges = client.execute_command("CLUSTER", "SLOTS")
    finally:
        client.close()

    def owner(key: str) -> int:
        slot = key_slot(key.encode())
        return next(int(r[2][1]) for r in ranges if int(r[0]) <= slot <= int(r[1]))

    held = [owner(keys.prefix) for keys in layout.parts]
    base = owner(layout.base.prefix)
    return {node.port: (held.count(node.port), node.port == base) for node in cluster.nodes}


async def measure(partitions: int, jobs: int, concurrency: int, idempotent: bool) -> RunFigures:
    """Enqueue and drain ``jobs`` jobs with ``partitions`` partitions on a fresh cluster."""
    with local_cluster() as cluster, node_clients(cluster.nodes) as clients:
        app = App(cluster.seeds, namespace=uuid.uuid4().hex, partitions=partitions)
        done = 0

        @app.task(idempotent=idempotent)
        async def noop(n: int) -> None:
            nonlocal done
            done += 1

        await queue_stats(app)  # the producer's connections, opened before the readings
        settle(clients)
        for client in clients:
            client.config_resetstat()
        start = [read(client) for client in clients]
        started = time.monotonic()
        for first in range(0, jobs, BATCH):
            end = min(jobs, first + BATCH)
            batch = [noop.message(n, priority=LEVELS[n % 3]) for n in range(first, end)]
            await app.enqueue_many_async(batch)
        enqueue_rate = jobs / (time.monotonic() - started)
        queued = [read(client) for client in clients]
        settle(clients)
        ready = [read(client) for client in clients]
        started, _ = time.monotonic(), roundtrips.take()
        await Worker(app, WorkerConfig(concurrency=concurrency)).run(burst=True)
        drain_rate = jobs / (time.monotonic() - started)
        trips = roundtrips.take()
        drained = [read(client) for client in clients]
        await app.aclose()
        if done != jobs:
            raise RuntimeError(f"P={partitions}: {done} of {jobs} jobs ran")
        places = placement(cluster, Layout(app.namespace, partitions))
        nodes = []
        readings = zip(cluster.nodes, start, queued, ready, drained, strict=True)
        for node, a, b, r, c in readings:
            held, base = places[node.port]
            own = [kv for kv in c.calls.items() if kv[0] not in OWN_COMMANDS]
            top = sorted(own, key=lambda kv: -kv[1])
            nodes.append(NodeFigures(
                node.port, held, base, calls=c.total_calls,
                cpu_enqueue=b.cpu - a.cpu, cpu_drain=c.cpu - r.cpu, memory=r.memory - a.memory,
                top=[(name.removeprefix("cmdstat_"), n) for name, n in top[:4]],
            ))  # fmt: skip
    return RunFigures(partitions, jobs, enqueue_rate, drain_rate, trips, nodes)


def share(part: float, whole: float) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f}"


RUN_HEADERS = (
    "P", "enqueue jobs/s", "drain jobs/s", "drain round trips/job", "commands/job",
    "Redis CPU µs/job, all nodes",
    "busiest node µs/job", "ceiling jobs/s (1 / busiest)",
)  # fmt: skip
NODE_HEADERS = (
    "P", "node", "partitions held", "namespace tag", "command share",
    "CPU µs/job enqueue", "CPU µs/job drain", "memory share",
)  # fmt: skip


def run_rows(runs: list[RunFigures]) -> list[list[str]]:
    return [
        [
            str(run.partitions), f"{run.enqueue_rate:,.0f}", f"{run.drain_rate:,.0f}",
            f"{run.round_trips / run.jobs:.2f}", f"{run.calls / run.jobs:.1f}",
            us(sum(map(run.cpu_per_job, run.nodes))), us(run.cpu_per_job(run.busiest)),
            f"{run.ceiling:,.0f}",
        ]
        for run in runs
    ]  # fmt: skip


def node_rows(runs: list[RunFigures]) -> list[list[str]]:
    return [
        [
            str(run.partitions), f":{node.port}", str(node.partitions),
            "yes" if node.base else "", share(node.calls, run.calls),
            us(node.cpu_enqueue / run.jobs), us(node.cpu_drain / run.jobs),
            share(node.memory, run.memory),
        ]
        for run in runs
        for node in run.nodes
    ]  # fmt: skip


def model(runs: list[RunFigures]) -> list[str]:
    """The scaling model's lines, from the runs' CPU per job."""
    lines: list[str] = []
    one = next((r for r in runs if r.partitions == 1), None)
    many = next((r for r in runs if r.partitions >= PRIMARIES), None)
    if one is not None:
        lines.append(
            f"- **P=1**: each job costs {us(one.cpu_per_job(one.busiest))} µs of Redis CPU "
            f"on the one primary holding the namespace: a ceiling of about "
            f"{one.ceiling:,.0f} jobs/s, whatever the cluster's size. Were partitions free, "
            f"{PRIMARIES} primaries would carry {PRIMARIES} x that: "
            f"{PRIMARIES * one.ceiling:,.0f} jobs/s."
        )
    if many is not None:
        cost = many.cpu_per_job(many.busiest)
        lines.append(
            f"- **P={many.partitions}**: the busiest primary holds "
            f"{many.busiest.partitions} of the {many.partitions} partitions (as large a "
            f"share of the jobs) and spends {us(cost)} µs per job of the namespace, so "
            f"about {us(cost * PRIMARIES)} µs per job of its own: a per-shard ceiling of "
            f"{1 / (cost * PRIMARIES):,.0f} jobs/s, and a namespace ceiling of {PRIMARIES} x "
            f"that = {many.ceiling:,.0f} jobs/s. It grows with the primaries as long as "
            f"P >= primaries and the partitions spread evenly (P a multiple of the primaries)."
        )
    if one is not None and many is not None:
        cpu = sum(map(many.cpu_per_job, many.nodes)) / sum(map(one.cpu_per_job, one.nodes))
        lines.append(
            f"- What partitions cost: P={many.partitions} spends {cpu:.2f}x the Redis CPU per "
            f"job of P=1, summed over the nodes, for {many.calls / one.calls:.2f}x the "
            f"commands and {many.round_trips / max(1, one.round_trips):.1f}x the worker's "
            f"round trips. A worker counts the jobs waiting in every partition (one script "
            f"call per partition: due delayed jobs, paused queues, each stream's waiting "
            f"count) at most every 10 ms while busy, and plans its reads from that count "
            f"(`policy.spread_read`: a partition gives all it can of a level before the next "
            f"in turn), so a read usually calls one partition; the settles split by node. "
            f"The counts are paid per read, not per job, so they weigh most when reads are "
            f"small, as with the one slow worker here. So spreading the namespace over "
            f"{PRIMARIES} primaries multiplied its ceiling by "
            f"{many.ceiling / one.ceiling:.2f}, where free partitions would give {PRIMARIES}."
        )
    return lines


def details(runs: list[RunFigures]) -> list[str]:
    """Each node's most frequent commands (scripts' commands included)."""
    return [
        f"P={run.partitions} :{node.port}: " + ", ".join(f"{name} {n:,}" for name, n in node.top)
        for run in runs
        for node in run.nodes
    ]


def wrapped(text: str) -> str:
    """A paragraph or a bullet, wrapped for RESULTS.md."""
    indent = "  " if text.startswith("- ") else ""
    return textwrap.fill(text, WIDTH, subsequent_indent=indent, break_on_hyphens=False)


def section(
    runs: list[RunFigures], ranges: list[str], settings: argparse.Namespace, about: dict[str, Any]
) -> str:
    """The RESULTS.md section, heading included: ``runs`` shown, ``ranges`` of all runs."""
    load = " / ".join(str(x) for x in about["load_average"])
    jobs = runs[0].jobs
    intro = (
        f"`python -m benchmarks.partitions --jobs {jobs} --runs {settings.runs}` "
        f"({about['date']}, lockgate "
        f"{about['lockgate']}, {about['nproc']} cores, load average at start {load}). "
        f"For each P, a fresh local cluster of {PRIMARIES} primaries without replicas "
        f"(`tests/clusters.py`, {about['redis']}); {jobs:,} jobs of a trivial async task, "
        f"{'idempotent' if settings.idempotent else 'plain'}, the three levels in turn, "
        f"enqueued in batches of {BATCH:,}, then drained by one in-process worker at "
        f"concurrency {settings.concurrency}. Every figure is from each node's own `INFO` "
        f"(the module docstring of `benchmarks/partitions.py` says how). Each P ran "
        f"{settings.runs} time(s), in turn with the other; shown is its run of median "
        f"busiest-node CPU per job."
    )
    notes = (
        "Command share: the node's `INFO commandstats` calls (scripts' commands included) "
        "over the enqueue and the drain. CPU per job: the node's `used_cpu_sys + "
        "used_cpu_user` over all the run's jobs; a node holding no partition shows what an "
        "idle cluster node costs. Memory share: of the `used_memory` growth while the jobs "
        "were queued. Commands/job and CPU µs/job in the first table are summed over the "
        "nodes; round trips are the worker's client's (`benchmarks/roundtrips.py`), to "
        "every node."
    )
    honest = (
        "This machine cannot show throughput growing with the cluster: the three Redis "
        "nodes, the producer and the worker share its 2 cores (with other work alongside: "
        "see the load average), so more nodes only split the same CPU, and one Python "
        "worker process drains far below any node's ceiling. The jobs/s above are what "
        "that worker gets here, not the cluster's capacity. The CPU per job is what "
        "carries over to nodes with cores of their own, but it is on the high side: it "
        "was measured in a VM under contention, and it depends on how many jobs each "
        "script call and round trip carries, which is few with a worker this slow (the "
        "single-server drain above runs several times faster)."
    )
    return "\n".join([
        SECTION, "", wrapped(intro), "",
        markdown_rows(RUN_HEADERS, run_rows(runs)), "",
        markdown_rows(NODE_HEADERS, node_rows(runs)), "",
        *(f"- {line}" for line in ranges), "",
        wrapped(notes), "",
        wrapped(
            "Scaling model: a primary saturates when its Redis uses one core, so a namespace "
            "tops out at `1 / (Redis CPU seconds per job on its busiest node)`."
        ),
        "",
        *map(wrapped, model(runs)), "",
        wrapped(honest), "",
    ])  # fmt: skip


def write_section(text: str, path: Path = RESULTS) -> None:
    """Put ``text`` in place of the file's partitions section, or after its end."""
    report.replace_section(path, SECTION, text)


@contextmanager
def timed(label: str) -> Iterator[None]:
    started = time.monotonic()
    yield
    print(f"{label} in {time.monotonic() - started:.1f} s", flush=True)


def redis_version() -> str:
    out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    version = next((w.split("=", 1)[1] for w in out.split() if w.startswith("v=")), "?")
    return f"redis-server {version}"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.partitions",
        description="Drain with 1 and 9 partitions on a local 3-primary Redis Cluster.",
    )
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per run (20000)")
    parser.add_argument("--partitions", default="1,9", help="partition counts (1,9)")
    parser.add_argument("--runs", type=int, default=3, help="runs per P; the median shown (3)")
    parser.add_argument("--concurrency", type=int, default=32, help="worker concurrency (32)")
    parser.add_argument("--idempotent", action="store_true", help="idempotent=True tasks")
    parser.add_argument("--smoke", action="store_true", help="2,000 jobs, RESULTS.md untouched")
    parser.add_argument("--no-write", action="store_true", help="leave RESULTS.md untouched")
    settings = parser.parse_args(argv)
    if settings.smoke:
        settings.jobs, settings.runs = min(settings.jobs, 2_000), 1
    settings.counts = [int(p) for p in settings.partitions.split(",")]
    return settings


def median_run(runs: list[RunFigures]) -> RunFigures:
    """The run whose busiest node's CPU per job is the median (one run's figures are shown
    together, not medians of each figure from different clusters)."""
    ranked = sorted(runs, key=lambda run: run.cpu_per_job(run.busiest))
    return ranked[(len(ranked) - 1) // 2]


def spread(runs: dict[int, list[RunFigures]]) -> list[str]:
    """Per P, the range over its runs of the drain rate and the ceiling."""
    return [
        f"P={p}, {len(found)} runs: drain {min(r.drain_rate for r in found):,.0f} to "
        f"{max(r.drain_rate for r in found):,.0f} jobs/s, ceiling "
        f"{min(r.ceiling for r in found):,.0f} to {max(r.ceiling for r in found):,.0f} jobs/s"
        for p, found in runs.items()
    ]


def main(argv: list[str] | None = None) -> None:
    settings = parse(argv)
    roundtrips.install()
    about = {**machine.describe(), "redis": redis_version()}
    runs: dict[int, list[RunFigures]] = {p: [] for p in settings.counts}
    for n in range(settings.runs):  # in turn, so a busy spell on the machine hits each P
        for partitions in settings.counts:
            with timed(f"run {n + 1}, P={partitions}: {settings.jobs:,} jobs"):
                runs[partitions].append(asyncio.run(measure(
                    partitions, settings.jobs, settings.concurrency, settings.idempotent
                )))  # fmt: skip
    shown = [median_run(found) for found in runs.values()]
    lines = [
        markdown_rows(RUN_HEADERS, run_rows(shown)), "",
        markdown_rows(NODE_HEADERS, node_rows(shown)), "",
        *model(shown), "", *spread(runs), "", *details(shown),
    ]  # fmt: skip
    print("\n" + "\n".join(lines))
    if not (settings.smoke or settings.no_write):
        write_section(section(shown, spread(runs), settings, about))
        print(f"\nwrote {SECTION[3:]!r} in {os.path.relpath(RESULTS)}")


if __name__ == "__main__":
    main()
