"""results.png: throughput and critical latency side by side (matplotlib).

``python -m benchmarks.chart results.json results.png``, run by the driver in lockgate's
benchmark environment, where matplotlib is installed. Exits 3 when it is not.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

THROUGHPUT = (("enqueue_one", "enqueue 1-by-1"), ("enqueue_bulk", "bulk enqueue"),
              ("drain", "drain (1 worker)"))  # fmt: skip
LATENCY = (("p50_ms", "critical p50"), ("p99_ms", "critical p99"))


def measured(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: entry["summary"] for name, entry in results["peers"].items()
            if "summary" in entry}  # fmt: skip


def bars(axis: Any, names: list[str], series: list[tuple[str, list[float]]]) -> None:
    width = 0.8 / len(series)
    for i, (label, values) in enumerate(series):
        offsets = [x + (i - (len(series) - 1) / 2) * width for x in range(len(names))]
        axis.bar(offsets, values, width, label=label)
    axis.set_xticks(range(len(names)), names, rotation=30, ha="right")
    axis.set_yscale("log")
    axis.grid(axis="y", which="both", alpha=0.3)
    axis.legend(fontsize=8)


def draw(results: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summaries = measured(results)
    names = list(summaries)
    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 5.5))
    bars(left, names, [(label, [summaries[n].get(key) or 0 for n in names])
                       for key, label in THROUGHPUT])  # fmt: skip
    ceiling = (results.get("ceiling") or {}).get("median") or {}
    if ceiling.get("xreadgroup_xack"):
        left.axhline(ceiling["xreadgroup_xack"], color="grey", linestyle="--", linewidth=1,
                     label="bare XREADGROUP+XACK")  # fmt: skip
        left.legend(fontsize=8)
    left.set_title("Throughput, jobs/s (log scale, higher is better)")
    bars(right, names, [(label, [summaries[n].get(key) or 0 for n in names])
                        for key, label in LATENCY])  # fmt: skip
    for i, name in enumerate(names):
        profile = results["peers"][name].get("profile") or {}
        if profile.get("priorities", "").startswith("none"):
            top = summaries[name].get("p99_ms") or 0
            right.annotate("FIFO", (i, top), ha="center", va="bottom", fontsize=8)
    settings = results["settings"]
    right.set_title(f"Critical enqueue-to-start, ms, {settings['latency_jobs']:,} low jobs "
                    "waiting (log scale, lower is better)", fontsize=10)  # fmt: skip
    machine = results["machine"]
    figure.suptitle(f"{settings['jobs']:,} jobs, median of {settings['runs']} — "
                    f"{machine['nproc']} cores, Redis {results['redis']['version']}, "
                    f"{machine['date']}")  # fmt: skip
    figure.tight_layout()
    figure.savefig(out, dpi=110)


def main() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib is not installed here", file=sys.stderr)
        sys.exit(3)
    source, target = Path(sys.argv[1]), Path(sys.argv[2])
    draw(json.loads(source.read_text()), target)


if __name__ == "__main__":
    main()
