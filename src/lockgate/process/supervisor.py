"""Run several worker processes under one supervisor: ``worker MODULE:APP --processes N``.

Each child is an ordinary single worker, started as a fresh interpreter running the same
command line with ``--processes 1``: never a fork of a process that holds an event loop,
Redis clients or threads. The supervisor imports no app and opens no connection; it
starts children, watches them and passes signals on.

- Restarts: a child that dies while the supervisor is not stopping is started again, at
  once the first time, then after 0.5 s, doubling up to 30 s (:class:`RestartBackoff`);
  a child that had stayed up 30 s starts its slot's count over. Each death is one log
  line: the pid, how it ended, the delay.
- Stopping: the first SIGTERM or SIGINT is passed to every child as SIGTERM (each drains
  within its own grace period) and the supervisor returns once all have exited; the
  next one sends each child still running a second SIGTERM, a worker's "stop now".
- Children run in a process group of their own, so a Ctrl-C at a terminal reaches the
  supervisor alone and each child gets one stop, not two. Under systemd, use
  ``KillMode=mixed`` for the same reason.
- Orphans: each child asks Linux to SIGKILL it when the supervisor dies
  (``PR_SET_PDEATHSIG``); a supervisor killed with SIGKILL takes its children along, and
  their jobs are reclaimed after the visibility timeout, as after any crash.
- Configuration errors: a worker exits with code 2 when its configuration cannot work (a
  bad URL, access denied) and prints why. When every slot's child did so before any child
  ever stayed up, the supervisor stops and raises :class:`~lockgate.errors.ConfigError`.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType

from lockgate.core.logs import get_logger
from lockgate.errors import ConfigError
from lockgate.process.orphans import orphan_guard

log = get_logger(__name__)

EXIT_CONFIG_ERROR = 2  # a worker's exit code for a configuration that cannot work
EXIT_SUPERVISOR_GONE = 71  # the supervisor died while the child was being started
MAX_IDLE = 1.0  # longest wait between looks at the children, should a wake-up be missed


# the policy: pure, no clock, no I/O


@dataclass(frozen=True, kw_only=True)
class RestartBackoff:
    """How long a dead child's slot waits before it is started again.

    Attributes:
        base: the delay after the second death in a row; it doubles with each further one.
        cap: the longest delay.
        stable_after: a child that stayed up this long was healthy: its death starts its
            slot's count over (restarted at once), and it proves the configuration works.
    """

    base: float = 0.5
    cap: float = 30.0
    stable_after: float = 30.0

    def delay(self, deaths: int) -> float:
        """Seconds to wait after a slot's ``deaths``-th short-lived death in a row.

        Returns:
            0 for the first, then ``base`` doubling up to ``cap``.
        """
        if deaths <= 1:
            return 0.0
        return min(self.cap, self.base * 2.0 ** min(deaths - 2, 64))


@dataclass(frozen=True, slots=True)
class Restart:
    """Start the slot's child again after ``delay`` seconds."""

    delay: float


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Stop every child and exit with a configuration error, for ``reason``."""

    reason: str


Decision = Restart | GiveUp


class RestartPlan:
    """Decides, death by death, when each slot is restarted and when to give up.

    Args:
        slots: how many children run side by side.
        backoff: the delays and what counts as having stayed up.
    """

    def __init__(self, slots: int, backoff: RestartBackoff | None = None) -> None:
        if slots < 1:
            raise ConfigError(f"a supervisor needs at least one process, got {slots}")
        self.backoff = backoff or RestartBackoff()
        self._deaths = [0] * slots  # short-lived deaths in a row, per slot
        self._config_failed = [False] * slots  # the slot's last child: a config error, early
        self._ever_stable = False

    def died(self, slot: int, uptime: float, *, config_error: bool = False) -> Decision:
        """Record that the child of ``slot`` ended after ``uptime`` seconds.

        Args:
            slot: which child (0 to ``slots - 1``).
            uptime: how long it ran.
            config_error: it exited with the configuration-error code.

        Returns:
            :class:`Restart` with the delay, or :class:`GiveUp` when every slot's last
            child failed with a configuration error before any child ever stayed up.
        """
        stayed_up = uptime >= self.backoff.stable_after
        if stayed_up:
            self._ever_stable = True
            self._deaths[slot] = 0
        self._deaths[slot] += 1
        self._config_failed[slot] = config_error and not stayed_up
        if not self._ever_stable and all(self._config_failed):
            return GiveUp(
                f"every worker process exited with code {EXIT_CONFIG_ERROR} (a configuration "
                "error, reported above) before staying up; not restarting them"
            )
        deaths = self._deaths[slot]
        if self._config_failed[slot]:
            deaths += 1  # not at once: the other slots may be about to say the same
        return Restart(self.backoff.delay(deaths))


def describe_exit(code: int) -> str:
    """Say how a child ended, from its return code (negative: the signal that killed it).

    Returns:
        e.g. ``exited with code 2``, ``killed by signal 9 (SIGKILL)``.
    """
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = "unknown"
    return f"killed by signal {-code} ({name})"


# the process shell


@dataclass(frozen=True, slots=True)
class _Child:
    slot: int
    process: subprocess.Popen[bytes]
    started: float  # time.monotonic()


class Supervisor:
    """Runs ``processes`` copies of ``command``, restarts them, passes stop signals on.

    Args:
        command: the argv of one worker (a single-process ``lockgate worker``).
        processes: how many run side by side.
        backoff: the restart delays.
        on_exit: called with the pid of each child that ended, once it is reaped (the
            metrics endpoint forgets its readiness, see :mod:`lockgate.ops.metrics`).
    """

    def __init__(
        self,
        command: Sequence[str],
        processes: int,
        backoff: RestartBackoff | None = None,
        on_exit: Callable[[int], None] | None = None,
    ) -> None:
        self.command = list(command)
        self._on_exit = on_exit
        self.processes = processes
        self._plan = RestartPlan(processes, backoff)
        self._children: list[_Child] = []
        self._due: dict[int, float] = {}  # slot -> monotonic time to start its child
        self._signals: list[int] = []  # stop signals received, not yet acted on
        self._stops = 0
        self._gave_up: str | None = None
        self._guard = orphan_guard(os.getpid(), EXIT_SUPERVISOR_GONE)

    def run(self) -> None:
        """Start the children and supervise them until a stop signal and their exit.

        Must run in the main thread (it installs signal handlers; the previous ones are
        restored on return).

        Raises:
            ConfigError: every child failed with a configuration error before any stayed
                up; they were stopped (the CLI prints one line and exits 2).
        """
        wake_read, wake_write = os.pipe()
        for fd in (wake_read, wake_write):
            os.set_blocking(fd, False)
        handled = (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD)
        previous = {signum: signal.signal(signum, self._on_signal) for signum in handled}
        previous_wakeup = signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
        log.info("supervising %d worker processes", self.processes)
        try:
            now = time.monotonic()
            self._due = dict.fromkeys(range(self.processes), now)
            while True:
                self._act_on_signals()
                self._reap()
                self._start_due()
                if not self._children and not self._due:
                    break
                self._sleep(wake_read)
        finally:
            signal.set_wakeup_fd(previous_wakeup)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            os.close(wake_read)
            os.close(wake_write)
            for child in self._children:  # only after a bug: the children stop too
                child.process.send_signal(signal.SIGTERM)
        if self._gave_up is not None:
            raise ConfigError(self._gave_up)
        log.info("all worker processes stopped")

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Runs between two bytecodes of the loop: only note it; the wake-up fd ends the
        # loop's sleep.
        if signum != signal.SIGCHLD:
            self._signals.append(signum)

    def _act_on_signals(self) -> None:
        while self._signals:
            signum = signal.Signals(self._signals.pop(0)).name
            self._stops += 1
            if self._stops == 1:
                log.info("%s: stopping %d worker processes (again to stop them now)",
                         signum, len(self._children))  # fmt: skip
            else:
                log.warning("%s again: asking %d worker processes to stop now",
                            signum, len(self._children))  # fmt: skip
            self._stop_children()

    def _stop_children(self) -> None:
        """Send SIGTERM to every child: the first is a graceful stop, the second "now"."""
        self._due.clear()
        for child in self._children:
            child.process.send_signal(signal.SIGTERM)

    def _reap(self) -> None:
        now = time.monotonic()
        for child in list(self._children):
            code = child.process.poll()
            if code is None:
                continue
            self._children.remove(child)
            if self._on_exit is not None:
                self._on_exit(child.process.pid)
            self._ended(child, code, now - child.started)

    def _ended(self, child: _Child, code: int, uptime: float) -> None:
        pid, how = child.process.pid, describe_exit(code)
        if self._stopping:
            log.info("worker process %d %s", pid, how)
            return
        decision = self._plan.died(child.slot, uptime, config_error=code == EXIT_CONFIG_ERROR)
        if isinstance(decision, GiveUp):
            log.error("worker process %d %s after %.1fs; giving up", pid, how, uptime)
            self._gave_up = decision.reason
            self._stop_children()
            return
        log.warning("worker process %d %s after %.1fs; restarting it in %.1fs",
                    pid, how, uptime, decision.delay)  # fmt: skip
        self._due[child.slot] = time.monotonic() + decision.delay

    @property
    def _stopping(self) -> bool:
        return self._stops > 0 or self._gave_up is not None

    def _start_due(self) -> None:
        now = time.monotonic()
        for slot, due in sorted(self._due.items()):
            if due > now:
                continue
            del self._due[slot]
            try:
                process = subprocess.Popen(
                    self.command,
                    stdin=subprocess.DEVNULL,
                    process_group=0,
                    preexec_fn=self._guard,
                )
            except OSError as e:  # out of processes or memory: like a death at start
                delay = self._plan.died(slot, 0.0)
                assert isinstance(delay, Restart)  # only configuration errors give up
                log.error("cannot start a worker process: %s; trying again in %.1fs",
                          e, delay.delay)  # fmt: skip
                self._due[slot] = now + delay.delay
                continue
            self._children.append(_Child(slot, process, now))
            log.info("started worker process %d", process.pid)

    def _sleep(self, wake_read: int) -> None:
        """Wait for a signal (a child's death included) or the next restart that is due."""
        timeout = MAX_IDLE
        if self._due:
            timeout = min(timeout, max(0.0, min(self._due.values()) - time.monotonic()))
        select.select([wake_read], [], [], timeout)
        try:
            while os.read(wake_read, 512):
                pass
        except BlockingIOError:
            pass
