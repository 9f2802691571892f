"""One virtual environment per library, ``benchmarks/.venv-<name>`` (git-ignored).

Each gets its library with the extras its docs recommend for Redis, hiredis, uvloop for
the asyncio ones, and redis-py for the harness's probe. Nothing here touches the
project's own dependencies. An environment is rebuilt only when its requirement list
changes (it is written into the environment as ``bench-requirements.txt``).

A Node.js library (``NODE_PACKAGES``: BullMQ) gets a virtual environment with the harness
only (its runner and probe reads are Python), and its npm packages in a folder outside
the repository, ``$BENCH_NODE_HOME/<name>`` (default ``~/.cache/lockgate-bench/<name>``),
installed with ``npm install`` and rebuilt only when its package list changes (written
there as ``bench-packages.txt``). Without ``node`` and ``npm`` on PATH it is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
INSTALL_TIMEOUT = 900
NODE_HOME_ENV = "BENCH_NODE_HOME"

PEER_REQUIREMENTS: dict[str, list[str]] = {
    "rq": ["rq", "hiredis"],
    "arq": ["arq", "hiredis", "uvloop"],
    "dramatiq": ["dramatiq[redis]", "hiredis"],
    "celery": ["celery[redis]", "hiredis"],
    # saq 0.26 imports typing_extensions without declaring it.
    "saq": ["saq[redis,hiredis]", "uvloop", "typing_extensions"],
    "streaq": ["streaq", "uvloop"],
    "taskiq": ["taskiq", "taskiq-redis", "hiredis", "uvloop"],
    "bullmq": [],  # Node.js: the harness only here, the library in NODE_PACKAGES
}
HARNESS = ["redis"]  # the probe's client, in every environment
NODE_PACKAGES: dict[str, list[str]] = {
    # bullmq 6 takes its Redis client as an optional peer dependency: ioredis, pinned to
    # the version bullmq 6.7.0 is built and tested with.
    "bullmq": ["bullmq@6.7.0", "ioredis@5.11.1"],
}


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
    """Build ``peer``'s environment (and npm folder) unless current; return its python.

    Raises:
        InstallError: venv, pip, node or npm failed or is missing (one line says why).
    """
    if peer in NODE_PACKAGES:
        ensure_node(peer, log)
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
            _step(argv, out, log, what=" ".join(argv[1:4]))
    marker.write_text(wanted)
    return python


def _step(argv: list[str], out: IO[bytes], log: Path, what: str, cwd: Path | None = None) -> None:
    """Run one install command, its output appended to ``log``; InstallError if it fails."""
    try:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
                              timeout=INSTALL_TIMEOUT, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise InstallError(f"{what} timed out after {INSTALL_TIMEOUT} s") from None
    except OSError as e:
        raise InstallError(f"{what} could not start: {e}") from None
    if done.returncode != 0:
        out.flush()
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise InstallError(f"{what} failed: {' | '.join(tail)}")


def node_directory(peer: str) -> Path:
    """Where ``peer``'s npm packages live (``node_modules`` inside), outside the repository."""
    home = os.environ.get(NODE_HOME_ENV) or Path.home() / ".cache" / "lockgate-bench"
    return Path(home).expanduser().resolve() / peer


def ensure_node(peer: str, log: Path) -> Path:
    """Install ``peer``'s npm packages unless current; return their folder.

    Raises:
        InstallError: node or npm is not on PATH, or ``npm install`` failed.
    """
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        missing = " and ".join(name for name, path in (("node", node), ("npm", npm)) if not path)
        raise InstallError(f"{missing} not found on PATH ({peer} runs on Node.js)")
    folder = node_directory(peer)
    marker = folder / "bench-packages.txt"
    wanted = "\n".join(NODE_PACKAGES[peer]) + "\n"
    if marker.exists() and marker.read_text() == wanted and (folder / "node_modules").is_dir():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)
    shutil.rmtree(folder / "node_modules", ignore_errors=True)
    (folder / "package-lock.json").unlink(missing_ok=True)
    manifest = {"name": f"lockgate-bench-{peer}", "private": True}
    (folder / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
    with log.open("ab") as out:
        argv = [npm, "install", "--no-audit", "--no-fund", "--save-exact", *NODE_PACKAGES[peer]]
        _step(argv, out, log, what=f"npm install in {folder}", cwd=folder)
        # The packages load under this node (a broken or too old one fails here, not mid-run).
        check = [node, "-e", "for (const p of process.argv.slice(1)) require(p)"]
        names = [spec.rsplit("@", 1)[0] for spec in NODE_PACKAGES[peer]]
        _step([*check, *names], out, log, what=f"node loading {', '.join(names)}", cwd=folder)
    marker.write_text(wanted)
    return folder
