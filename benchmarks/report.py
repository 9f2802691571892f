"""The results: a rich table on the terminal, results.json, RESULTS.md, results.png."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks import targets

MB = 1024 * 1024
HEADERS = (
    "library", "version", "enqueue 1-by-1 jobs/s", "bulk enqueue jobs/s", "drain jobs/s",
    "conc.", "critical p50 / p99 ms", "low jobs/s meanwhile", "worker RSS MB",
    "Redis MB empty → queued → drained",
)  # fmt: skip
FOOTNOTE = (
    "(n%): share of the ceiling rows (bare redis-py: XADD one by one, XADD pipelined, "
    "XREADGROUP COUNT 100 + XACK; redis-benchmark: XADD from 1 and from 50 clients). "
    "†: no bulk API, see the library's configuration."
)
CEILING_OF = {"enqueue_one": "xadd_one", "enqueue_bulk": "xadd_pipelined",
              "drain": "xreadgroup_xack"}  # fmt: skip


def brief(measure: str, outcome: dict[str, Any]) -> str:
    """One line about one run, for the progress log."""
    if measure == "latency":
        return (f"critical p50 {outcome['p50_ms']:.1f} ms p99 {outcome['p99_ms']:.1f} ms "
                f"p99.9 {outcome['p999_ms']:.1f} ms max {outcome['max_ms']:.1f} ms, "
                f"low {outcome['low_rate_meanwhile']:,.0f}/s meanwhile")  # fmt: skip
    if measure == "ceiling":
        return (f"XADD {outcome['xadd_one']:,.0f}/s, pipelined {outcome['xadd_pipelined']:,.0f}/s, "
                f"XREADGROUP+XACK {outcome['xreadgroup_xack']:,.0f}/s")  # fmt: skip
    line = f"{outcome['rate']:,.0f} jobs/s"
    if measure in ("drain", "memory"):
        memory = outcome["memory"]
        line += (f", RSS {outcome['rss_bytes'] / MB:.0f} MB, Redis "
                 f"{memory['queued'] / MB:.1f} → {memory['after'] / MB:.1f} MB")  # fmt: skip
    if outcome.get("round_trips_per_job") is not None:
        line += f", {outcome['round_trips_per_job']:.2f} round trips/job"
    return line


def _rate(value: float | None, ceiling: float | None, mark: str = "") -> str:
    if value is None:
        return "—"
    text = f"{value:,.0f}{mark}"
    if ceiling:
        share = value / ceiling
        text += f" ({share:.1%})" if share < 0.1 else f" ({share:.0%})"
    return text


def _peer_row(name: str, entry: dict[str, Any], ceiling: dict[str, Any]) -> list[str]:
    if "error" in entry:
        return [name, "—", entry["error"][:60], *["—"] * (len(HEADERS) - 3)]
    s, profile = entry["summary"], entry.get("profile") or {}
    has_bulk = "no bulk API" not in profile.get("bulk", "")
    latency = "—"
    if s.get("p50_ms") is not None:
        latency = f"{s['p50_ms']:,.1f} / {s['p99_ms']:,.1f}"
        if s["critical_started"] < s["critical_sent"]:
            latency += f" ({s['critical_started']}/{s['critical_sent']} started)"
    memory = s.get("memory")
    redis_mb = (f"{memory['empty'] / MB:.1f} → {memory['queued'] / MB:.1f} → "
                f"{memory['after'] / MB:.1f}") if memory else "—"  # fmt: skip
    low = s.get("low_rate_meanwhile")
    return [
        name, entry.get("version") or "—",
        _rate(s["enqueue_one"], ceiling.get("xadd_one")),
        _rate(s["enqueue_bulk"], ceiling.get("xadd_pipelined"), "" if has_bulk else " †"),
        _rate(s["drain"], ceiling.get("xreadgroup_xack")),
        str(profile.get("concurrency", "—")), latency,
        f"{low:,.0f}" if low is not None else "—",
        f"{s['rss_bytes'] / MB:.0f}" if s.get("rss_bytes") else "—", redis_mb,
    ]  # fmt: skip


def _ceiling_rows(ceiling: dict[str, Any]) -> list[list[str]]:
    m = ceiling.get("median")
    if not m:
        return [["ceiling", "—", ceiling.get("error", "not measured"), *["—"] * 7]]
    blank = ["—"] * 5
    rows = [["ceiling: bare redis-py", ceiling.get("redis_py", ""), f"{m['xadd_one']:,.0f}",
             f"{m['xadd_pipelined']:,.0f}", f"{m['xreadgroup_xack']:,.0f}", *blank]]  # fmt: skip
    if m.get("redis_benchmark_c1"):
        rows.append(["ceiling: redis-benchmark", "XADD -c 1 / -c 50",
                     f"{m['redis_benchmark_c1']:,.0f}", f"{m['redis_benchmark_c50']:,.0f}",
                     "—", *blank])  # fmt: skip
    return rows


def rows(results: dict[str, Any]) -> list[list[str]]:
    """Every table row: the libraries, then the ceiling."""
    ceiling = results.get("ceiling", {}).get("median") or {}
    body = [_peer_row(name, entry, ceiling) for name, entry in results["peers"].items()]
    return body + _ceiling_rows(results.get("ceiling", {}))


def table(results: dict[str, Any]) -> Table:
    settings = results["settings"]
    grid = Table(
        title=(f"{settings['jobs']:,} jobs, {settings['latency_jobs']:,} low jobs waiting, "
               f"median of {settings['runs']} runs"),
        caption=FOOTNOTE,
    )  # fmt: skip
    for header in HEADERS:
        grid.add_column(header, justify="left" if header in ("library", "version") else "right")
    for row in rows(results):
        grid.add_row(*row)
    return grid


def simple_table(title: str, headers: tuple[str, ...], body: list[list[str]]) -> Table:
    grid = Table(title=title)
    for i, header in enumerate(headers):
        grid.add_column(header, justify="left" if i == 0 else "right")
    for row in body:
        grid.add_row(*row)
    return grid


def markdown_rows(headers: tuple[str, ...], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    cells = [[cell.replace("|", "\\|") for cell in row] for row in body]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])


def markdown_table(results: dict[str, Any]) -> str:
    return "\n".join([markdown_rows(HEADERS, rows(results)), "", FOOTNOTE])


def markdown(results: dict[str, Any]) -> str:
    from benchmarks.markdown import render

    return render(results, markdown_table(results))


def chart(results: dict[str, Any], out: Path) -> str:
    """Draw results.png through the chart module; a note on what happened."""
    python = results.get("chart_python")
    if not python:
        return "chart skipped: no interpreter"
    done = subprocess.run(
        [python, "-m", "benchmarks.chart", str(out / "results.json"), str(out / "results.png")],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
        check=False,
    )
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return f"chart skipped: {lines[-1] if lines else f'exit {done.returncode}'}"
    return f"chart: {out / 'results.png'}"


# Sections of RESULTS.md that other commands write (``benchmarks.partitions``,
# ``benchmarks.gate --record``, ``benchmarks.fairness --write``): a run of the peers keeps
# them as they are.
KEPT_SECTIONS = (
    "## Partitions on a 3-primary cluster",
    "## Regression gate",
    "## Fair shares inside a level (benchmarks.fairness)",
    "## Workflows (benchmarks.flows)",
)


def kept_sections(text: str) -> str:
    """The sections of ``text`` that a run of the peers keeps, in their order (pure)."""
    kept = []
    for heading in KEPT_SECTIONS:
        at = text.find(heading + "\n")
        if at < 0:
            continue
        end = text.find("\n## ", at + len(heading))
        kept.append(text[at : end + 1 if end >= 0 else len(text)].rstrip("\n") + "\n")
    return "\n".join(kept)


def write(results: dict[str, Any], out: Path, console: Console) -> None:
    """Print the table; write results.json, RESULTS.md and results.png into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    console.print(table(results))
    for name, entry in results["peers"].items():
        for measure, error in (entry.get("errors") or {}).items():
            console.print(f"[red]{name} {measure}: {error}[/red]")
    for title, headers, body in targets.sections(results):
        console.print(simple_table(title, headers, body))
    for failed, error in targets.errors(results):
        console.print(f"[red]{failed}: {error}[/red]", highlight=False)
    for line in targets.target_lines(results):
        console.print(f"target: {line}", markup=False, highlight=False)
    if results.get("lockgate_variants"):
        results["lockgate_targets"] = targets.targets(results)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    results["chart"] = chart(results, out)
    console.print(results["chart"])
    written = out / "RESULTS.md"
    kept = kept_sections(written.read_text()) if written.exists() else ""
    written.write_text(markdown(results).rstrip("\n") + ("\n\n" + kept if kept else "\n"))
    console.print(f"wrote {out / 'results.json'} and {out / 'RESULTS.md'}")


def replace_section(path: Path, heading: str, text: str) -> None:
    """Put ``text`` in place of the Markdown file's section under ``heading`` (up to the
    next ``## ``), or after the file's end when it has none."""
    content = path.read_text()
    at = content.find(heading + "\n")
    if at < 0:
        path.write_text(content.rstrip("\n") + "\n\n" + text)
        return
    after = content.find("\n## ", at + len(heading))
    rest = content[after + 1 :] if after >= 0 else ""
    path.write_text(content[:at] + text + ("\n" + rest if rest else ""))
