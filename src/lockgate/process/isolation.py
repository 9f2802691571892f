"""Run a callable in a forked child process and report how it ended.

A job delivered more than once may be the poison that killed its last worker. Run in a
child of its own, it can kill only that child: the worker keeps reading new work on its
free slots, and the death is attributed to exactly this job.

Why fork (not spawn): ``work`` is a closure built in the parent; the child runs it with
everything the parent had in memory, so tasks defined anywhere (inside functions,
closures) need no import path and nothing is pickled. The pipe carries raw bytes.

How the child is made and kept apart from the parent:

- It is forked from a thread of the caller's executor, never from the event-loop thread:
  the waiting blocks that thread, not the loop, and in the child the forking thread is
  the only thread and runs no loop, so ``work`` may call ``asyncio.run()``.
- The parent flushes ``sys.stdout`` and ``sys.stderr`` before forking, and the child
  leaves with ``os._exit``: no buffered output is written twice, no ``atexit`` handler
  or finaliser of the parent runs in the child.
- SIGINT and SIGTERM are ignored: a stop sent to the whole process group (Ctrl-C in a
  terminal, systemd's default stop) must not kill, mid-side-effect, a run its worker
  means to wait for; the worker decides. And the child dies with its worker
  (``PR_SET_PDEATHSIG`` on Linux): a worker that is SIGKILLed takes its children along,
  as it would take its threads, so no orphan runs on with nobody left to settle its job.
  The signal wakeup fd is dropped: it is the parent loop's self-pipe, so a signal caught
  in the child would otherwise run the parent's handler.
- Everything inherited from the parent is frozen out of the garbage collector
  (``gc.freeze``): the parent's unreachable objects are not finalised here (a finaliser
  could unregister a socket from the epoll instance both processes share), and their
  pages are not copied for the collector's sake.
- Locks another parent thread may have held at fork are made anew by at-fork hooks:
  here (the pipes of other runs, whose read ends each child closes), in
  :mod:`lockgate.api.app` (``App._lock``; the parent loops' async clients are set aside) and
  :mod:`lockgate.api.idempotency` (``LeaseKeeper``: its lock, thread and the parent's
  claims, which only the parent renews). redis-py's sync pool notices the new pid.

Residual risks of forking a threaded process, which no hook can cover: a lock held at
fork inside a C library (or the buffer of a stream another thread was writing) stays
held in the child. Python 3.12+ warns about it (a ``DeprecationWarning`` from
``os.fork()`` when threads run); with ``filterwarnings = error`` the tests will need
``ignore:This process .* is multi-threaded:DeprecationWarning`` there. 3.11 is silent.

Cancellation: when the awaiting coroutine is cancelled (a worker stopping), the child is
not killed: an abandoned run keeps its claim and is never killed mid-side-effect by a
graceful stop. The executor thread goes on waiting for it (the timeout still applies),
reaps it and logs how it ended; the coroutine re-raises ``CancelledError`` at once. A
run whose thread had not started yet is cancelled before it forks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import gc
import math
import os
import select
import signal
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from lockgate.core.logs import get_logger
from lockgate.errors import ConfigError
from lockgate.process.orphans import orphan_guard

log = get_logger(__name__)

EXIT_WORK_RAISED = 70  # sysexits' EX_SOFTWARE: the child's work raised (traceback on stderr)
EXIT_PARENT_GONE = 71  # the worker died while the child was being made
# The report is framed by its length, so a child that leaves early with code 0 (work
# calling os._exit(0)) is not mistaken for one that reported empty bytes.
_HEADER = struct.Struct("!Q")
_CHUNK = 65_536
# How often a quiet pipe is checked for a child that has already exited: a grandchild
# that inherited the pipe's write end keeps it open after the child is gone.
_TICK = 0.1

# The read ends of running children's pipes, closed in every child forked after them;
# _LOCK spans creating a pipe, forking and closing the write end, so no other child of
# this module ever holds a write end but its own.
_LOCK = threading.Lock()
_READ_ENDS: set[int] = set()


@dataclass(frozen=True, slots=True)
class ChildExit:
    """How a child ended.

    Attributes:
        report: the bytes the child's work returned; None when the child died first.
        reason: '' when ``report`` is set; else why there is none, e.g. ``killed by
            signal 9 (SIGKILL)``, ``exited with code 3``, ``ran over its timeout of 2s``.
        timed_out: the child ran over its timeout and was killed.
    """

    report: bytes | None
    reason: str
    timed_out: bool = False


async def run_in_child(
    work: Callable[[], bytes],
    *,
    timeout: float | None,
    executor: concurrent.futures.Executor,
) -> ChildExit:
    """Fork; the child runs ``work()`` and sends back its bytes; the loop is not blocked.

    ``work`` runs in the child in a copy of the caller's context (contextvars), on the
    forking thread, with no event loop running: it may call ``asyncio.run()``. If it
    raises, the child writes the traceback to stderr and exits with code
    ``EXIT_WORK_RAISED`` (70). The parent's executors are unusable in the child (their
    threads are not there).

    Args:
        work: returns the report (bytes); runs only in the child.
        timeout: seconds before the child is killed with SIGKILL; None waits for ever.
        executor: a thread pool; one of its threads forks and waits for the child.

    Returns:
        The report, or why there is none.

    Raises:
        ConfigError: ``timeout`` is not a positive number of seconds.
        OSError: the fork or the pipe failed (no child was made).
        asyncio.CancelledError: the caller was cancelled; the child runs on, and the
            executor thread still reaps it and logs how it ended.
    """
    _check_timeout(timeout)
    context = contextvars.copy_context()
    future = executor.submit(_fork_and_wait, work, context, timeout)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        # A run whose thread has not started never forks; a started one is waited for
        # by its thread, and logged when it ends.
        if not future.cancel():
            future.add_done_callback(_log_abandoned)
        raise


def run_child(work: Callable[[], bytes], *, timeout: float | None) -> ChildExit:
    """:func:`run_in_child` for a caller that is itself a pool thread (never the loop's).

    The worker's runner uses it so that a child run is waited for like a sync task: a
    graceful stop waits for it, a forced one hands its report to whoever settles it.
    """
    _check_timeout(timeout)
    return _fork_and_wait(work, contextvars.copy_context(), timeout)


def _check_timeout(timeout: float | None) -> None:
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
    ):
        raise ConfigError(f"a child's timeout must be positive seconds or None, got {timeout!r}")


def _log_abandoned(future: concurrent.futures.Future[ChildExit]) -> None:
    error = future.exception()
    if error is not None:
        log.error("a child run abandoned by its caller failed: %r", error)
    elif (ended := future.result()).report is None:
        log.warning("a child run abandoned by its caller ended without a report: %s",
                    ended.reason)  # fmt: skip
    else:
        log.info("a child run abandoned by its caller finished; its report is dropped")


def _fork_and_wait(
    work: Callable[[], bytes], context: contextvars.Context, timeout: float | None
) -> ChildExit:
    # Started now, not at submit: time spent queued in the executor is not the child's.
    deadline = None if timeout is None else time.monotonic() + timeout
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:  # buffered output would otherwise be written twice
            with contextlib.suppress(Exception):
                stream.flush()
    parent = os.getpid()
    with _LOCK:
        read_end, write_end = os.pipe()
        try:
            pid = os.fork()
        except BaseException:
            os.close(read_end)
            os.close(write_end)
            raise
        if pid == 0:  # pragma: no cover - the child; coverage does not follow it
            _child(work, context, read_end, write_end, parent)
        os.close(write_end)
        _READ_ENDS.add(read_end)
    try:
        return _wait(pid, read_end, deadline, timeout)
    finally:
        with _LOCK:
            _READ_ENDS.discard(read_end)
            os.close(read_end)


def _child(
    work: Callable[[], bytes],
    context: contextvars.Context,
    read_end: int,
    write_end: int,
    parent: int,
) -> NoReturn:  # pragma: no cover - runs only in the child
    code = EXIT_WORK_RAISED
    try:
        os.close(read_end)
        _settle_in(parent)
        report = context.run(work)
        if not isinstance(report, bytes):
            raise TypeError(f"a child's work must return bytes, not {type(report).__name__}")
        _send(write_end, report)
        code = 0
    except BaseException:
        with contextlib.suppress(BaseException):
            sys.stderr.write(f"lockgate: the work of child {os.getpid()} raised:\n")
            traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                if stream is not None:
                    stream.flush()
        os._exit(code)


def _settle_in(parent: int) -> None:  # pragma: no cover - runs only in the child
    """Detach the new child from the parent's signal handling and garbage."""
    gc.freeze()
    # The forking thread is the child's main thread now, so the signal calls are allowed.
    signal.set_wakeup_fd(-1)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    guard = orphan_guard(parent, EXIT_PARENT_GONE)
    if guard is not None:  # not Linux: an orphan finishes its run alone
        guard()


def _send(fd: int, report: bytes) -> None:  # pragma: no cover - runs only in the child
    view = memoryview(_HEADER.pack(len(report)) + report)
    while view:
        view = view[os.write(fd, view) :]


def _wait(pid: int, fd: int, deadline: float | None, timeout: float | None) -> ChildExit:
    """Collect the child's report and exit status, killing it at the deadline."""
    received = bytearray()
    os.set_blocking(fd, False)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    pipe_open = True
    nap = 0.001
    while True:
        try:
            reaped, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # another waiter (waitpid(-1), SIGCHLD ignored) took it
            return _ended(None, received, pipe_open, fd)
        if reaped:
            return _ended(status, received, pipe_open, fd)
        left = _TICK if deadline is None else min(_TICK, deadline - time.monotonic())
        if left <= 0:
            return _killed(pid, received, pipe_open, fd, timeout)
        if pipe_open:
            if poller.poll(math.ceil(left * 1000)):
                pipe_open = _read(fd, received)
        else:
            # The pipe closes as the child exits, a moment before it can be reaped.
            time.sleep(min(nap, left))
            nap = min(nap * 2, _TICK)


def _read(fd: int, into: bytearray) -> bool:
    """Read what the pipe holds; False at end of file."""
    while True:
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        into += chunk


def _killed(
    pid: int, received: bytearray, pipe_open: bool, fd: int, timeout: float | None
) -> ChildExit:
    os.kill(pid, signal.SIGKILL)  # not reaped yet, so the pid cannot have been reused
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        status = None
    ended = _ended(status, received, pipe_open, fd)
    if ended.report is not None:  # it reported just in time
        return ended
    return ChildExit(None, f"ran over its timeout of {timeout:g}s", timed_out=True)


def _ended(status: int | None, received: bytearray, pipe_open: bool, fd: int) -> ChildExit:
    if pipe_open:
        _read(fd, received)
    report = _report(received)
    if report is not None:
        return ChildExit(report, "")  # the work finished; a death after that changes nothing
    if status is None:
        return ChildExit(None, "ended unseen: another waiter reaped it")
    return ChildExit(None, describe(status))


def _report(received: bytearray) -> bytes | None:
    if len(received) < _HEADER.size:
        return None
    (length,) = _HEADER.unpack_from(received)
    if len(received) != _HEADER.size + length:
        return None
    return bytes(received[_HEADER.size :])


def describe(status: int) -> str:
    """Say how a process ended, from its ``waitpid`` status.

    Returns:
        e.g. ``killed by signal 9 (SIGKILL)``, ``exited with code 3``.
    """
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown"
        return f"killed by signal {-code} ({name})"
    if code == EXIT_WORK_RAISED:
        return f"exited with code {code} (its work raised; the traceback is on stderr)"
    if code == 0:
        return "exited with code 0 before reporting"
    return f"exited with code {code}"


def _after_fork_in_child() -> None:
    """In any forked child: other runs' pipes are not its own, and the lock may be held."""
    global _LOCK
    for fd in _READ_ENDS:
        with contextlib.suppress(OSError):
            os.close(fd)
    _READ_ENDS.clear()
    _LOCK = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
