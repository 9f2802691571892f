"""Worker processes: start one in its own session, read its peak memory, stop it.

Peak memory is read from ``/proc`` (Linux): ``VmHWM``, the high-water mark of resident
memory, summed over the worker and every process it started (a supervisor and its
children, as dramatiq and taskiq run).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO


def start(argv: list[str], env: Mapping[str, str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session (so the whole tree can be signalled at once).

    Its pid goes to ``$BENCH_WORKER_PIDFILE`` when set, so the driver can still stop it
    if this process dies first.
    """
    process = subprocess.Popen(
        argv, env=dict(env), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    pidfile = env.get("BENCH_WORKER_PIDFILE")
    if pidfile:
        Path(pidfile).write_text(str(process.pid))
    return process


def kill_session(pidfile: Path) -> None:
    """SIGKILL the session of the worker whose pid ``pidfile`` holds, if it still runs."""
    try:
        pid = int(pidfile.read_text())
        os.killpg(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields follow the last ')'.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    tree = _children()
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(tree.get(current, []))
    return found


def peak_rss_bytes(pid: int) -> int:
    """Sum of ``VmHWM`` over ``pid``'s process tree (0 when it is gone)."""
    total = 0
    for member in descendants(pid):
        try:
            status = Path(f"/proc/{member}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1]) * 1024
    return total


def stop(process: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """SIGTERM the worker's session, then SIGKILL whatever is left after ``grace``."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    # Children may outlive a parent that exited: sweep the session in any case.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def wait_for(check: Callable[[], bool], timeout: float, process: subprocess.Popen[bytes]) -> bool:
    """Poll ``check()`` every 10 ms until true; False on timeout or when the worker died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        if process.poll() is not None:
            return bool(check())
        time.sleep(0.01)
    return False
