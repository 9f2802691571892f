"""Workflows against plain jobs: ``python -m benchmarks.flows``.

Every run is a child process of its own (``python -m benchmarks.flows --child ...``) with
``PYTHONPATH`` on the ``src`` of one revision, exported by ``git archive`` into a temporary
directory (so edits to this checkout while the benchmark runs do not leak into it), on a
private ``redis-server`` of its own (``servers.private_server``), with one in-process
worker (uvloop when installed); about 2 minutes on 2 cores:

- **group with a callback**: ``group(*members).then(callback)`` of ``--members`` (10,000)
  no-op jobs (normal level, plain tasks) with a worker (concurrency ``--concurrency``,
  100, as ``costs.drain_once``) already running and warmed by one job; from the
  ``enqueue_flow_async`` call (included) to the end of the callback, which reads its
  parents' results (``parent_results()``, 10,000 of them). Against the same messages
  without a flow: ``enqueue_many_async`` (included) to the end of the last of them (each
  job counts itself; the time is taken inside the task, in both cases). Over the same
  span, per member: the child's CPU (producer and worker), Redis's CPU and the commands
  it ran (``INFO commandstats``, scripts' own included). The two alternate, ``--runs``
  (3) runs each; medians.
- **chain**: ``chain`` of ``--steps`` (100) no-op steps, from ``enqueue_flow_async``
  (included) to the last step's end, divided by the steps: the time per hop. Against a
  loop of ``--steps`` single ``enqueue_async`` calls of the same task, each awaiting the
  job's end (inside the task) before the next; alternated, ``--runs`` runs each; medians.
- **plain jobs, this revision against the one before workflows** (``--against``,
  ``1cc452f``): per revision, in turn (A B A B A B), ``--runs`` runs of: ``--enqueue-jobs``
  (20,000) plain no-op jobs enqueued one call each through the sync API (jobs/s, the
  producer's and Redis's CPU per job), the
  Redis bytes per queued job (``used_memory`` less the clients' buffers, after them minus
  before, 2.5 s after each so that Redis has shrunk its query buffers; a first job loads the
  scripts before), over the jobs, then a drain of ``--drain-jobs`` (20,000) plain
  no-op jobs at concurrency ``--concurrency`` (``costs.drain_once``, as ``python -m
  benchmarks.costs`` and the regression gate measure it: worker CPU, Redis CPU, commands
  per job too). Medians and the % difference.

``--head`` (``HEAD``) is the revision measured as "this one". Output: the figures on the
terminal; ``--json FILE`` writes them (every run); ``--markdown`` prints the RESULTS.md
section; ``--write`` replaces the section "Workflows (benchmarks.flows)" of
``benchmarks/RESULTS.md``; ``--render FILE`` makes the section from a ``--json`` file
instead of running. ``--py-spy DIR`` samples each group child (``py-spy record``,
one raw file per run) to see where a slow flow spends its time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from benchmarks import machine, report, roundtrips, servers
from benchmarks.costs import drain_once, loop_runner, redis_cpu

LEVELS = {"critical": 10, "normal": 5, "low": 1}
REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "RESULTS.md"
SECTION = "## Workflows (benchmarks.flows)"
WIDTH = 90  # RESULTS.md's prose
MARK = "FLOWS-JSON "  # the line of a child's output that carries its figures
CHILD_TIMEOUT = 900.0
WAIT_TIMEOUT = 600.0
CLIENT_CRON_SECONDS = 2.5
SLOW_FLOW = 0.30  # a flow this much slower than plain is worth a look
PLAIN_FIGURES = ("enqueue_one_per_s", "enqueue_cpu_us", "enqueue_redis_cpu_us", "bytes_per_job",
                 "jobs_per_s", "worker_cpu_us", "redis_cpu_us", "commands",
                 "round_trips")  # fmt: skip
GROUP_FIGURES = ("seconds", "enqueue_seconds", "cpu_us", "redis_cpu_us", "commands")
IGNORED_COMMANDS = ("cmdstat_info", "cmdstat_config", "cmdstat_client")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.flows",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--members", type=int, default=10_000, help="jobs of the group")
    parser.add_argument("--steps", type=int, default=100, help="steps of the chain")
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3, help="runs of each side, alternated")
    parser.add_argument("--enqueue-jobs", type=int, default=20_000)
    parser.add_argument("--drain-jobs", type=int, default=20_000)
    parser.add_argument("--head", default="HEAD", help="the revision measured (git)")
    parser.add_argument("--against", default="1cc452f", help="the revision before flows")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the figures")
    parser.add_argument("--markdown", action="store_true", help="print the RESULTS.md section")
    parser.add_argument("--write", action="store_true", help="rewrite RESULTS.md's section")
    parser.add_argument("--py-spy", type=Path, metavar="DIR", help="sample the group runs")
    parser.add_argument(
        "--render", type=Path, metavar="FILE", help="no runs: the section from a --json file"
    )
    parser.add_argument(
        "--child",
        choices=("group-flow", "group-plain", "chain-flow", "chain-loop", "plain"),
        help=argparse.SUPPRESS,
    )
    return parser.parse_args(argv)


# -- the children: one run each ---------------------------------------------------------


class Box:
    """What the tasks of a run record, read by the run that waits on them."""

    def __init__(self) -> None:
        self.ran = 0
        self.target = -1
        self.parents = 0
        self.ended = 0.0
        self.done = asyncio.Event()
        self.warm = asyncio.Event()


def flow_app(url: str, box: Box, plain_target: int) -> tuple[Any, Any, Any, Any]:
    """The app, its no-op task, the group's callback and the warm-up task. The no-op
    task ends a run when its ``plain_target``-th run ends, or when its ``n`` is
    ``box.target``."""
    from lockgate import App, current_job

    app = App(url, namespace=uuid.uuid4().hex, levels=LEVELS)

    @app.task(priority="normal")
    async def noop(n: int) -> None:
        box.ran += 1
        if box.ran == plain_target or n == box.target:
            box.ended = time.perf_counter()
            box.done.set()

    @app.task(priority="normal")
    async def callback() -> None:
        box.parents = len(current_job().parent_results())
        box.ended = time.perf_counter()
        box.done.set()

    @app.task(priority="normal")
    async def warm() -> None:
        box.warm.set()

    return app, noop, callback, warm


@contextmanager
def sampled(out: Path | None) -> Iterator[None]:
    """``py-spy record`` of this process into ``out`` while the block runs (when given)."""
    if out is None:
        yield
        return
    binary = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    argv = [binary, "record", "--pid", str(os.getpid()), "--rate", "500", "--format", "raw",
            "--output", str(out), "--nonblocking"]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # attached before the run starts
    try:
        yield
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(30)


async def group_run(url: str, args: argparse.Namespace, flow: bool) -> dict[str, Any]:
    """One run of the group with a callback (``flow``) or of the same jobs without."""
    from lockgate import Worker, WorkerConfig, group

    box = Box()
    n = args.members
    app, noop, callback, warm = flow_app(url, box, 0 if flow else n)
    worker = Worker(app, WorkerConfig(concurrency=args.concurrency, grace_period=30))
    running = asyncio.create_task(worker.run())
    await warm.enqueue_async()
    await asyncio.wait_for(box.warm.wait(), timeout=60)
    messages = [noop.message(i) for i in range(n)]
    spy = Path(args.py_spy) if args.py_spy else None
    client = redis.Redis.from_url(url, client_name=roundtrips.PROBE_NAME)
    client.config_resetstat()
    with sampled(spy):
        cpu, server = time.process_time(), redis_cpu(client)
        began = time.perf_counter()
        if flow:
            await app.enqueue_flow_async(group(*messages).then(callback.message()))
        else:
            await app.enqueue_many_async(messages)
        enqueued = time.perf_counter()
        await asyncio.wait_for(box.done.wait(), timeout=WAIT_TIMEOUT)
        cpu, server = time.process_time() - cpu, redis_cpu(client) - server
    commands = commands_run(client)
    client.close()
    worker.request_stop()
    await running
    await app.aclose()
    if box.ran != n or (flow and box.parents != n):
        raise RuntimeError(f"{box.ran} of {n} jobs ran, the callback saw {box.parents}")
    seconds = box.ended - began
    return {
        "seconds": seconds,
        "enqueue_seconds": enqueued - began,
        "jobs_per_s": n / seconds,
        "cpu_us": cpu / n * 1e6,
        "redis_cpu_us": server / n * 1e6,
        "commands": commands / n,
    }


def commands_run(client: redis.Redis) -> int:
    """Commands Redis ran since the last ``CONFIG RESETSTAT`` (scripts' own included), the
    probe's ``INFO``, ``CONFIG`` and ``CLIENT`` left out."""
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k not in IGNORED_COMMANDS)


async def chain_run(url: str, args: argparse.Namespace, flow: bool) -> dict[str, Any]:
    """One run of the chain (``flow``) or of the loop of single enqueues and waits."""
    from lockgate import Worker, WorkerConfig, chain

    box = Box()
    steps = args.steps
    app, noop, _, warm = flow_app(url, box, 0)
    worker = Worker(app, WorkerConfig(concurrency=args.concurrency, grace_period=30))
    running = asyncio.create_task(worker.run())
    await warm.enqueue_async()
    await asyncio.wait_for(box.warm.wait(), timeout=60)
    began = time.perf_counter()
    if flow:
        box.target = steps - 1
        await app.enqueue_flow_async(chain(*(noop.message(i) for i in range(steps))))
        await asyncio.wait_for(box.done.wait(), timeout=WAIT_TIMEOUT)
    else:
        for i in range(steps):
            box.target = i
            box.done.clear()
            await noop.enqueue_async(i)
            await asyncio.wait_for(box.done.wait(), timeout=WAIT_TIMEOUT)
    seconds = box.ended - began
    worker.request_stop()
    await running
    await app.aclose()
    if box.ran != steps:
        raise RuntimeError(f"{box.ran} of {steps} steps ran")
    return {"seconds": seconds, "ms_per_hop": seconds / steps * 1000}


def enqueue_one_by_one(url: str, jobs: int) -> dict[str, Any]:
    """``jobs`` sync enqueue calls, one job each: jobs/s, and Redis bytes per queued job
    (``settled_memory`` after them minus before; one job first, so that the scripts are
    loaded)."""
    from lockgate import App

    app = App(url, namespace=uuid.uuid4().hex, levels=LEVELS)

    @app.task(priority="normal")
    async def noop(n: int) -> None: ...

    client = redis.Redis.from_url(url, client_name=roundtrips.PROBE_NAME)
    noop.enqueue(-1)
    before = settled_memory(client)
    cpu, server = time.process_time(), redis_cpu(client)
    began = time.perf_counter()
    for n in range(jobs):
        noop.enqueue(n)
    seconds = time.perf_counter() - began
    cpu, server = time.process_time() - cpu, redis_cpu(client) - server
    after = settled_memory(client)
    app.close()
    client.close()
    return {
        "enqueue_one_per_s": jobs / seconds,
        "enqueue_cpu_us": cpu / jobs * 1e6,
        "enqueue_redis_cpu_us": server / jobs * 1e6,
        "bytes_per_job": (after - before) / jobs,
    }


def settled_memory(client: redis.Redis) -> int:
    """``used_memory`` less the clients' buffers (``mem_clients_normal``), once Redis's
    client cron has shrunk the query buffers the scripts' loading grew (within 2 s) and
    two readings 200 ms apart agree."""
    time.sleep(CLIENT_CRON_SECONDS)
    last = -1
    for _ in range(20):
        info = client.info("memory")
        now = int(info["used_memory"]) - int(info.get("mem_clients_normal", 0))
        if now == last:
            return now
        last = now
        time.sleep(0.2)
    return last


def plain_run(args: argparse.Namespace) -> dict[str, Any]:
    """One run of the plain-jobs figures of the revision this process imports."""
    figures: dict[str, Any] = {}
    with servers.private_server() as server:
        figures.update(enqueue_one_by_one(server.url, args.enqueue_jobs))
    settings = argparse.Namespace(
        jobs=args.drain_jobs, concurrency=args.concurrency, idempotent=False, keys=0
    )
    roundtrips.install()
    with servers.private_server() as server:
        drained = loop_runner()(drain_once(server.url, settings, None))
    figures.update({key: drained[key] for key in PLAIN_FIGURES if key in drained})
    return figures


def child(args: argparse.Namespace) -> None:
    """Run one measurement in this process and print its figures on a marked line."""
    import lockgate

    kind = args.child
    figures: dict[str, Any]
    if kind == "plain":
        figures = plain_run(args)
    else:
        with servers.private_server() as server:
            run: Callable[..., Any] = group_run if kind.startswith("group") else chain_run
            figures = loop_runner()(run(server.url, args, kind.endswith("flow")))
    figures["lockgate"] = str(Path(lockgate.__file__).parent)
    print(MARK + json.dumps(figures), flush=True)


# -- the parent: revisions, children, interleaving -------------------------------------


def resolve(revision: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", f"{revision}^{{commit}}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def export(commit: str, into: Path) -> Path:
    """The ``src`` of ``commit`` (``git archive``) under ``into``; its path."""
    target = into / commit[:12]
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", commit, "src"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    target.mkdir(parents=True)
    tar = target / "src.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as opened:
        opened.extractall(target, filter="data")
    tar.unlink()
    return target / "src"


def measure(kind: str, src: Path, args: argparse.Namespace, spy: Path | None = None) -> Any:
    """One child run of ``kind`` with ``src`` first on its path; its figures."""
    argv = [sys.executable, "-m", "benchmarks.flows", "--child", kind]
    for option in ("members", "steps", "concurrency", "enqueue_jobs", "drain_jobs"):
        argv += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
    if spy is not None:
        argv += ["--py-spy", str(spy)]
    env = {**os.environ, "PYTHONPATH": str(src)}
    env.pop("BENCH_COUNT_ROUND_TRIPS", None)
    done = subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT,
        check=False,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{kind} child exit {done.returncode}:\n{done.stderr[-3000:]}")
    figures = json.loads(lines[-1][len(MARK) :])
    if not str(figures["lockgate"]).startswith(str(src)):
        raise RuntimeError(f"the {kind} child imported lockgate from {figures['lockgate']}")
    return figures


def median_of(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(run[key] for run in runs))


def pairs(
    args: argparse.Namespace,
    sides: tuple[tuple[str, str, Path], tuple[str, str, Path]],
    show: Callable[[str, dict[str, Any]], str],
    spy: Path | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """``--runs`` runs of two (name, kind, src) sides, alternated: A B A B ..."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in sides}
    for i in range(args.runs):
        for name, kind, src in sides:
            out = spy / f"{name}-{i + 1}.txt" if spy and kind.startswith("group") else None
            figures = measure(kind, src, args, out)
            runs[name].append(figures)
            print(f"  run {i + 1} {name}: {show(name, figures)}", flush=True)
    return runs


def change(new: float, old: float) -> float:
    return (new / old - 1) * 100


def overlap(a: list[dict[str, Any]], b: list[dict[str, Any]], key: str) -> bool:
    """Whether the runs of two sides overlap in ``key`` (their ranges meet)."""
    first, second = [run[key] for run in a], [run[key] for run in b]
    return bool(min(first) <= max(second) and min(second) <= max(first))


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    about = machine.describe()
    head, against = resolve(args.head), resolve(args.against)
    figures: dict[str, Any] = {
        "settings": {k: v for k, v in vars(args).items() if isinstance(v, int | float)},
        "machine": about,
        "head": {"revision": args.head, "commit": head},
        "against": {"revision": args.against, "commit": against},
    }
    if args.py_spy:
        args.py_spy.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lockgate-flows-") as temp:
        new = export(head, Path(temp))
        old = export(against, Path(temp)) if against != head else new
        print(f"{args.head} = {head[:12]}, {args.against} = {against[:12]}", flush=True)

        print(f"group of {args.members:,} with a callback against the same jobs plain:")
        group_runs = pairs(
            args,
            (("flow", "group-flow", new), ("plain", "group-plain", new)),
            lambda name, f: (f"{f['seconds']:.3f} s ({f['jobs_per_s']:,.0f} jobs/s; enqueue "
                             f"call {f['enqueue_seconds']:.3f} s; CPU {f['cpu_us']:.1f} µs/job, "
                             f"Redis CPU {f['redis_cpu_us']:.1f} µs/job, "
                             f"{f['commands']:.2f} commands/job)"),
            args.py_spy,
        )  # fmt: skip
        print(f"chain of {args.steps} steps against a loop of single enqueue + wait:")
        chain_runs = pairs(
            args,
            (("chain", "chain-flow", new), ("loop", "chain-loop", new)),
            lambda name, f: f"{f['seconds']:.3f} s ({f['ms_per_hop']:.2f} ms per hop)",
        )
        print(f"plain jobs, {head[:7]} against {against[:7]}:")
        plain_runs = pairs(
            args,
            (("head", "plain", new), ("against", "plain", old)),
            lambda name, f: (f"enqueue 1-by-1 {f['enqueue_one_per_s']:,.0f} jobs/s "
                             f"({f['enqueue_cpu_us']:.1f} µs CPU/job), "
                             f"{f['bytes_per_job']:.0f} B/job queued, drain "
                             f"{f['jobs_per_s']:,.0f} jobs/s, worker CPU "
                             f"{f['worker_cpu_us']:.1f} µs/job, Redis CPU "
                             f"{f['redis_cpu_us']:.1f} µs/job"),
        )  # fmt: skip
    figures["group"] = summarise_group(group_runs)
    figures["chain"] = summarise_chain(chain_runs)
    figures["plain"] = summarise_plain(plain_runs)
    figures["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    figures["elapsed_seconds"] = time.monotonic() - started
    return figures


def summarise_group(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    median = {
        name: {key: median_of(found, key) for key in GROUP_FIGURES} for name, found in runs.items()
    }
    flow, plain = median["flow"]["seconds"], median["plain"]["seconds"]
    return {"runs": runs, "median": median, "overhead_pct": change(flow, plain)}


def summarise_chain(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    median = {name: median_of(found, "ms_per_hop") for name, found in runs.items()}
    return {"runs": runs, "median_ms_per_hop": median}


def summarise_plain(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    median = {
        name: {key: median_of(found, key) for key in PLAIN_FIGURES} for name, found in runs.items()
    }
    diff = {key: change(median["head"][key], median["against"][key]) for key in PLAIN_FIGURES}
    return {"runs": runs, "median": median, "change_pct": diff}


def print_summary(figures: dict[str, Any]) -> None:
    g, c, p = figures["group"], figures["chain"], figures["plain"]
    members = figures["settings"]["members"]
    for name in ("flow", "plain"):
        seconds = g["median"][name]["seconds"]
        print(f"  group {name}: {seconds:.3f} s, {members / seconds:,.0f} jobs/s (median)")
    print(f"  flow overhead against plain: {g['overhead_pct']:+.1f}%")
    hops = c["median_ms_per_hop"]
    print(f"  chain {hops['chain']:.2f} ms per hop, loop {hops['loop']:.2f} ms per enqueue+wait")
    for key in PLAIN_FIGURES:
        m = p["median"]
        print(f"  {key}: head {m['head'][key]:,.2f}, against {m['against'][key]:,.2f} "
              f"({p['change_pct'][key]:+.1f}%)")  # fmt: skip
    if g["overhead_pct"] > SLOW_FLOW * 100:
        print(f"  NOTE: the flow is more than {SLOW_FLOW:.0%} slower than plain")


# -- RESULTS.md ------------------------------------------------------------------------


def _table(headers: tuple[str, ...], body: list[list[str]]) -> str:
    """A Markdown table, numbers right-aligned."""
    lines = ["| " + " | ".join(headers) + " |", "|---|" + "--:|" * (len(headers) - 1)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])


def _wrap(text: str) -> str:
    """A paragraph wrapped for RESULTS.md's prose; tables and headings as they are."""
    if not text or text.startswith(("|", "#", "!")):
        return text
    return textwrap.fill(text, WIDTH, break_on_hyphens=False, break_long_words=False)


def _runs(found: list[dict[str, Any]], key: str, form: str) -> str:
    return ", ".join(format(run[key], form) for run in found)


def section(figures: dict[str, Any]) -> str:
    """The RESULTS.md section, heading included, from ``run_all``'s figures (pure)."""
    s, about = figures["settings"], figures["machine"]
    load = " / ".join(str(x) for x in about["load_average"])
    end_load = " / ".join(str(x) for x in figures["load_average_at_end"])
    head, against = figures["head"]["commit"][:7], figures["against"]["commit"][:7]
    g, c, p = figures["group"], figures["chain"], figures["plain"]
    runs = s["runs"]
    parts = [
        SECTION,
        "",
        f"`python -m benchmarks.flows --write` ({about['date']}, lockgate {head}, "
        f"{about['nproc']} cores, load average {load} at start and {end_load} at the end; "
        f"{figures['elapsed_seconds']:.0f} s). Every run is a child process with `PYTHONPATH` "
        "on the `src` of one revision (`git archive`), on a private redis-server of its "
        f"own, one in-process worker at concurrency {s['concurrency']} started and warmed "
        f"by one job before the clock starts; {runs} runs of each side, alternated, medians. "
        f"Other work (test suites) may have run on the machine's {about['nproc']} cores at "
        "the same time (see the load average): single runs then vary by tens of percent, "
        "the alternation spreads that over both sides, and the CPU and command figures per "
        "job move less than the times.",
        "",
        f"**Group with a callback**: `group(*members).then(callback)` of {s['members']:,} "
        "no-op jobs (normal level, plain tasks), from the `enqueue_flow_async` call "
        "(included) to the end of the callback, which reads its parents' results "
        f"({s['members']:,}); against the same messages without a flow, `enqueue_many_async` "
        "(included) to the end of the last of them (times taken inside the tasks). CPU: "
        "the child process's (producer and worker) and Redis's, per member, over the same "
        "span; commands: Redis `INFO commandstats` calls per member (scripts' own "
        f"included). The flow took **{g['overhead_pct']:+.0f}%** time against plain.",
        "",
    ]
    body = []
    for name, label in (("plain", "plain `enqueue_many`"), ("flow", "group + callback")):
        found, m = g["runs"][name], g["median"][name]
        body.append([
            label, f"{m['seconds']:.3f}", _runs(found, "seconds", ".3f"),
            f"{s['members'] / m['seconds']:,.0f}", f"{m['enqueue_seconds']:.3f}",
            f"{m['cpu_us']:.1f}", f"{m['redis_cpu_us']:.1f}", f"{m['commands']:.2f}",
        ])  # fmt: skip
    headers: tuple[str, ...] = (
        "", "seconds (median)", "runs", "jobs/s", "of which the enqueue call, s",
        "CPU µs/job", "Redis CPU µs/job", "commands/job",
    )  # fmt: skip
    parts += [_table(headers, body), ""]
    hops = c["median_ms_per_hop"]
    parts += [
        f"**Chain**: `chain` of {s['steps']} no-op steps, from `enqueue_flow_async` "
        "(included) to the last step's end, over the steps; against a loop of "
        f"{s['steps']} single `enqueue_async` calls of the same task, each awaiting the "
        f"job's end before the next. A hop of the chain costs **{hops['chain']:.2f} ms** "
        f"against {hops['loop']:.2f} ms for an enqueue and wait from the producer.",
        "",
    ]
    body = [
        [label, f"{hops[name]:.2f}", _runs(c["runs"][name], "ms_per_hop", ".2f"),
         f"{statistics.median(r['seconds'] for r in c['runs'][name]):.3f}"]
        for name, label in (("chain", f"chain of {s['steps']}"),
                            ("loop", f"{s['steps']} x enqueue + wait"))
    ]  # fmt: skip
    parts += [_table(("", "ms per hop (median)", "runs", "seconds"), body), ""]
    parts += [
        f"**Plain jobs, {head} against {against}** (the revision before workflows): "
        f"{s['enqueue_jobs']:,} plain no-op jobs enqueued one sync call each, Redis bytes "
        "per queued job (`used_memory` less `mem_clients_normal`, after them minus before, "
        "each read 2.5 s later so that Redis has shrunk its query buffers; a first job "
        f"loaded the scripts), and a drain of {s['drain_jobs']:,} plain no-op jobs at "
        f"concurrency {s['concurrency']} (`benchmarks.costs.drain_once`); "
        f"{' '.join(['A B'] * runs)}, medians. **change**: {head} against {against}.",
        "",
    ]
    labels = (
        ("enqueue_one_per_s", "enqueue 1-by-1, jobs/s", ",.0f"),
        ("enqueue_cpu_us", "enqueue 1-by-1, producer CPU µs/job", ".1f"),
        ("enqueue_redis_cpu_us", "enqueue 1-by-1, Redis CPU µs/job", ".1f"),
        ("bytes_per_job", "Redis bytes per queued job", ",.0f"),
        ("jobs_per_s", "drain, jobs/s", ",.0f"),
        ("worker_cpu_us", "drain, worker CPU µs/job", ".1f"),
        ("redis_cpu_us", "drain, Redis CPU µs/job", ".1f"),
        ("commands", "drain, commands/job", ".2f"),
    )
    body = []
    for key, label, form in labels:
        m = p["median"]
        body.append([
            label, format(m["head"][key], form), _runs(p["runs"]["head"], key, form),
            format(m["against"][key], form), _runs(p["runs"]["against"], key, form),
            f"{p['change_pct'][key]:+.1f}%"
            + (" ~" if overlap(p["runs"]["head"], p["runs"]["against"], key) else ""),
        ])  # fmt: skip
    headers = ("", f"{head} (median)", f"{head} runs", f"{against} (median)",
               f"{against} runs", "change")  # fmt: skip
    parts += [
        _table(headers, body),
        "",
        "~: the two revisions' runs overlap in that figure (the difference of the medians is "
        "within the run-to-run spread).",
        "",
    ]
    return "\n".join(_wrap(part) for part in parts)


def write_section(text: str, path: Path = RESULTS) -> None:
    """Put ``text`` in place of the file's workflows section, or after its end."""
    report.replace_section(path, SECTION, text)


# -- main ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.child:
        child(args)
        return
    if args.render:
        figures = json.loads(args.render.read_text())
    else:
        figures = run_all(args)
    print_summary(figures)
    if args.json and not args.render:
        args.json.write_text(json.dumps(figures, indent=1))
    text = section(figures)
    if args.markdown:
        print("\n" + text)
    if args.write:
        write_section(text)
        print(f"wrote {SECTION[3:]!r} in {RESULTS}")


if __name__ == "__main__":
    main()
