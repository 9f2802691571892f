"""lockgate variants: the headline setup with one setting changed, and the targets.

A variant is the lockgate adapter under environment settings (read by
``benchmarks.peers.lockgate`` at import): plain or idempotent tasks, concurrency,
backend, worker processes. Every variant's worker counts its client round trips
(``benchmarks.roundtrips``). The driver runs each variant's steps as it runs a peer's;
this module says which variants there are (``plan``), what the targets are, and what a
variant adds to a summary; ``targets`` reads the results against them. No I/O here.

Drain variants run ``--variant-runs`` times each (median); the critical-latency sweep
runs once per row with ``--sweep-critical`` critical jobs, on a backlog large enough to
last the whole window (``sweep_low_jobs``). ``--smoke`` runs a small set, among them the
drain of ``SMOKE_DRAIN_JOBS`` idempotent jobs at concurrency 8 that CI checks.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.runner import CRITICAL_INTERVAL

HEADLINE = "lockgate"  # the headline row's setup: idempotent, the adapter's concurrency
SWEEP_CONCURRENCY = (8, 32, 100)
BACKENDS = ("streams", "sorted")
SMOKE_DRAIN_JOBS = 2_000  # at concurrency 8, idempotent, round trips counted
SMOKE_MAX_ROUND_TRIPS = 1.5  # per job: above it, ``--smoke`` fails
LOW_RATE_HEADROOM = 15_000  # low jobs/s a worker may reach: the sweep's backlog must last

TARGET_DRAIN_VS_PLAIN = 0.75
TARGET_DRAIN_VS_PEER = 3.0
TARGET_ROUND_TRIPS = 1.2
TARGET_P99_MS = 5.0
TARGET_BULK = 0.65
TARGET_ONE = 0.90
TARGET_MARKER_BYTES = 64.0


@dataclass(frozen=True)
class Step:
    """One measurement of a variant: ``runs`` runs of ``measure`` with ``jobs`` jobs."""

    measure: str
    runs: int
    jobs: int
    critical: int


@dataclass(frozen=True, kw_only=True)
class Variant:
    """lockgate with some settings changed; None keeps the adapter's default."""

    name: str
    kind: str  # "drain" or "latency"
    steps: tuple[Step, ...]
    idempotent: bool = True
    concurrency: int | None = None
    backend: str = "streams"
    processes: int = 1
    plain: str | None = None  # the plain variant this idempotent one is compared with

    def env(self) -> dict[str, str]:
        """What the runner and its worker get on top of the usual environment."""
        env = {
            "BENCH_LG_IDEMPOTENT": "1" if self.idempotent else "0",
            "BENCH_LG_BACKEND": self.backend,
            "BENCH_LG_PROCESSES": str(self.processes),
            "BENCH_COUNT_ROUND_TRIPS": "1",
        }
        if self.concurrency is not None:
            env["BENCH_LG_CONCURRENCY"] = str(self.concurrency)
        if self.processes > 1:
            env["BENCH_PROBE_FLUSH"] = "1"  # see probe: batches cannot span processes
        return env


def sweep_low_jobs(latency_jobs: int, critical: int) -> int:
    """Low jobs to queue so that ``latency_jobs`` still wait when the last critical is sent."""
    window = critical * CRITICAL_INTERVAL * 1.2
    return latency_jobs + math.ceil(window * LOW_RATE_HEADROOM / 100) * 100


def _drain(name: str, jobs: int, runs: int, **settings: Any) -> Variant:
    return Variant(name=name, kind="drain", steps=(Step("drain", runs, jobs, 0),), **settings)


def plan(*, jobs: int, runs: int, latency_jobs: int, critical: int, smoke: bool) -> list[Variant]:
    """The variants, in the order they run and are reported."""
    if smoke:
        n, low = SMOKE_DRAIN_JOBS, latency_jobs
        return [
            _drain("lockgate plain c8", n, 1, idempotent=False, concurrency=8),
            _drain("lockgate c8", n, 1, concurrency=8, plain="lockgate plain c8"),
            _drain("lockgate sorted", jobs, 1, backend="sorted"),
            _drain("lockgate 2 processes", jobs, 1, processes=2),
            *(Variant(name=f"latency {backend} c8", kind="latency", backend=backend,
                      concurrency=8, steps=(Step("latency", 1, low, critical),))
              for backend in BACKENDS),
        ]  # fmt: skip
    low = sweep_low_jobs(latency_jobs, critical)
    drains = [
        _drain("lockgate plain", jobs, runs, idempotent=False),
        _drain(HEADLINE, jobs, runs, plain="lockgate plain"),
        _drain("lockgate plain c8", jobs, runs, idempotent=False, concurrency=8),
        _drain("lockgate c8", jobs, runs, concurrency=8, plain="lockgate plain c8"),
        _drain("lockgate sorted", jobs, runs, backend="sorted"),
        _drain("lockgate 2 processes", jobs, runs, processes=2),
    ]
    sweep = [
        Variant(name=f"latency {backend} c{c}", kind="latency", backend=backend,
                concurrency=c, steps=(Step("latency", 1, low, critical),))
        for backend in BACKENDS for c in SWEEP_CONCURRENCY
    ]  # fmt: skip
    return drains + sweep


def describe(variant: Variant) -> dict[str, Any]:
    """What results.json keeps about a variant (the report reads it back from there)."""
    kept = asdict(variant)
    kept.pop("steps")
    return kept


def summarize_extra(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians the variants add to a peer's summary: round trips, tails, memory left."""
    drains, latency = runs.get("drain", []), runs.get("latency", [])
    extra: dict[str, Any] = {}
    for key, source in (("round_trips_per_job", drains), ("p999_ms", latency),
                        ("max_ms", latency), ("low_left", latency)):  # fmt: skip
        values = [r[key] for r in source if r.get(key) is not None]
        extra[key] = statistics.median(values) if values else None
    left = [(r["memory"]["after"] - r["memory"]["empty"]) / r["jobs"] for r in drains
            if r.get("jobs")]  # fmt: skip
    extra["bytes_left_per_job"] = statistics.median(left) if left else None
    return extra
