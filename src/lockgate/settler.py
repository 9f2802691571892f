"""The settler: applies each run's ending in one owner-checked script call, until it lands.

Endings queue up while a round trip is in flight and go out together (one pipelined round
trip for the whole batch). A call refused for a transient reason (connection lost, BUSY,
OOM, READONLY, ...) stays queued and is sent again with capped backoff, for as long as the
process lives: meanwhile the worker keeps heartbeating the entry (no one reclaims it) and
the lease keeper keeps renewing the claim (no one takes it over), so a payment whose ack
met a Redis restart is acknowledged, and marked done, when Redis is back, never run twice.
A refusal that cannot heal (NOPERM, WRONGPASS) stops the worker with that error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import redis

from lockgate import deadletter, faults
from lockgate.app import App
from lockgate.broker import Consumer, Delivery, Settlement, translated
from lockgate.errors import LockgateError
from lockgate.faults import classify
from lockgate.policy import reconnect_delay
from lockgate.runner import Ending

log = logging.getLogger(__name__)


def settlement(app: App, ending: Ending) -> Settlement:
    """The wire form of an ending (pure)."""
    outcome, claim = ending.outcome, ending.claim
    record: dict[str, str | bytes] = {}
    if outcome.kind == "dead":
        record = deadletter.record(ending.delivery, outcome.reason, outcome.error)
    return Settlement(
        ending.delivery, outcome,
        claim_key=claim.redis_key if claim is not None else None,
        claim_token=claim.token if claim is not None else "",
        claim_ttl=claim.ttl if claim is not None else 0.0,
        legacy_claim_key=claim.legacy_redis_key if claim is not None else None,
        legacy_done=claim.legacy_done_value() if claim is not None else "",
        record=record,
        trim=deadletter.trim_args(app) if outcome.kind == "dead" else (0, 0),
    )  # fmt: skip


class Settler:
    """Queues endings and applies them; owned and supervised by the worker.

    Args:
        app: the app.
        consumer: the worker's consumer.
        applied: called once per ending that landed, with whether the entry was still
            this worker's (False: another worker had taken it over; nothing was touched).
    """

    def __init__(
        self, app: App, consumer: Consumer, applied: Callable[[Ending, bool], None]
    ) -> None:
        self._app = app
        self._consumer = consumer
        self._applied = applied
        self._queue: list[tuple[Ending, Settlement]] = []
        self._wake = asyncio.Event()
        self.closing = asyncio.Event()
        self.failures = 0

    def add(self, ending: Ending) -> None:
        """Queue an ending (an abandoned one only has its claim to release, if any)."""
        outcome = ending.outcome
        if outcome.kind == "abandoned" and (ending.claim is None or outcome.claim == "keep"):
            return
        self._queue.append((ending, settlement(self._app, ending)))
        self._wake.set()

    @property
    def unsettled(self) -> list[Delivery]:
        """Deliveries whose ending has not landed yet (they are still heartbeated)."""
        return [ending.delivery for ending, _ in self._queue]

    def __len__(self) -> int:
        return len(self._queue)

    async def run(self) -> None:
        """Apply endings until closed and nothing is left (or ``closing`` is forced)."""
        while True:
            if not self._queue:
                if self.closing.is_set():
                    return
                self._wake.clear()
                await _first(self._wake.wait(), self.closing.wait())
                continue
            if await self.flush():
                self.failures = 0
                continue
            # Capped at 1 s: after a Redis restart the settle must land before the
            # visibility timeout hands the held-up jobs to another worker.
            delay = reconnect_delay(self.failures, cap=1.0)
            self.failures += 1
            await asyncio.sleep(delay)  # new endings join the next try

    async def flush(self) -> bool:
        """Send every queued ending once; True when nothing failed.

        Raises:
            LockgateError: a refusal that cannot heal (the worker stops).
        """
        batch = self._queue
        calls = [self._consumer.settle_call(s) for _, s in batch]
        self._queue = []
        try:
            replies: Sequence[Any] = await self._consumer.settle(calls)
        except BaseException as e:  # cancelled too: nothing queued is ever dropped
            self._queue = batch + self._queue
            if not isinstance(e, LockgateError) or classify(e) == "fatal":
                raise
            log.error("could not settle %d jobs (%s); keeping them and their claims, "
                      "trying again", len(batch), e)  # fmt: skip
            return False
        failed: list[tuple[Ending, Settlement]] = []
        fatal: LockgateError | None = None
        for (ending, wire), reply in zip(batch, replies, strict=True):
            if isinstance(reply, Exception):
                error = reply if isinstance(reply, LockgateError) else _translate(reply)
                if classify(error) == "fatal":
                    fatal = fatal or error
                else:
                    log.error("job %s: settling it failed (%s); trying again",
                              ending.delivery.job_id, error)  # fmt: skip
                failed.append((ending, wire))
                continue
            self._landed(ending, int(reply[0]) == 1, int(reply[1]) == 1)
        self._queue = failed + self._queue
        if fatal is not None:
            raise fatal
        return not failed

    def _landed(self, ending: Ending, owned: bool, claim_applied: bool) -> None:
        claim, outcome = ending.claim, ending.outcome
        if claim is not None and outcome.claim != "keep":
            claim.settled(outcome.claim, int(claim_applied))
        if not owned and outcome.kind != "abandoned":
            log.warning("job %s (%s): no longer pending for this worker (another worker "
                        "took it over, or an earlier reply was lost): left alone",
                        ending.delivery.job_id, outcome.kind)  # fmt: skip
        self._applied(ending, owned)

    def apply_now(self, ending: Ending) -> None:
        """Apply an ending at once through the app's sync client (from a thread).

        For sync runs abandoned by a forced stop that end while the process lives.
        """
        wire = settlement(self._app, ending)
        _, scripts = self._app.sync_connection()
        with translated(self._app.redis_url):
            reply = scripts.run_each([self._consumer.settle_call(wire)])[0]
        if isinstance(reply, Exception):
            raise _translate(reply)
        claim = ending.claim
        if claim is not None and ending.outcome.claim != "keep":
            claim.settled(ending.outcome.claim, int(reply[1]))
        log.info("job %s: an abandoned run ended and settled itself (%s)",
                 ending.delivery.job_id, ending.outcome.kind)  # fmt: skip


def _translate(error: Exception) -> LockgateError:
    if isinstance(error, redis.RedisError):
        return faults.translate(error, "(settle)")
    return LockgateError(f"{type(error).__name__}: {error}")


async def _first(*waits: Any) -> None:
    """Wait until the first of some awaitables is done; cancel the rest."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
