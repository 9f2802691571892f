"""The lockgate variants' figures, as tables, and the target each figure must meet.

Read from the results alone (``results["lockgate_variants"]``, the lockgate peer's
summary and the ceiling), so a report can be redrawn from ``results.json``. ``sections``
gives the tables (title, headers, rows of text) that ``report`` prints and ``markdown``
writes; ``targets`` the one-line verdicts. No I/O here.
"""

from __future__ import annotations

from typing import Any

from benchmarks import variants
from benchmarks.variants import HEADLINE

MB = 1024 * 1024
Section = tuple[str, tuple[str, ...], list[list[str]]]

DRAIN_HEADERS = (
    "variant", "backend", "tasks", "conc.", "processes", "drain jobs/s", "% of plain",
    "x fastest peer", "round trips/job", "Redis B/job left", "worker RSS MB",
)  # fmt: skip
LATENCY_HEADERS = (
    "backend", "conc.", "critical p50 ms", "p99 ms", "p99.9 ms", "max ms", "started",
    "low jobs/s meanwhile", "low jobs left",
)  # fmt: skip
ENQUEUE_HEADERS = ("lockgate", "jobs/s", "bare redis-py", "bare jobs/s", "share", "target")


def _entries(results: dict[str, Any], kind: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    found = (results.get("lockgate_variants") or {}).get("variants") or {}
    return [(e["variant"], e) for e in found.values() if e.get("variant", {}).get("kind") == kind]


def _summary(entry: dict[str, Any] | None) -> dict[str, Any]:
    return (entry or {}).get("summary") or {}


def fastest_peer(results: dict[str, Any]) -> tuple[str, float] | None:
    """The peer (not lockgate) with the highest drain in this run, and its jobs/s."""
    drains = [(name, _summary(e).get("drain")) for name, e in results["peers"].items()
              if name != "lockgate"]  # fmt: skip
    measured = [(name, rate) for name, rate in drains if rate]
    return max(measured, key=lambda pair: pair[1]) if measured else None


def _num(value: float | None, spec: str = ",.0f", suffix: str = "") -> str:
    return "—" if value is None else f"{value:{spec}}{suffix}"


def drain_figures(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One dict per drain variant: settings, jobs/s, ratios, round trips, memory left."""
    entries = _entries(results, "drain")
    by_name = {v["name"]: e for v, e in entries}
    peer = fastest_peer(results)
    rows = []
    for variant, entry in entries:
        s = _summary(entry)
        drain = s.get("drain")
        plain = _summary(by_name.get(variant["plain"] or "")).get("drain")
        rows.append({
            **variant,
            "concurrency": (entry.get("profile") or {}).get("concurrency", variant["concurrency"]),
            "drain": drain,
            "vs_plain": drain / plain if drain and plain else None,
            "vs_peer": drain / peer[1] if drain and peer and variant["idempotent"] else None,
            "round_trips_per_job": s.get("round_trips_per_job"),
            "bytes_left_per_job": s.get("bytes_left_per_job"),
            "rss_bytes": s.get("rss_bytes"),
            "error": "; ".join((entry.get("errors") or {}).values()) or entry.get("error"),
        })  # fmt: skip
    return rows


def latency_figures(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One dict per sweep row: backend, concurrency, critical tail, low jobs meanwhile."""
    rows = []
    for variant, entry in _entries(results, "latency"):
        s = _summary(entry)
        rows.append({**variant, **{k: s.get(k) for k in (
            "p50_ms", "p99_ms", "p999_ms", "max_ms", "critical_started", "critical_sent",
            "low_rate_meanwhile", "low_left")},
            "error": "; ".join((entry.get("errors") or {}).values()) or entry.get("error"),
        })  # fmt: skip
    return rows


def enqueue_figures(results: dict[str, Any]) -> list[dict[str, Any]]:
    """lockgate's enqueue rates (the headline row) against the bare redis-py loops."""
    s = _summary(results["peers"].get("lockgate"))
    ceiling = (results.get("ceiling") or {}).get("median") or {}
    rows = []
    for key, label, bare_key, bare_label, target in (
        ("enqueue_one", "enqueue 1-by-1", "xadd_one", "XADD one by one", variants.TARGET_ONE),
        ("enqueue_bulk", "bulk enqueue", "xadd_pipelined", "XADD pipelined",
         variants.TARGET_BULK),
    ):  # fmt: skip
        rate, bare = s.get(key), ceiling.get(bare_key)
        share = rate / bare if rate and bare else None
        rows.append({"label": label, "rate": rate, "bare_label": bare_label, "bare": bare,
                     "share": share, "target": target})  # fmt: skip
    return rows


def _drain_row(f: dict[str, Any], peer: tuple[str, float] | None) -> list[str]:
    if f["error"] and f["drain"] is None:
        return [f["name"], f["backend"], "—", "—", str(f["processes"]), "failed (see below)",
                *["—"] * 5]  # fmt: skip
    return [
        f["name"], f["backend"], "idempotent" if f["idempotent"] else "plain",
        _num(f["concurrency"], "d"), str(f["processes"]), _num(f["drain"]),
        _num(f["vs_plain"], ".0%"),
        _num(f["vs_peer"], ".1f", f"x {peer[0]}" if peer else "x"),
        _num(f["round_trips_per_job"], ".2f"), _num(f["bytes_left_per_job"], ",.0f"),
        _num(f["rss_bytes"] and f["rss_bytes"] / MB, ".0f"),
    ]  # fmt: skip


def _latency_row(f: dict[str, Any]) -> list[str]:
    if f["error"] and f["p50_ms"] is None:
        return [f["backend"], _num(f["concurrency"], "d"), "failed (see below)", *["—"] * 6]
    started = f"{f['critical_started']}/{f['critical_sent']}"
    return [
        f["backend"], _num(f["concurrency"], "d"), _num(f["p50_ms"], ",.1f"),
        _num(f["p99_ms"], ",.1f"), _num(f["p999_ms"], ",.1f"), _num(f["max_ms"], ",.1f"),
        started, _num(f["low_rate_meanwhile"]), _num(f["low_left"]),
    ]  # fmt: skip


def _enqueue_row(f: dict[str, Any]) -> list[str]:
    return [f["label"], _num(f["rate"]), f["bare_label"], _num(f["bare"]),
            _num(f["share"], ".0%"), f"≥ {f['target']:.0%}"]  # fmt: skip


def sections(results: dict[str, Any]) -> list[Section]:
    """The variants' tables: drain, critical-latency sweep, enqueue against the ceiling."""
    if not results.get("lockgate_variants"):
        return []
    peer = fastest_peer(results)
    drains = drain_figures(results)
    sweep = latency_figures(results)
    found: list[Section] = []
    if drains:
        found.append(("lockgate variants: drain (round trips counted in the worker's client)",
                      DRAIN_HEADERS, [_drain_row(f, peer) for f in drains]))  # fmt: skip
    if sweep:
        sent = sweep[0]["critical_sent"] or "?"
        found.append((f"lockgate variants: critical enqueue-to-start, {sent} critical jobs, "
                      "idempotent tasks, low jobs flowing", LATENCY_HEADERS,
                      [_latency_row(f) for f in sweep]))  # fmt: skip
    if "lockgate" in results["peers"]:
        found.append(("lockgate enqueue against the ceiling (headline row)", ENQUEUE_HEADERS,
                      [_enqueue_row(f) for f in enqueue_figures(results)]))  # fmt: skip
    return found


def _verdict(figure: str, value: float | None, measured: str, target: str,
             met: bool | None) -> dict[str, Any]:  # fmt: skip
    return {"figure": figure, "value": value, "measured": measured, "target": target,
            "met": None if value is None else met}  # fmt: skip


def reference(drains: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The idempotent drain the targets are read on: the headline setup, else (smoke) the
    first idempotent variant compared with a plain one."""
    if HEADLINE in drains:
        return drains[HEADLINE]
    return next((f for f in drains.values() if f["plain"]), {})


def marker_bytes(results: dict[str, Any], ref: dict[str, Any]) -> tuple[float | None, str]:
    """Redis bytes a drained idempotent job leaves (its done marker), and how measured.

    From the memory run (the headline row drains ``memory_jobs`` idempotent jobs, 100,000
    by default: the size the target is set at, where the done-marker buckets' fixed
    overhead of about 1 MB is spread thin), else from the drain variant.
    """
    memory = _summary(results["peers"].get("lockgate")).get("memory")
    jobs = results.get("settings", {}).get("memory_jobs")
    if memory and jobs:
        per_job = (memory["after"] - memory["empty"]) / jobs
        return per_job, f"memory run, {jobs:,} idempotent jobs drained"
    left = ref.get("bytes_left_per_job")
    return left, f"{ref.get('name', 'drain')}, {results['settings']['jobs']:,} jobs drained"


def _drain_targets(results: dict[str, Any], drains: dict[str, dict[str, Any]]) -> list[Any]:
    ref = reference(drains)
    peer = fastest_peer(results)
    vs_plain = ref.get("vs_plain")
    compared = [f"{f['name']} {f['vs_plain']:.1%}" for f in drains.values()
                if f["vs_plain"] is not None]  # fmt: skip
    vs_peer = ref.get("vs_peer")
    trips = [(f["round_trips_per_job"], f["name"]) for f in drains.values()
             if f["round_trips_per_job"] is not None and (f["concurrency"] or 0) >= 8]  # fmt: skip
    worst = max(trips) if trips else None
    left, where = marker_bytes(results, ref)
    return [
        _verdict("drain, idempotent as % of plain", vs_plain,
                 ", ".join(compared) or "—", f"≥ {variants.TARGET_DRAIN_VS_PLAIN:.0%}",
                 vs_plain is not None and vs_plain >= variants.TARGET_DRAIN_VS_PLAIN),
        _verdict("drain, idempotent as a multiple of the fastest peer", vs_peer,
                 f"{ref['name']} {vs_peer:.1f}x {peer[0]}" if vs_peer and peer
                 else "— (no peer measured)", f"≥ {variants.TARGET_DRAIN_VS_PEER:.0f}x",
                 vs_peer is not None and vs_peer >= variants.TARGET_DRAIN_VS_PEER),
        _verdict("client round trips per job (drain, concurrency ≥ 8), worst",
                 worst and worst[0], f"{worst[0]:.2f} ({worst[1]})" if worst else "—",
                 f"≤ {variants.TARGET_ROUND_TRIPS}",
                 worst is not None and worst[0] <= variants.TARGET_ROUND_TRIPS),
        _verdict("done-marker memory: Redis bytes left per idempotent job after a drain",
                 left, f"{left:,.0f} B ({where})" if left is not None else "—",
                 f"≤ {variants.TARGET_MARKER_BYTES:.0f} B",
                 left is not None and left <= variants.TARGET_MARKER_BYTES),
    ]  # fmt: skip


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One verdict per figure the performance issue sets a target for."""
    if not results.get("lockgate_variants"):
        return []
    found = _drain_targets(results, {f["name"]: f for f in drain_figures(results)})
    sweep = latency_figures(results)
    p99 = [(f["p99_ms"], f"{f['backend']} c{f['concurrency']}") for f in sweep
           if f["p99_ms"] is not None]  # fmt: skip
    slowest = max(p99) if p99 else None
    missing = f", {len(sweep) - len(p99)} row(s) not measured" if len(p99) < len(sweep) else ""
    found.append(_verdict(
        "critical p99 at every concurrency and backend, worst", slowest and slowest[0],
        f"{slowest[0]:.2f} ms ({slowest[1]}{missing})" if slowest else "—",
        f"≤ {variants.TARGET_P99_MS:.0f} ms",
        slowest is not None and slowest[0] <= variants.TARGET_P99_MS))  # fmt: skip
    for f in enqueue_figures(results):
        share = f["share"]
        found.append(_verdict(
            f"{f['label']} as % of bare {f['bare_label']}", share, _num(share, ".1%"),
            f"≥ {f['target']:.0%}", share is not None and share >= f["target"]))  # fmt: skip
    return found


def errors(results: dict[str, Any]) -> list[tuple[str, str]]:
    """What failed among the variants: (variant and measure, error) pairs."""
    found = (results.get("lockgate_variants") or {}).get("variants") or {}
    return [(f"{name} {measure}", error) for name, entry in found.items()
            for measure, error in (entry.get("errors") or {}).items()]  # fmt: skip


def target_lines(results: dict[str, Any]) -> list[str]:
    """The verdicts as lines: met, missed, or not measured."""
    marks = {True: "met", False: "MISSED", None: "not measured"}
    return [f"{v['figure']}: {v['measured']} (target {v['target']}): {marks[v['met']]}"
            for v in targets(results)]  # fmt: skip


def smoke_round_trips(results: dict[str, Any]) -> tuple[float | None, str]:
    """The smoke check: round trips per job of the idempotent drain at concurrency 8."""
    found = {f["name"]: f for f in drain_figures(results)}.get("lockgate c8") or {}
    value = found.get("round_trips_per_job")
    limit = variants.SMOKE_MAX_ROUND_TRIPS
    if value is None:
        why = found.get("error") or "no run"
        return None, f"smoke FAILED: round trips per job not measured ({why})"
    verdict = "ok" if value <= limit else "FAILED"
    return value, (f"smoke {verdict}: lockgate drain of {variants.SMOKE_DRAIN_JOBS:,} idempotent "
                   f"jobs at concurrency 8 made {value:.2f} client round trips per job "
                   f"(limit {limit})")  # fmt: skip
