"""Fair shares inside a level: ``python -m benchmarks.fairness``.

Every part runs on a private ``redis-server`` of its own (``servers.private_server``),
with one in-process worker (uvloop when installed); about 1.5 minutes on 2 cores:

- **starvation**: one tenant's ``--flood`` low jobs (50,000), then four other tenants'
  ``--few`` (100) each, all queued before the worker (concurrency ``--concurrency``, 8)
  starts; the number of starts until the four others' jobs have all started, with
  ``key_by="tenant"`` and without it (lockgate 0.3's behaviour: they wait behind the
  flood). The run goes on until every job started, and records each job's wait: its
  start minus the moment the worker was started (the picture draws them per tenant);
- **level shares**: keyed floods on all three levels (10:5:1); the share of each level in
  the first ``--share-starts`` (3,000) starts;
- **critical latency**: a low flood spread over ``--latency-keys`` (5) keys with
  ``key_by``, and the same flood without, of 1 ms jobs, large enough that
  ``--latency-low`` (20,000) would still wait when the last critical job is sent were
  every slot on low jobs (``latency_low_jobs``); once the
  worker (concurrency ``--concurrency``) has started low jobs, a child process enqueues
  ``--critical`` (1,000) critical jobs one by one, 5 ms apart: the wait from the enqueue
  call to the task's first line (p50, p99, p99.9, max), as the lockgate variants' sweep
  measures it (``runner.latency``), and the low jobs/s meanwhile; ``--latency-runs`` (3)
  runs of each flood, interleaved, and per flood its run of median p99;
- **drain with keys against without**: ``--drain-jobs`` (20,000) no-op jobs spread over
  ``--drain-keys`` (100) keys, and the same without keys, drained at
  ``--drain-concurrency`` (100) by ``costs.drain_once`` (the harness of ``python -m
  benchmarks.costs --keys N``), ``--drain-runs`` (3) runs of each, interleaved; medians.

Output: the figures on the terminal; ``--json FILE`` writes them (each job's wait
included); ``--markdown`` prints the RESULTS.md section; ``--picture FILE`` draws the
waits (matplotlib); ``--write`` replaces the section "Fair shares inside a level" of
``benchmarks/RESULTS.md`` (``make bench`` keeps it as it is: ``report.KEPT_SECTIONS``)
and draws ``docs/fairness-waits.png``. ``section(figures)`` is the section's text,
``write_section(text)`` puts it in place.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import textwrap
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks import machine, report, roundtrips, servers
from benchmarks.costs import drain_once, loop_runner
from benchmarks.peers.base import LOW_JOB_SECONDS
from benchmarks.runner import CRITICAL_INTERVAL, percentile

LEVELS = {"critical": 10, "normal": 5, "low": 1}
BATCH = 1000
REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "RESULTS.md"
PICTURE = REPO / "docs" / "fairness-waits.png"
SECTION = "## Fair shares inside a level (benchmarks.fairness)"
OTHERS = ("t0", "t1", "t2", "t3")
WIDTH = 90  # RESULTS.md's prose
WARM_LOW_JOBS = 20  # low jobs started before the critical ones are sent (as runner.latency)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fairness",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--flood", type=int, default=50_000, help="the big tenant's low jobs")
    parser.add_argument("--few", type=int, default=100, help="low jobs of each other tenant")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--share-starts", type=int, default=3_000)
    parser.add_argument("--critical", type=int, default=1_000)
    parser.add_argument("--latency-low", type=int, default=20_000)
    parser.add_argument("--latency-keys", type=int, default=5)
    parser.add_argument("--latency-runs", type=int, default=3)
    parser.add_argument("--drain-jobs", type=int, default=20_000)
    parser.add_argument("--drain-keys", type=int, default=100)
    parser.add_argument("--drain-concurrency", type=int, default=100)
    parser.add_argument("--drain-runs", type=int, default=3)
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the figures")
    parser.add_argument("--markdown", action="store_true", help="print the RESULTS.md section")
    parser.add_argument("--picture", type=Path, metavar="FILE", help="draw the waits")
    parser.add_argument(
        "--write", action="store_true", help=f"rewrite RESULTS.md's section, draw {PICTURE.name}"
    )
    parser.add_argument(
        "--send-critical", nargs=2, metavar=("URL", "NAMESPACE"), help=argparse.SUPPRESS
    )
    return parser.parse_args(argv)


# -- starvation ------------------------------------------------------------------------


async def starvation(url: str, args: argparse.Namespace, keyed: bool) -> dict[str, Any]:
    """Starts until the few tenants' jobs all started, and every job's wait, per tenant."""
    from lockgate import App, Worker, WorkerConfig

    app = App(url, namespace=uuid.uuid4().hex, levels=LEVELS)
    started: list[tuple[str, float]] = []
    began = [0.0]
    options: dict[str, Any] = {"key_by": "tenant"} if keyed else {}

    @app.task(priority="low", **options)
    async def report(tenant: str, n: int) -> None:
        started.append((tenant, time.perf_counter() - began[0]))

    messages = [report.message("big", n) for n in range(args.flood)]
    messages += [report.message(tenant, n) for n in range(args.few) for tenant in OTHERS]
    for first in range(0, len(messages), BATCH):
        await app.enqueue_many_async(messages[first : first + BATCH])
    worker = Worker(app, WorkerConfig(concurrency=args.concurrency, grace_period=30))
    began[0] = time.perf_counter()
    await asyncio.wait_for(worker.run(burst=True), timeout=600)
    await app.aclose()
    if len(started) != len(messages):
        raise RuntimeError(f"{len(started)} of {len(messages)} jobs started")
    last = max(i for i, (tenant, _) in enumerate(started) if tenant != "big") + 1
    waits: dict[str, list[float]] = {tenant: [] for tenant in ("big", *OTHERS)}
    for tenant, wait in started:
        waits[tenant].append(round(wait, 5))
    return {
        "keyed": keyed,
        "starts_until_others_started": last,
        "seconds_until_others_started": started[last - 1][1],
        "seconds_all_started": started[-1][1],
        "waits": waits,
    }


# -- level shares ----------------------------------------------------------------------


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
        level: {"share": counts[level] / args.share_starts, "weight_share": weight / total}
        for level, weight in LEVELS.items()
    }


# -- critical latency with a low flood -------------------------------------------------


def latency_app(url: str, namespace: str, keyed: bool, box: dict[str, Any]) -> tuple[Any, ...]:
    """The app, its low flood task and its critical task; ``box`` collects what they see."""
    from lockgate import App

    app = App(url, namespace=namespace, levels=LEVELS)
    options: dict[str, Any] = {"key_by": "tenant"} if keyed else {}

    @app.task(name="flood", priority="low", **options)
    async def flood(tenant: str, n: int) -> None:
        await asyncio.sleep(LOW_JOB_SECONDS)
        box["low"] += 1

    @app.task(name="urgent", priority="critical")
    async def urgent(sent: float) -> None:
        box["waits"].append(time.time() - sent)
        if len(box["waits"]) >= box["expected"]:
            box["all_in"].set()

    return app, flood, urgent


def send_critical(url: str, namespace: str, n: int) -> None:
    """The child process: ``n`` critical jobs, one enqueue call each, 5 ms apart."""
    box: dict[str, Any] = {}
    app, _, urgent = latency_app(url, namespace, False, box)
    for _ in range(n):
        urgent.enqueue(time.time())
        time.sleep(CRITICAL_INTERVAL)
    app.close()


def latency_low_jobs(args: argparse.Namespace) -> int:
    """Low jobs to queue so that ``--latency-low`` still wait when the last critical is sent:
    the window at the fastest the worker could go (every slot on 1 ms jobs), 20% more."""
    window = args.critical * CRITICAL_INTERVAL * 1.2
    fastest = args.concurrency / LOW_JOB_SECONDS
    return int(args.latency_low + math.ceil(window * fastest / 100) * 100)


async def latency(url: str, args: argparse.Namespace, keyed: bool) -> dict[str, Any]:
    from lockgate import Worker, WorkerConfig

    namespace = uuid.uuid4().hex
    box: dict[str, Any] = {"low": 0, "waits": [], "expected": args.critical}
    box["all_in"] = asyncio.Event()
    app, flood, _ = latency_app(url, namespace, keyed, box)
    queued = latency_low_jobs(args)
    keys = args.latency_keys
    for first in range(0, queued, BATCH):
        end = min(queued, first + BATCH)
        await app.enqueue_many_async([flood.message(f"k{n % keys}", n) for n in range(first, end)])
    worker = Worker(app, WorkerConfig(concurrency=args.concurrency, grace_period=30))
    run_task = asyncio.create_task(worker.run())
    while box["low"] < WARM_LOW_JOBS:
        await asyncio.sleep(0.01)
    low_before, began = box["low"], time.monotonic()
    argv = [sys.executable, "-m", "benchmarks.fairness", "--send-critical", url, namespace]
    child = await asyncio.create_subprocess_exec(*argv, "--critical", str(args.critical))
    await child.wait()
    try:
        await asyncio.wait_for(box["all_in"].wait(), timeout=30)
    except TimeoutError:
        pass
    low_after, ended = box["low"], time.monotonic()
    worker.request_stop()
    await run_task
    await app.aclose()
    waits = box["waits"]
    if child.returncode != 0 or not waits:
        raise RuntimeError(f"critical sender exit {child.returncode}, {len(waits)} started")
    return {
        "keyed": keyed,
        "keys": keys if keyed else 0,
        "low_queued": queued,
        "p50_ms": percentile(waits, 50) * 1000,
        "p99_ms": percentile(waits, 99) * 1000,
        "p999_ms": percentile(waits, 99.9) * 1000,
        "max_ms": max(waits) * 1000,
        "critical_started": len(waits),
        "critical_sent": args.critical,
        "low_rate_meanwhile": (low_after - low_before) / (ended - began),
        "low_left": queued - low_after,
    }


def latencies(args: argparse.Namespace) -> list[dict[str, Any]]:
    """``--latency-runs`` runs with a keyed flood and an unkeyed one, interleaved; per flood,
    the run of median p99, with every run's p99."""
    runs: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    for _ in range(args.latency_runs):
        for keyed in (True, False):
            with servers.private_server() as server:
                row = loop_runner()(latency(server.url, args, keyed))
            runs[keyed].append(row)
            print(
                f"  critical with a {'keyed' if keyed else 'unkeyed'} low flood: p50 "
                f"{row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms, p99.9 "
                f"{row['p999_ms']:.1f} ms, max {row['max_ms']:.1f} ms "
                f"({row['critical_started']}/{row['critical_sent']}); low "
                f"{row['low_rate_meanwhile']:,.0f}/s meanwhile, {row['low_left']:,} left",
                flush=True,
            )
    chosen = []
    for found in runs.values():
        ordered = sorted(found, key=lambda row: row["p99_ms"])
        median = ordered[(len(ordered) - 1) // 2]
        chosen.append({**median, "p99_runs_ms": [row["p99_ms"] for row in found]})
    return chosen


# -- drain with keys against without ---------------------------------------------------

DRAIN_FIGURES = ("jobs_per_s", "worker_cpu_us", "redis_cpu_us", "commands", "round_trips")


def drains(args: argparse.Namespace) -> dict[str, Any]:
    """``--drain-runs`` drains with keys and without, interleaved; each run and the medians."""
    roundtrips.install()
    runs: dict[str, list[dict[str, Any]]] = {"keyed": [], "unkeyed": []}
    for i in range(args.drain_runs):
        for name, keys in (("keyed", args.drain_keys), ("unkeyed", 0)):
            settings = argparse.Namespace(
                jobs=args.drain_jobs,
                concurrency=args.drain_concurrency,
                idempotent=False,
                keys=keys,
            )
            with servers.private_server() as server:
                figures = loop_runner()(drain_once(server.url, settings, None))
            figures.pop("calls", None)
            runs[name].append(figures)
            print(
                f"  drain run {i + 1} {name}: {figures['jobs_per_s']:,.0f} jobs/s, worker CPU "
                f"{figures['worker_cpu_us']:.1f} µs/job, Redis CPU {figures['redis_cpu_us']:.1f}"
                f" µs/job, {figures['commands']:.2f} commands/job",
                flush=True,
            )
    medians = {
        name: {key: statistics.median(run[key] for run in found) for key in DRAIN_FIGURES}
        for name, found in runs.items()
    }
    ratio = medians["keyed"]["jobs_per_s"] / medians["unkeyed"]["jobs_per_s"]
    return {"runs": runs, "median": medians, "keyed_over_unkeyed": ratio}


# -- the RESULTS.md section and the picture --------------------------------------------


def _table(headers: tuple[str, ...], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|---|" + "--:|" * (len(headers) - 1)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])


def section(figures: dict[str, Any]) -> str:
    """The RESULTS.md section, heading included, from ``main``'s figures."""
    s, about = figures["settings"], figures["machine"]
    load = " / ".join(str(x) for x in about["load_average"])
    others = 4 * s["few"]
    parts = [
        SECTION,
        "",
        f"`python -m benchmarks.fairness --write` ({about['date']}, lockgate "
        f"{about['lockgate']}, {about['nproc']} cores, load average at start {load}; "
        f"{figures['elapsed_seconds']:.0f} s). This section and `docs/fairness-waits.png` "
        "are written by that command; `make bench` keeps the section as it is "
        "(`--markdown` prints it). Each part on a private redis-server of its own, one "
        "in-process worker.",
        "",
        f"**Starvation**: one tenant's {s['flood']:,} low jobs, then {s['few']} each of four "
        f"others, all queued before the worker (concurrency {s['concurrency']}) starts.",
        "",
    ]
    body = []
    for row in figures["starvation"]:
        label = '`key_by="tenant"`' if row["keyed"] else "no key (0.3's behaviour)"
        body.append([
            label, f"{row['starts_until_others_started']:,}",
            f"{row['seconds_until_others_started']:.2f}", f"{row['seconds_all_started']:.2f}",
        ])  # fmt: skip
    headers: tuple[str, ...] = (
        "", f"starts until the others' {others} jobs had all started", "seconds to there",
        "seconds until every job started",
    )  # fmt: skip
    parts += [_table(headers, body), "", "![waits per tenant](../docs/fairness-waits.png)", ""]
    d = figures["drain"]
    m = d["median"]
    parts += [
        f"**Drain with keys against without**: {s['drain_jobs']:,} no-op jobs (normal, "
        f"plain), spread over {s['drain_keys']} keys and without keys, at concurrency "
        f"{s['drain_concurrency']} (`benchmarks.costs.drain_once`, as `python -m "
        f"benchmarks.costs --keys {s['drain_keys']}`); {s['drain_runs']} runs of each, "
        f"interleaved, each figure's median. With keys: **{d['keyed_over_unkeyed']:.0%}** of the "
        "unkeyed drain's rate.",
        "",
    ]
    body = []
    for name, label in (("unkeyed", "no key"), ("keyed", f"{s['drain_keys']} keys")):
        runs = ", ".join(f"{run['jobs_per_s']:,.0f}" for run in d["runs"][name])
        body.append([
            label, f"{m[name]['jobs_per_s']:,.0f}", runs, f"{m[name]['worker_cpu_us']:.1f}",
            f"{m[name]['redis_cpu_us']:.1f}", f"{m[name]['commands']:.2f}",
            f"{m[name]['round_trips']:.3f}",
        ])  # fmt: skip
    headers = ("", "jobs/s (median)", "runs", "worker CPU µs/job", "Redis CPU µs/job",
               "commands/job", "round trips/job")  # fmt: skip
    parts += [_table(headers, body), ""]
    parts += [
        f"**Critical latency with a low flood**: {s['critical']:,} critical jobs enqueued one "
        f"by one, 5 ms apart, by a child process, while the worker (concurrency "
        f"{s['concurrency']}) works through 1 ms low jobs, enough that at least "
        f"{s['latency_low']:,} would still wait when the last critical one is sent were "
        "every slot on low jobs (**low left**: those still waiting at the end); from the "
        "enqueue call to the task's first line, as the lockgate variants' sweep measures "
        f"it. {s['latency_runs']} runs of each flood, interleaved; shown, per flood, its run "
        "of median p99.",
        "",
    ]
    body = []
    for row in figures["latency"]:
        label = f"keyed, {row['keys']} keys" if row["keyed"] else "no key"
        body.append([
            label, f"{row['low_queued']:,}", f"{row['p50_ms']:.1f}", f"{row['p99_ms']:.1f}",
            f"{row['p999_ms']:.1f}", f"{row['max_ms']:.1f}",
            ", ".join(f"{x:.1f}" for x in row["p99_runs_ms"]),
            f"{row['critical_started']}/{row['critical_sent']}",
            f"{row['low_rate_meanwhile']:,.0f}", f"{row['low_left']:,}",
        ])  # fmt: skip
    headers = ("low flood", "low queued", "p50 ms", "p99 ms", "p99.9 ms", "max ms",
               "p99 ms of each run", "critical started", "low jobs/s meanwhile",
               "low left")  # fmt: skip
    parts += [_table(headers, body), ""]
    parts += [
        f"**Level shares**: keyed floods on all three levels (10 keys each); each level's "
        f"share of the first {s['share_starts']:,} starts.",
        "",
    ]
    body = [[level, f"{row['share']:.1%}", f"{row['weight_share']:.1%}"]
            for level, row in figures["shares"].items()]  # fmt: skip
    parts += [_table(("level", "share of the starts", "its weight's share"), body), ""]
    return "\n".join(_wrap(part) for part in parts)


def _wrap(text: str) -> str:
    """A paragraph wrapped for RESULTS.md's prose; tables, headings and pictures as they are."""
    if not text or text.startswith(("|", "#", "!")):
        return text
    return textwrap.fill(text, WIDTH, break_on_hyphens=False, break_long_words=False)


def write_section(text: str, path: Path = RESULTS) -> None:
    """Put ``text`` in place of the file's fairness section, or after its end."""
    report.replace_section(path, SECTION, text)


def draw(figures: dict[str, Any], out: Path) -> None:
    """Per tenant, the share of its jobs started against the wait, without keys and with."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = figures["settings"]
    rows = sorted(figures["starvation"], key=lambda row: row["keyed"])
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True, sharey=True)
    colours = {"big": "#444444", "t0": "#1f77b4", "t1": "#ff7f0e", "t2": "#2ca02c",
               "t3": "#d62728"}  # fmt: skip
    for axis, row in zip(axes, rows, strict=True):
        for tenant, waits in row["waits"].items():
            ordered = sorted(waits)
            shares = [(i + 1) / len(ordered) for i in range(len(ordered))]
            label = f"big tenant ({s['flood']:,} jobs)" if tenant == "big" else (
                f"tenant {tenant} ({s['few']} jobs)")  # fmt: skip
            width = 2.5 if tenant == "big" else 1.4
            axis.step(ordered, shares, where="post", color=colours[tenant], label=label,
                      linewidth=width)  # fmt: skip
        axis.axvline(row["seconds_until_others_started"], color="grey", linestyle=":")
        how = 'key_by="tenant"' if row["keyed"] else "no key_by"
        axis.set_title(
            f"{how}: the others' {4 * s['few']} jobs had all started\nafter "
            f"{row['starts_until_others_started']:,} starts "
            f"({row['seconds_until_others_started']:.2f} s)",
            fontsize=10,
        )
        axis.set_xscale("log")
        axis.set_xlabel("wait: start minus the worker's start, s (log scale)")
        axis.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("share of the tenant's jobs started")
    axes[1].legend(fontsize=8, loc="upper left")
    figure.suptitle(
        f"{s['flood']:,} low jobs of one tenant and {s['few']} of each of four others, queued "
        f"first; one worker, concurrency {s['concurrency']}",
        fontsize=11,
    )
    figure.tight_layout()
    figure.savefig(out, dpi=100)


# -- main ------------------------------------------------------------------------------


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    about = machine.describe()
    figures: dict[str, Any] = {
        "settings": {k: v for k, v in vars(args).items() if isinstance(v, int | float)},
        "machine": about,
        "starvation": [],
        "latency": [],
    }
    for keyed in (True, False):
        with servers.private_server() as server:
            row = loop_runner()(starvation(server.url, args, keyed))
        figures["starvation"].append(row)
        print(
            f"  {'keyed' if keyed else 'unkeyed'}: the others' {4 * args.few} jobs had all "
            f"started after {row['starts_until_others_started']:,} starts "
            f"({row['seconds_until_others_started']:.2f} s; every job after "
            f"{row['seconds_all_started']:.2f} s; {args.flood:,} + {4 * args.few} queued, "
            f"concurrency {args.concurrency})",
            flush=True,
        )
    with servers.private_server() as server:
        figures["shares"] = loop_runner()(shares(server.url, args))
    for level, row in figures["shares"].items():
        share, weight = row["share"], row["weight_share"]
        print(f"  {level}: {share:.1%} of the first starts (its weight's share: {weight:.1%})")
    figures["latency"] = latencies(args)
    figures["drain"] = drains(args)
    m = figures["drain"]["median"]
    print(
        f"  drain medians: keyed {m['keyed']['jobs_per_s']:,.0f} jobs/s, unkeyed "
        f"{m['unkeyed']['jobs_per_s']:,.0f} jobs/s "
        f"({figures['drain']['keyed_over_unkeyed']:.0%})"
    )
    figures["elapsed_seconds"] = time.monotonic() - started
    return figures


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.send_critical:  # the child that sends the critical jobs
        url, namespace = args.send_critical
        send_critical(url, namespace, args.critical)
        return
    figures = run_all(args)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    text = section(figures)
    if args.markdown:
        print("\n" + text)
    picture = args.picture or (PICTURE if args.write else None)
    if picture:
        draw(figures, picture)
        print(f"drew {picture}")
    if args.write:
        write_section(text)
        print(f"wrote {SECTION[3:]!r} in {RESULTS}")


if __name__ == "__main__":
    main()
