"""What tracing costs: ``python -m benchmarks.otel_cost [--jobs N] [--runs 3]``.

Three ways of running the same plain no-op jobs (``benchmarks.compare.measure``: their
enqueue, then their drain by one in-process burst worker), each in a child process on a
private ``redis-server`` started empty:

- ``plain``: lockgate alone (the child checks that ``lockgate.otel`` was never imported);
- ``imported``: ``lockgate.otel`` imported (the extra installed), not instrumented;
- ``traced``: instrumented with an SDK ``TracerProvider`` and a ``BatchSpanProcessor``
  exporting to nowhere (the spans are made, processed and dropped).

The modes take turns for ``--runs`` rounds; the report gives each figure's median per
mode, and the traced drain's cost per job over plain in microseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks import servers
from benchmarks.compare import measure

MODES = ("plain", "imported", "traced")


def prepare(mode: str) -> None:
    """Set the child up for ``mode`` before anything runs."""
    if mode == "plain":
        return
    from lockgate.otel import LockgateInstrumentor

    if mode == "imported":
        return
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Nowhere(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Nowhere()))
    LockgateInstrumentor().instrument(tracer_provider=provider)


def child(url: str, mode: str, jobs: int, concurrency: int) -> dict[str, float]:
    prepare(mode)
    figures = asyncio.run(measure(url, jobs, concurrency))
    # redis-py imports opentelemetry-api itself when it is installed (its observability
    # module): what plain must not have is lockgate's instrumentation.
    if mode == "plain" and "lockgate.integrations.otel" in sys.modules:
        raise RuntimeError("lockgate imported its instrumentation without lockgate.otel")
    return figures


def run_mode(mode: str, jobs: int, concurrency: int) -> dict[str, float]:
    with servers.private_server() as server:
        env = {**os.environ, "PYTHONPATH": f"{Path('src').resolve()}{os.pathsep}{Path.cwd()}"}
        argv = [sys.executable, "-m", "benchmarks.otel_cost", "--child", server.url, mode]
        argv += ["--jobs", str(jobs), "--concurrency", str(concurrency)]
        out = subprocess.run(argv, env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"the {mode} run failed:\n{out.stderr}")
    figures: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.otel_cost", description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--child", nargs=2, metavar=("URL", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child, args.jobs, args.concurrency)))
        return
    modes: list[str] = ["plain", *(m for m in args.modes if m != "plain")]
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    for i in range(args.runs):
        for mode in modes:
            figures = run_mode(mode, args.jobs, args.concurrency)
            runs[mode].append(figures)
            shown = ", ".join(f"{key} {value:,.1f}" for key, value in figures.items())
            print(f"run {i + 1} {mode}: {shown}", flush=True)
    medians = {
        mode: {key: statistics.median(r[key] for r in runs[mode]) for key in runs[mode][0]}
        for mode in modes
    }
    plain = medians["plain"]
    print(f"\nmedians of {args.runs} interleaved runs, {args.jobs:,} plain jobs")
    print("| mode | drain, jobs/s | vs plain | drain, us/job | enqueue, us/job |")
    print("| --- | --: | --: | --: | --: |")
    for mode in modes:
        m = medians[mode]
        print(f"| {mode} | {m['jobs_per_s']:,.0f} | {m['jobs_per_s'] / plain['jobs_per_s']:.3f} "
              f"| {1e6 / m['jobs_per_s']:.1f} | {m['enqueue_us']:.1f} |")  # fmt: skip
    if "traced" in medians:
        cost = 1e6 / medians["traced"]["jobs_per_s"] - 1e6 / plain["jobs_per_s"]
        enqueue = medians["traced"]["enqueue_us"] - plain["enqueue_us"]
        print(f"\ntraced over plain: drain +{cost:.1f} us per job, enqueue +{enqueue:.1f} us "
              "per job")  # fmt: skip


if __name__ == "__main__":
    main()
