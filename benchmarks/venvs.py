"""One virtual environment per library, ``benchmarks/.venv-<name>`` (git-ignored).

Each gets its library with the extras its docs recommend for Redis, hiredis, uvloop for
the asyncio ones, and redis-py for the harness's probe. Nothing here touches the
project's own dependencies. An environment is rebuilt only when its requirement list
changes (it is written into the environment as ``bench-requirements.txt``).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
INSTALL_TIMEOUT = 900

PEER_REQUIREMENTS: dict[str, list[str]] = {
    "rq": ["rq", "hiredis"],
    "arq": ["arq", "hiredis", "uvloop"],
    "dramatiq": ["dramatiq[redis]", "hiredis"],
    "celery": ["celery[redis]", "hiredis"],
    # saq 0.26 imports typing_extensions without declaring it.
    "saq": ["saq[redis,hiredis]", "uvloop", "typing_extensions"],
    "streaq": ["streaq", "uvloop"],
    "taskiq": ["taskiq", "taskiq-redis", "hiredis", "uvloop"],
}
HARNESS = ["redis"]  # the probe's client, in every environment


class InstallError(Exception):
    """An environment could not be built; the message says why."""


def lockgate_requirements() -> list[str]:
    """lockgate's own dependencies (it runs from ``src/``), its ``fast`` extra, matplotlib."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    fast = project.get("optional-dependencies", {}).get("fast", [])
    return [*project["dependencies"], *fast, "matplotlib"]


def requirements(peer: str) -> list[str]:
    """What ``peer``'s environment holds."""
    listed = lockgate_requirements() if peer == "lockgate" else PEER_REQUIREMENTS[peer]
    return [*listed, *HARNESS]


def directory(peer: str) -> Path:
    """Where ``peer``'s environment lives."""
    return ROOT / f".venv-{peer}"


def ensure(peer: str, log: Path) -> Path:
    """Build ``peer``'s environment unless it is current; return its python.

    Raises:
        InstallError: venv or pip failed (the tail of pip's output is the message).
    """
    venv = directory(peer)
    python = venv / "bin" / "python"
    marker = venv / "bench-requirements.txt"
    wanted = "\n".join(requirements(peer)) + "\n"
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    with log.open("ab") as out:
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(venv)],
            [str(python), "-m", "pip", "install", "--quiet", *requirements(peer)],
        ]
        for argv in steps:
            try:
                done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT,
                                      timeout=INSTALL_TIMEOUT, check=False)  # fmt: skip
            except subprocess.TimeoutExpired:
                raise InstallError(f"{argv[2]} timed out after {INSTALL_TIMEOUT} s") from None
            if done.returncode != 0:
                out.flush()
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                raise InstallError(f"{' '.join(argv[1:4])} failed: {' | '.join(tail)}")
    marker.write_text(wanted)
    return python
