"""A command run at a real pseudo-terminal, for the CLI's prompts and terminal width.

The child's stdin, stdout and stderr are the terminal's side of a ``pty`` pair; the test
holds the other side: it reads what the child shows and types answers. Reads wait with
``select`` until a deadline, never with fixed sleeps.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import select
import struct
import subprocess
import termios
import time
from collections.abc import Sequence
from pathlib import Path

DEADLINE = 30.0  # loose: a bound against hangs, not a timing goal


class Terminal:
    """``argv`` running at a pseudo-terminal of ``columns`` x ``rows``.

    Args:
        argv: the command.
        cwd: its working directory.
        env: its environment; COLUMNS and LINES are removed, so the terminal's own size
            is what the child finds.
        columns: the terminal's width.
        rows: the terminal's height.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: dict[str, str],
        columns: int = 80,
        rows: int = 24,
    ) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
        try:
            self.process = subprocess.Popen(
                list(argv), cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
                start_new_session=True,
            )  # fmt: skip
        finally:
            os.close(slave)  # else the end of the child's output would never show as EOF
        self._seen = b""
        self._ended = False

    @property
    def text(self) -> str:
        """Everything the terminal showed so far, typed answers echoed, ``\\n`` line ends."""
        return self._seen.decode(errors="replace").replace("\r\n", "\n")

    def _read(self, timeout: float) -> None:
        """Take what the child wrote, waiting up to ``timeout`` for something."""
        ready, _, _ = select.select([self.master], [], [], max(timeout, 0))
        if not ready:
            return
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: every copy of the terminal side is closed
            data = b""
        if data:
            self._seen += data
        else:
            self._ended = True

    def expect(self, wanted: str, timeout: float = DEADLINE) -> str:
        """Wait until the terminal shows ``wanted``; return everything shown so far.

        Raises:
            AssertionError: it did not show within ``timeout`` seconds, or the child ended.
        """
        deadline = time.monotonic() + timeout
        while wanted not in self.text:
            if self._ended or time.monotonic() > deadline:
                raise AssertionError(
                    f"the terminal never showed {wanted!r}; it showed:\n{self.text}"
                )
            self._read(deadline - time.monotonic())
        return self.text

    def type(self, keys: str) -> None:
        """Type ``keys`` at the terminal (end with ``\\n`` to press Enter)."""
        os.write(self.master, keys.encode())

    def finish(self, timeout: float = DEADLINE) -> int:
        """Read until the child's output ends; return its exit code.

        Raises:
            AssertionError: it did not end within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while not self._ended:
            if time.monotonic() > deadline:
                raise AssertionError(f"the command did not end; it showed:\n{self.text}")
            self._read(deadline - time.monotonic())
        return self.process.wait(max(deadline - time.monotonic(), 1))

    def close(self) -> None:
        """Kill the child if it still runs and release the terminal (cleanup)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        with contextlib.suppress(OSError):
            os.close(self.master)
