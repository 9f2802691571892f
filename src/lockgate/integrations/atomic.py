"""A warning for a plain enqueue inside Django's ``transaction.atomic()``.

A job enqueued in an open transaction is in Redis at once, and a worker may run it before
the transaction commits: it reads none of the rows the transaction wrote (or rows a
rollback then removes). ``enqueue_on_commit`` queues it after the commit instead. Each
enqueue looks whether an atomic block is open on any Django connection this thread (or
task) has opened, and logs a warning pointing to ``enqueue_on_commit``, once per call
site so that a loop does not flood the log.

Zero cost without Django: nothing is looked at unless ``django.db`` is already imported,
which this module never does; no connection is opened (only those already set up are
read). Enqueues through ``enqueue_on_commit`` (and the Django tasks backend's, which go
through it) are not warned about.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from lockgate.core.logs import get_logger

log = get_logger(__name__)

# Set while enqueue_on_commit sends (a connection not in a transaction sends at once).
_on_commit: ContextVar[bool] = ContextVar("lockgate_sending_on_commit", default=False)
# The call sites warned about: (file, line).
_warned: set[tuple[str, int]] = set()
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


@contextlib.contextmanager
def sending_on_commit() -> Iterator[None]:
    """Mark the enqueues in the block as ``enqueue_on_commit``'s (never warned about)."""
    token = _on_commit.set(True)
    try:
        yield
    finally:
        _on_commit.reset(token)


def warn_if_in_atomic(task: str) -> None:
    """Log a warning (once per call site) when an atomic block is open on a Django
    connection of this thread: a job of ``task`` is being enqueued in it."""
    db = sys.modules.get("django.db")
    if db is None or _on_commit.get():
        return
    alias = _open_atomic(db)
    if alias is None:
        return
    site = _call_site()
    if site in _warned:
        return
    _warned.add(site)
    log.warning(
        "a job of task %s is enqueued inside an open transaction.atomic() block (Django "
        "database %r) at %s:%d: a worker may run it before the commit and not see the "
        "rows written in it; use %s.enqueue_on_commit(transaction connection, ...) to "
        "queue it once the transaction commits (logged once for this line)",
        task, alias, site[0], site[1], task.rsplit(".", 1)[-1],
    )  # fmt: skip


def _open_atomic(db: Any) -> str | None:
    """The alias of a connection of this thread in an atomic block, among those already
    set up (None: none is)."""
    try:
        connections = db.connections.all(initialized_only=True)
    except Exception:  # settings not configured: Django imported, not set up
        return None
    for connection in connections:
        if getattr(connection, "in_atomic_block", False):
            return str(connection.alias)
    return None


def _call_site() -> tuple[str, int]:
    """The file and line of the first frame outside lockgate: the caller's enqueue."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno
