"""The driver: ``python -m benchmarks`` (``make bench``).

For each library: build its environment (``venvs``), start a private server (or use
``--url``), run every measurement ``--runs`` times through ``runner`` in that environment,
cleaning the server between runs, and keep the medians. Then the ceiling (bare redis-py
and ``redis-benchmark``), and the report: a table on the terminal, ``results.json``,
``RESULTS.md`` and ``results.png``. A library that cannot be installed or run is
recorded with the reason; the others go on.

With lockgate among the libraries, its variants follow (``variants``): plain and
idempotent tasks, concurrency 8, the sorted backend, two worker processes, and a
critical-latency sweep, each with the worker's client round trips counted
(``roundtrips``, checked first by ``python -m benchmarks.roundtrips``).

``--smoke`` runs lockgate alone, in this interpreter, with 200 jobs, and its variants
small (a drain of 2,000 idempotent jobs at concurrency 8 among them): no install, no
network, for CI. It fails when a measurement fails, or when that drain makes more than
``variants.SMOKE_MAX_ROUND_TRIPS`` client round trips per job.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from benchmarks import machine, procs, report, servers, targets, variants, venvs
from benchmarks.variants import Step, Variant

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
PEERS = ("lockgate", "rq", "arq", "dramatiq", "celery", "saq", "streaq", "taskiq", "bullmq")
MEASURES = ("enqueue_one", "enqueue_bulk", "drain", "latency")
console = Console(width=None if sys.stdout.isatty() else 200)


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What one invocation measures, and where."""

    peers: tuple[str, ...]
    jobs: int
    latency_jobs: int
    critical: int
    memory_jobs: int
    runs: int
    url: str | None
    out: Path
    smoke: bool
    variants: bool
    variant_runs: int
    sweep_critical: int

    def jobs_for(self, measure: str) -> int:
        return {"latency": self.latency_jobs, "memory": self.memory_jobs}.get(measure, self.jobs)


class MeasureError(Exception):
    """A runner failed; the message says how."""


def parse(argv: list[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="lockgate and its peers against one Redis, in one run.",
    )
    parser.add_argument("--url", help="Redis URL to use (default: a private server per library)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="lockgate only, 200 jobs (2,000 for a round-trip check), this interpreter (CI)",
    )
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated libraries")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per enqueue/drain run")
    parser.add_argument("--latency-jobs", type=int, default=20_000, help="low jobs waiting")
    parser.add_argument("--critical", type=int, default=200, help="critical jobs sent")
    parser.add_argument("--memory-jobs", type=int, default=100_000, help="jobs for memory")
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement (median)")
    parser.add_argument("--out", type=Path, help="where results go (default: benchmarks/)")
    parser.add_argument("--variants", action=argparse.BooleanOptionalAction, default=True,
                        help="lockgate's variants too (when lockgate is measured)")  # fmt: skip
    parser.add_argument("--variant-runs", type=int,
                        help="runs per lockgate drain variant (default: --runs)")  # fmt: skip
    parser.add_argument("--sweep-critical", type=int, default=1000,
                        help="critical jobs per lockgate latency sweep row (1 run)")  # fmt: skip
    args = parser.parse_args(argv)
    peers = tuple(p.strip() for p in args.peers.split(",") if p.strip())
    unknown = set(peers) - set(PEERS)
    if unknown:
        parser.error(f"unknown libraries: {', '.join(sorted(unknown))}; known: {PEERS}")
    if args.smoke:
        return Settings(
            peers=("lockgate",), jobs=200, latency_jobs=200, critical=20, memory_jobs=200,
            runs=3, url=args.url, out=args.out or ROOT / "smoke", smoke=True, variants=True,
            variant_runs=1, sweep_critical=20,
        )  # fmt: skip
    return Settings(
        peers=peers, jobs=round_up(args.jobs), latency_jobs=args.latency_jobs,
        critical=args.critical, memory_jobs=round_up(args.memory_jobs), runs=args.runs,
        url=args.url, out=args.out or ROOT, smoke=False, variants=args.variants,
        variant_runs=args.variant_runs or args.runs, sweep_critical=args.sweep_critical,
    )  # fmt: skip


def round_up(n: int) -> int:
    """Drains count completions in hundreds: round the job count up to one."""
    return max(100, -(-n // 100) * 100)


def server_for(settings: Settings) -> contextlib.AbstractContextManager[servers.Server]:
    if settings.url:
        return servers.user_server(settings.url)
    return servers.private_server()


def child_env(server: servers.Server, tag: str) -> dict[str, str]:
    paths = [str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")]
    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(p for p in paths if p),
        BENCH_URL=server.url,
        BENCH_NS=tag,
        BENCH_KEYS=f"bench:{tag}",
    )


def run_child(argv: list[str], env: dict[str, str], log: Path, timeout: float) -> dict[str, Any]:
    """Run a runner/ceiling process; its JSON result, or MeasureError."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        result = Path(handle.name)
    pidfile = result.with_suffix(".pid")
    env = dict(env, BENCH_WORKER_PIDFILE=str(pidfile))
    try:
        with log.open("ab") as out:
            done = subprocess.run(
                [*argv, "--result", str(result)],
                env=env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
        if done.returncode != 0 or not result.read_text():
            tail = log.read_text(errors="replace").strip().splitlines()[-1:]
            raise MeasureError(f"exit {done.returncode}: {' '.join(tail)[:300]} (log: {log})")
        outcome: dict[str, Any] = json.loads(result.read_text())
        return outcome
    except subprocess.TimeoutExpired:
        raise MeasureError(f"no result within {timeout:.0f} s (log: {log})") from None
    finally:
        # A runner that timed out or was interrupted leaves its worker behind: stop it.
        procs.kill_session(pidfile)
        pidfile.unlink(missing_ok=True)
        result.unlink(missing_ok=True)


def peer_steps(settings: Settings) -> list[Step]:
    """A library's measurements: each ``--runs`` times, then memory once."""
    return [Step(m, settings.runs, settings.jobs_for(m), settings.critical) for m in MEASURES] + [
        Step("memory", 1, settings.memory_jobs, settings.critical)
    ]


def bench_peer(peer: str, python: str, settings: Settings, logs: Path) -> dict[str, Any]:
    return bench_steps(peer, peer, python, peer_steps(settings), settings, logs)


def bench_steps(
    peer: str,
    label: str,
    python: str,
    steps: list[Step],
    settings: Settings,
    logs: Path,
    extra_env: dict[str, str] | None = None,
    width: int = 9,
) -> dict[str, Any]:
    """Run ``steps`` of ``peer`` on a server of their own; runs, errors and medians.

    ``label`` names the runs in the progress lines and, with ``extra_env`` (a variant's),
    its log files ``variant-<label>-*.log``.
    """
    entry: dict[str, Any] = {"runs": {}, "errors": {}}
    slug = f"variant-{label.replace(' ', '-')}" if extra_env else label
    with server_for(settings) as server:
        entry["server"] = server.label
        for step in steps:
            measure, n = step.measure, step.jobs
            for i in range(step.runs):
                tag = f"b{uuid.uuid4().hex[:8]}"
                argv = [
                    python,
                    "-m",
                    "benchmarks.runner",
                    peer,
                    "drain" if measure == "memory" else measure,
                    "--jobs",
                    str(n),
                    "--critical",
                    str(step.critical),
                    "--log",
                    str(logs / f"{slug}-worker.log"),
                ]
                env = dict(child_env(server, tag), **(extra_env or {}))
                server.remember()
                started = time.monotonic()
                try:
                    outcome = run_child(argv, env, logs / f"{slug}-runner.log",
                                        timeout=180 + n / 40)  # fmt: skip
                except MeasureError as e:
                    entry["errors"][measure] = str(e)
                    console.print(f"  [red]{label} {measure}: {e}[/red]")
                    break
                finally:
                    server.reset()
                entry["runs"].setdefault(measure, []).append(outcome)
                console.print(
                    f"  {label:{width}} {measure:12} run {i + 1}/{step.runs}  n={n:<7,} "
                    f"{report.brief(measure, outcome)}  ({time.monotonic() - started:.1f} s)"
                )
    first: dict[str, Any] = next((runs[0] for runs in entry["runs"].values() if runs), {})
    # lockgate runs from src/, not installed: its version is the checkout's.
    entry["version"] = machine.lockgate_version() if peer == "lockgate" else first.get("version")
    entry["profile"] = first.get("profile")
    entry["summary"] = summarize(entry["runs"])
    return entry


def check_counter(python: str, settings: Settings, logs: Path) -> dict[str, Any]:
    """``python -m benchmarks.roundtrips`` in lockgate's environment: does counting hold?"""
    with server_for(settings) as server:  # the check writes no key: nothing to clean
        try:
            argv = [python, "-m", "benchmarks.roundtrips"]
            outcome = run_child(argv, child_env(server, "counter"), logs / "roundtrips.log", 60)
        except MeasureError as e:
            outcome = {"ok": False, "error": str(e)}
    state = "holds" if outcome.get("ok") else f"[red]is wrong: {outcome.get('error', '')}[/red]"
    console.print(f"  round-trip counting {state} (log: {logs / 'roundtrips.log'})")
    return outcome


def bench_variants(python: str, settings: Settings, logs: Path) -> dict[str, Any]:
    """lockgate's variants (see ``variants.plan``), each on a server of its own."""
    console.print("[bold]lockgate variants[/bold]")
    found: dict[str, Any] = {"counter_check": check_counter(python, settings, logs),
                             "variant_runs": settings.variant_runs, "variants": {}}  # fmt: skip
    plan: list[Variant] = variants.plan(
        jobs=settings.jobs, runs=settings.variant_runs, latency_jobs=settings.latency_jobs,
        critical=settings.sweep_critical, smoke=settings.smoke,
    )  # fmt: skip
    for variant in plan:
        entry = bench_steps("lockgate", variant.name, python, list(variant.steps), settings,
                            logs, variant.env(), width=20)  # fmt: skip
        entry["variant"] = variants.describe(variant)
        entry["summary"].update(variants.summarize_extra(entry["runs"]))
        found["variants"][variant.name] = entry
    return found


def median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians over runs, per figure."""
    summary: dict[str, Any] = {
        "enqueue_one": median_of(runs.get("enqueue_one", []), "rate"),
        "enqueue_bulk": median_of(runs.get("enqueue_bulk", []), "rate"),
        "drain": median_of(runs.get("drain", []), "rate"),
        "rss_bytes": median_of(runs.get("drain", []), "rss_bytes"),
    }
    latency = runs.get("latency", [])
    for key in ("p50_ms", "p99_ms", "low_rate_meanwhile"):
        summary[key] = median_of(latency, key)
    if latency:
        summary["critical_started"] = min(r["critical_started"] for r in latency)
        summary["critical_sent"] = latency[0]["critical_sent"]
    memory = runs.get("memory", [])
    summary["memory"] = memory[0]["memory"] if memory else None
    return summary


def bench_ceiling(python: str, settings: Settings, logs: Path) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    with server_for(settings) as server:
        for i in range(settings.runs):
            server.remember()
            argv = [python, "-m", "benchmarks.ceiling", "--jobs", str(settings.jobs)]
            try:
                results.append(
                    run_child(
                        argv,
                        child_env(server, f"c{uuid.uuid4().hex[:8]}"),
                        logs / "ceiling.log",
                        timeout=300 + settings.jobs / 100,
                    )
                )
            except MeasureError as e:
                console.print(f"  [red]ceiling: {e}[/red]")
                return {"error": str(e), "runs": results}
            finally:
                server.reset()
            console.print(
                f"  ceiling   run {i + 1}/{settings.runs}  {report.brief('ceiling', results[-1])}"
            )
    keys = [k for k in results[0] if k != "redis_py"]
    return {"runs": results, "median": {k: median_of(results, k) for k in keys},
            "redis_py": results[0]["redis_py"]}  # fmt: skip


def interpreter(peer: str, settings: Settings, logs: Path) -> str:
    """The python to run ``peer`` with (installing its environment first)."""
    if settings.smoke:
        return sys.executable
    console.print(f"[bold]{peer}[/bold]: environment {venvs.directory(peer).name}")
    return str(venvs.ensure(peer, logs / f"{peer}-install.log"))


def run(settings: Settings) -> dict[str, Any]:
    logs = settings.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for stale in logs.glob("*.log"):
        stale.unlink()
    results: dict[str, Any] = {"machine": machine.describe(), "settings": settings_dict(settings)}
    with server_for(settings) as server:
        info = server.info()
        results["redis"] = {"version": info.get("redis_version"), "server": server.label,
                            "mode": "private" if server.private else "user"}  # fmt: skip
    results["peers"] = {}
    for peer in settings.peers:
        try:
            python = interpreter(peer, settings, logs)
        except venvs.InstallError as e:
            console.print(f"  [red]{peer}: not installed: {e}[/red]")
            results["peers"][peer] = {"error": f"not installed: {e}"}
            continue
        results["peers"][peer] = bench_peer(peer, python, settings, logs)
        if peer == "lockgate" and settings.variants:
            results["lockgate_variants"] = bench_variants(python, settings, logs)
    python = interpreter("lockgate", settings, logs) if not settings.smoke else sys.executable
    results["ceiling"] = bench_ceiling(python, settings, logs)
    results["chart_python"] = python
    return results


def settings_dict(settings: Settings) -> dict[str, Any]:
    return {
        "jobs": settings.jobs, "latency_jobs": settings.latency_jobs,
        "critical": settings.critical, "memory_jobs": settings.memory_jobs,
        "runs": settings.runs, "smoke": settings.smoke, "peers": list(settings.peers),
        "variants": settings.variants, "variant_runs": settings.variant_runs,
        "sweep_critical": settings.sweep_critical,
        "command": "python -m benchmarks " + " ".join(sys.argv[1:]),
    }  # fmt: skip


@contextlib.contextmanager
def stopwatch(label: str) -> Iterator[Callable[[], float]]:
    started = time.monotonic()
    yield lambda: time.monotonic() - started
    console.print(f"{label} in {time.monotonic() - started:.1f} s")


def main(argv: list[str] | None = None) -> None:
    settings = parse(argv)
    with stopwatch("benchmark finished") as elapsed:
        results = run(settings)
        results["elapsed_seconds"] = round(elapsed(), 1)
        report.write(results, settings.out, console)
    failed = [p for p, e in results["peers"].items() if e.get("error") or e.get("errors")]
    if settings.smoke:
        smoke_exit(results, failed)


def smoke_exit(results: dict[str, Any], failed: list[str]) -> None:
    """Exit non-zero, with one line saying why, when the smoke run found a problem."""
    found = results.get("lockgate_variants") or {}
    failed += [name for name, e in found.get("variants", {}).items() if e.get("errors")]
    trips, line = targets.smoke_round_trips(results)
    console.print(line)
    if not found.get("counter_check", {}).get("ok"):
        console.print("smoke FAILED: round-trip counting is wrong (see logs/roundtrips.log)")
        sys.exit(1)
    if failed:
        console.print(f"smoke FAILED: measurements failed for {', '.join(failed)}")
        sys.exit(1)
    if trips is None or trips > variants.SMOKE_MAX_ROUND_TRIPS:
        sys.exit(1)
