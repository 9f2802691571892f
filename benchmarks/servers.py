"""The Redis the benchmark runs against: a private server per library, or the user's URL.

A private server (``redis-server`` from PATH, the binary ``redis-benchmark`` ships with;
else lockgate's embedded valkey) starts empty for each library, so its memory figures
are that library's alone, and is flushed between runs. On a user's server nothing is
flushed: every key that appeared during a run is deleted after it, by comparing SCANs,
so point ``--url`` at a database number nothing else writes to while the run lasts.
Scripts and functions the libraries load (``SCRIPT LOAD``, ``FUNCTION LOAD``) stay.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

log = logging.getLogger(__name__)
START_TIMEOUT = 10.0


@dataclass
class Server:
    """A server to run one library against.

    Attributes:
        url: where it listens.
        private: started by the benchmark (flushed freely) or the user's (never flushed).
        label: what it is, for the results.
    """

    url: str
    private: bool
    label: str
    _known: set[bytes] = field(default_factory=set)

    def client(self) -> redis.Redis:
        """A fresh client (the caller closes it)."""
        return redis.Redis.from_url(self.url)

    def info(self) -> dict[str, Any]:
        """``INFO server`` and ``INFO memory``."""
        with contextlib.closing(self.client()) as client:
            return {**client.info("server"), **client.info("memory")}

    def remember(self) -> None:
        """Note the keys present now; ``reset`` deletes any others (user servers only)."""
        if not self.private:
            with contextlib.closing(self.client()) as client:
                self._known = set(client.scan_iter(count=1000))

    def reset(self) -> int:
        """Remove what the last run left: FLUSHALL on a private server, else new keys.

        Returns:
            keys deleted on a user's server (0 on a private one).
        """
        with contextlib.closing(self.client()) as client:
            if self.private:
                client.flushall()
                return 0
            stale = [key for key in client.scan_iter(count=1000) if key not in self._known]
            for start in range(0, len(stale), 500):
                client.unlink(*stale[start : start + 500])
            return len(stale)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_up(url: str, timeout: float = START_TIMEOUT) -> None:
    """Block until ``url`` answers PING."""
    deadline = time.monotonic() + timeout
    with contextlib.closing(redis.Redis.from_url(url)) as client:
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


@contextlib.contextmanager
def private_server() -> Iterator[Server]:
    """A new, empty server on a free loopback port, stopped and deleted afterwards."""
    binary = shutil.which("redis-server")
    if binary is None:
        with _embedded() as server:
            yield server
        return
    port = free_port()
    data = Path(tempfile.mkdtemp(prefix="lockgate-bench-"))
    argv = [
        binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
        "--appendonly", "no", "--dir", str(data), "--logfile", str(data / "redis.log"),
    ]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        wait_until_up(url)
        yield Server(url, True, f"private redis-server on 127.0.0.1:{port}")
    finally:
        process.terminate()
        process.wait(10)
        shutil.rmtree(data, ignore_errors=True)


@contextlib.contextmanager
def _embedded() -> Iterator[Server]:
    import sys

    src = str(Path(__file__).resolve().parent.parent / "src")
    if src not in sys.path:
        sys.path.insert(0, src)  # this checkout's lockgate, installed or not
    from lockgate.integrations.embedded import EmbeddedServer

    with EmbeddedServer() as embedded:
        yield Server(embedded.url, True, f"private embedded valkey on port {embedded.port}")


@contextlib.contextmanager
def user_server(url: str) -> Iterator[Server]:
    """The user's server: checked, never flushed."""
    wait_until_up(url, timeout=2.0)
    yield Server(url, False, f"{masked(url)} (user's server; new keys deleted after each run)")


def masked(url: str) -> str:
    """``url`` without its password."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))
