"""A worker's liveness, kept by a thread that a blocked event loop cannot stop.

A job is taken from its worker only when that worker is known dead (``lua/_liveness.lua``):
its liveness record, renewed here on the server's clock, lapsed while Redis itself was up
and serving the other workers' beats. Timing alone is not a proof of death, so:

- The beats come from a thread with its own connection, not from the event loop: a task
  that blocks the loop (``time.sleep`` inside ``async def``, a long CPU-bound call) does
  not stop them, and neither does a sync task in the pool. What does stop them is a
  thread that holds the GIL in C for longer than the lease (a backtracking regex, a C
  extension that does not release it): no Python thread can run then. That worker is then
  taken for dead and its jobs may run elsewhere; the beats log the stall, with the job
  ids, once they run again, and the late run's settle is refused by its owner check
  (fenced), like that of a process that was stopped (SIGSTOP, a paused VM).
- After an outage (Redis down, restarted from disk, hung: no worker could beat), nobody
  is taken for dead until beats have come for a whole lease again.
- A beat that fails is retried soon, not a period later, so an outage shorter than the
  lease never lapses a live worker; the first beat that lands again logs that Redis is
  back, and after how long.

The same thread watches the event loop: a loop that has not ticked for
:data:`STALL_AFTER` seconds is logged, with the jobs running, and again when it
recovers, so a blocked loop is never silent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from lockgate.backend.broker import Liveness
from lockgate.backend.connections import SyncClient, sync_client
from lockgate.backend.faults import translated
from lockgate.backend.lua import Arg, ScriptCall, SyncScripts
from lockgate.core.logs import get_logger
from lockgate.errors import LockgateError

log = get_logger(__name__)
STALL_AFTER = 1.0  # seconds without a tick of the event loop that are logged as a stall
RETRY_AFTER = 0.1  # seconds before a failed beat is sent again (capped by the beat)
LOG_EVERY = 10.0  # seconds between log lines of beats that keep failing
SWEEP_EVERY = 600  # beats between sweeps of the records of workers long gone
SWEEP_AFTER_MS = 3_600_000  # a worker's record lapsed that long ago is removed
REST = 5.0  # seconds a partition whose beat failed is passed over (with several)


class LivenessKeeper:
    """Beats for one worker to its liveness sets (one per partition).

    Args:
        url: the Redis URL (the keeper opens its own client on it).
        consumer: the worker's consumer name.
        keys: the liveness sets to beat to.
        timing: lease, beat interval and gap tolerance.
        running: the ids of the jobs the worker runs now (for the log lines of a stall).
    """

    def __init__(
        self,
        url: str,
        consumer: str,
        keys: Sequence[str],
        timing: Liveness,
        running: Callable[[], Sequence[str]],
    ) -> None:
        self._url = url
        self._consumer = consumer
        self._keys = list(keys)
        self.timing = timing
        self._running = running
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: SyncClient | None = None
        self._scripts: SyncScripts | None = None
        self._beats = 0
        self._resting: dict[str, float] = {}  # partition key -> passed over until (monotonic)
        self._resting_error: dict[str, LockgateError] = {}
        self._failing_since: float | None = None
        self._logged_failure = 0.0
        self._last_try: float | None = None
        self._stalled_since: float | None = None
        self.last_ok: float | None = None  # monotonic time of the last beat that landed
        self.loop_tick = time.monotonic()  # set by the worker's event loop (see tick)

    def tick(self) -> None:
        """Called by the worker's event loop every few tens of ms: it is not blocked."""
        self.loop_tick = time.monotonic()

    def start(self) -> None:
        """Beat once (raising when that fails: the worker cannot start), then keep
        beating from a daemon thread. Blocking: call it from a thread.

        Raises:
            BrokerError: the first beat failed on every partition (Redis unreachable,
                refused).
        """
        self._client = sync_client(self._url)
        self._scripts = SyncScripts(self._client)
        # One partition's primary may be down: the worker still starts, like its reads.
        first = self._send(self.timing.lease)
        if all(isinstance(reply, Exception) for reply in first):
            self._raise_first(first)
        self.last_ok = time.monotonic()
        self._thread = threading.Thread(
            target=self._run, name=f"lockgate-liveness-{self._consumer}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0, *, leave: bool = True) -> None:
        """Stop beating and, with ``leave``, mark the worker as no longer alive (a clean
        stop: its jobs, if any were left, may be taken at once); without it (runs that
        were abandoned still go on in this process) the record lapses by itself, a lease
        later. Blocking: call it from a thread. Never raises; a last beat that fails
        leaves the record to lapse by itself."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():  # its beat hangs (a hung server): so would ours
                log.warning("worker %s: its liveness beat does not return; its liveness "
                            "lapses within %.1fs", self._consumer, self.timing.lease)  # fmt: skip
                return
        if self._scripts is None:
            return
        if not leave:
            if self._client is not None:
                self._client.close()
            return
        try:
            self._send(0.0)
        except Exception as e:
            log.warning("worker %s: could not mark itself stopped (%s); its liveness "
                        "lapses within %.1fs", self._consumer, e, self.timing.lease)  # fmt: skip
        finally:
            if self._client is not None:
                self._client.close()

    def _run(self) -> None:
        wait = 0.0
        while not self._stop.wait(wait):
            try:
                self._beat()
                wait = self.timing.beat
            except Exception as e:  # logged, retried soon: the thread never dies silently
                self._failed(e)
                wait = min(self.timing.beat, RETRY_AFTER)
            self._watch_loop()

    def _beat(self) -> None:
        now = time.monotonic()
        if self._last_try is not None and now - self._last_try > self.timing.lease:
            # Nothing beat for a lease: the GIL was held (a task in C) or the process was
            # stopped. The other workers may have taken this one's jobs meanwhile.
            log.warning("worker %s: its liveness beats were held up for %.1fs (the "
                        "process was stopped, or a task held the GIL); jobs running here "
                        "may have been taken over and are fenced: %s", self._consumer,
                        now - self._last_try, _ids(self._running()))  # fmt: skip
        self._last_try = now
        self._beats += 1
        replies = self._send(self.timing.lease, sweep=self._beats % SWEEP_EVERY == 0)
        landed = [r for r in replies if not isinstance(r, Exception)]
        if landed:
            self.last_ok = time.monotonic()
        for reply in landed:
            lapsed, gap = int(reply[0]), int(reply[1])
            if gap:
                log.info("worker %s: liveness beats resume after an outage; no worker "
                         "is taken for dead for %.1fs", self._consumer,
                         self.timing.lease)  # fmt: skip
            elif lapsed > 0:
                log.warning("worker %s: its liveness had lapsed %.1fs ago, while Redis "
                            "served others: it was taken for dead; jobs running here may "
                            "run elsewhere too, and their settles here are refused: %s",
                            self._consumer, lapsed / 1000, _ids(self._running()))  # fmt: skip
        if self._failing_since is not None and len(landed) == len(replies):
            log.info("worker %s: Redis is back after %.1f s (liveness beats land again)",
                     self._consumer, time.monotonic() - self._failing_since)  # fmt: skip
            self._failing_since = None
        self._raise_first(replies)  # logged, and tried again soon

    def _send(self, lease: float, *, sweep: bool = False) -> list[Any]:
        assert self._scripts is not None
        args: list[Arg] = [
            self._consumer,
            max(0, round(lease * 1000)),
            max(1, round(self.timing.gap * 1000)),
            SWEEP_AFTER_MS if sweep else 0,
        ]
        # One call per partition, not one pipeline: on a cluster a pipeline that meets a
        # down primary fails whole, and the partitions of the live ones must still beat.
        # A partition whose call failed rests REST seconds (each try of a down node may
        # take redis-py seconds of retries), its beats then failing at once.
        replies: list[Any] = []
        now = time.monotonic()
        for key in self._keys:
            if self._resting.get(key, 0.0) > now:
                replies.append(self._resting_error[key])
                continue
            try:
                with translated(self._url):
                    replies.append(self._scripts.run(ScriptCall("beat", [key], list(args))))
            except LockgateError as e:
                if len(self._keys) > 1:
                    self._resting[key] = time.monotonic() + min(REST, self.timing.lease / 4)
                    self._resting_error[key] = e
                replies.append(e)
        return replies

    def _raise_first(self, replies: Sequence[Any]) -> None:
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply

    def _failed(self, error: Exception) -> None:
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        if now - self._logged_failure >= LOG_EVERY:
            self._logged_failure = now
            level = logging.WARNING if isinstance(error, LockgateError) else logging.ERROR
            log.log(level, "worker %s: a liveness beat failed (%s); retrying every %.2fs",
                    self._consumer, error, min(self.timing.beat, RETRY_AFTER))  # fmt: skip

    def _watch_loop(self) -> None:
        stalled = time.monotonic() - self.loop_tick
        if stalled >= STALL_AFTER and self._stalled_since is None:
            self._stalled_since = self.loop_tick
            log.warning("worker %s: its event loop has been blocked for %.1fs (a task "
                        "that blocks it: time.sleep or CPU work in an async def?); its "
                        "liveness is kept, so its jobs stay its own: %s", self._consumer,
                        stalled, _ids(self._running()))  # fmt: skip
        elif stalled < STALL_AFTER and self._stalled_since is not None:
            log.warning("worker %s: its event loop ran again after %.1fs blocked",
                        self._consumer, self.loop_tick - self._stalled_since)  # fmt: skip
            self._stalled_since = None


def _ids(ids: Sequence[str]) -> str:
    """Job ids for a log line: repr-quoted (a newline in an id cannot forge a line)."""
    shown = ", ".join(repr(i) for i in ids[:20])
    return f"{shown} and {len(ids) - 20} more" if len(ids) > 20 else (shown or "none")
