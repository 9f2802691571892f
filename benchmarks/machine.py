"""What the benchmark ran on: CPU, memory, load, Python, Redis, the lockgate checkout."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return 0.0


def lockgate_version() -> str:
    """The checkout's version and commit (lockgate runs from ``src/``, not installed)."""
    import tomllib

    version = str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "src"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return version
    return f"{version} ({commit}{'+changes' if dirty else ''})"


def describe() -> dict[str, Any]:
    """The machine, now."""
    load = os.getloadavg()
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_gib": round(_memory_gib(), 1),
        "load_average": [round(x, 2) for x in load],
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "lockgate": lockgate_version(),
    }
