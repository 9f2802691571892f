"""Children that die with their parent: Linux's ``PR_SET_PDEATHSIG``, set up in one place.

Used for the supervisor's workers, the worker's isolated job children and the embedded
server. Linux sends the signal when the *thread* that started the child ends, so a child
must be started from a thread that lives as long as its owner (the main thread here).
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def orphan_guard(parent: int, exit_code: int) -> Callable[[], None] | None:
    """A function for the child to call first (a ``preexec_fn``, or right after a fork).

    It asks Linux to SIGKILL the child when ``parent`` dies, and exits with ``exit_code``
    if ``parent`` died before the request was made. libc is loaded here, in the parent, so
    the child only makes the call.

    Returns:
        None where there is no ``prctl`` (not Linux): there, children outlive their parent.
    """
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def guard() -> None:  # pragma: no cover - runs only in the child
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if os.getppid() != parent:
            os._exit(exit_code)

    return guard
