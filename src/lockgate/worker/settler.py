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
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from lockgate.api.app import App
from lockgate.backend import dead_store
from lockgate.backend.broker import Consumer, Delivery, Settlement, safe_call
from lockgate.backend.faults import Fault, classify
from lockgate.backend.lua import ScriptCall
from lockgate.backend.settling import settle_sync
from lockgate.core import flows, history, status
from lockgate.core.codec import Job
from lockgate.core.logs import get_logger
from lockgate.core.outcome import ALREADY_PROCESSED, dead
from lockgate.core.policy import reconnect_delay
from lockgate.errors import LockgateError
from lockgate.worker.runner import Ending

log = get_logger(__name__)
APPLY_TRIES = 5  # an abandoned run's own settle, from its thread


def settlement(app: App, ending: Ending) -> Settlement:
    """The wire form of an ending (pure)."""
    outcome, claim = ending.outcome, ending.claim
    record: dict[str, str | bytes] = {}
    if outcome.kind == "dead":
        record = dead_store.record(ending.delivery, outcome.reason, outcome.error)
    final, result, result_ttl_ms = b"", b"", 0
    job, task = ending.delivery.job, ending.task
    if outcome.kind in ("done", "dead") and job is not None:
        if app.status_ttl_ms:
            ran = job.attempt if ending.started else job.attempt - 1  # expired: never ran
            final = status.final_record(
                job.task, ran, job.enqueued, ending.started, ending.finished, outcome, job.key
            )
        # A duplicate acknowledged without running leaves the first run's result be.
        if task is not None and task.keep_result_ms and outcome.reason != ALREADY_PROCESSED:
            result, result_ttl_ms = status.result_record(outcome), task.keep_result_ms
    settled = Settlement(
        ending.delivery, outcome,
        claim_key=claim.redis_key if claim is not None else None,
        claim_token=claim.token if claim is not None else "",
        claim_ttl=claim.ttl if claim is not None else 0.0,
        legacy_claim_key=claim.legacy_write_key if claim is not None else None,
        older_claim_key=claim.older_write_key if claim is not None else None,
        legacy_done=claim.legacy_done_value() if claim is not None else "",
        done_prefix=claim.done_prefix if claim is not None else "",
        legacy_markers=claim.string_markers if claim is not None else False,
        record=record,
        trim=(
            app.store.dead.trim_args(app.dead_letter_max_len, app.dead_letter_max_age_ms)
            if outcome.kind == "dead"
            else (0, 0)
        ),
        final=final, final_ttl_ms=app.status_ttl_ms, result=result, result_ttl_ms=result_ttl_ms,
        debounced=task is not None and task.debounce is not None,
        holds_slot=task is not None and bool(task.key_concurrency),
        **_history(ending),
    )  # fmt: skip
    if job is not None and job.flow is not None and outcome.kind in ("done", "dead"):
        return _in_flow(app, settled, job, job.flow)
    return settled


def _history(ending: Ending) -> dict[str, Any]:
    """The history entry of an ending and its task's name there (none for an ending that
    goes to no history; ``?`` for a job of a task this worker does not know, so a
    malformed job cannot make keys of its own; see :mod:`lockgate.core.history`)."""
    outcome, job = ending.outcome, ending.delivery.job
    if history.end_outcome(outcome) is None:
        return {}
    name = job.task if job is not None and ending.task is not None else history.UNKNOWN_TASK
    entry = history.pack_end(
        ending.delivery.job_id, outcome, job.attempt if job is not None else 0,
        ending.started, ending.finished or time.time(),
    )  # fmt: skip
    return {"history_task": name, "history_entry": entry}


def _in_flow(app: App, settled: Settlement, job: Job, flow: str) -> Settlement:
    """A flow job's settlement, with its ending for its flow: the flow's record, the step
    (done, dead or cancelled, and its position), its result (pure)."""
    outcome = settled.outcome
    action = "x" if outcome.kind == "dead" else "c" if outcome.cancelled else "o"
    return replace(
        settled,
        flow=app.store.layout.for_job(job.id, job.home).flow(flow),
        flow_step=f"{action}{flows.position_of(job.id, flow)}",
        flow_result=(outcome.result or b"") if action == "o" else status.result_record(outcome),
    )


def wire_call(consumer: Consumer, app: App, ending: Ending) -> ScriptCall:
    """The settle call of an ending, nothing in it that fails at send time.

    A dead letter's text (an error message, a traceback) may hold anything: it goes as
    escaped bytes (:func:`safe_call`). The other endings' arguments are lockgate's own
    (ids, tokens, numbers, encoded records), so they are not scanned one by one. A value
    that cannot become a call (the next attempt no longer encodes, say) turns the ending
    into a dead letter that says so, rather than a call that fails for ever.
    """
    try:
        call = consumer.settle_call(settlement(app, ending))
        return safe_call(call) if ending.outcome.kind == "dead" else call
    except LockgateError as e:
        log.error("job %s: its ending cannot be written (%s); dead-lettering it",
                  ending.delivery.job_id, e)  # fmt: skip
        ending.outcome = dead("its ending could not be written", e)
        return safe_call(consumer.settle_call(settlement(app, ending)))


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
        self._queue: list[tuple[Ending, ScriptCall]] = []
        self._inflight: list[tuple[Ending, ScriptCall]] = []
        self._wake = asyncio.Event()
        self.closing = asyncio.Event()  # set by close()
        self.failures = 0

    def close(self) -> None:
        """Finish: apply what is queued, then return from :meth:`run`."""
        self.closing.set()
        self._wake.set()

    def add(self, ending: Ending) -> None:
        """Queue an ending (an abandoned one only has its claim to release, if any)."""
        outcome = ending.outcome
        if outcome.kind == "abandoned" and (ending.claim is None or outcome.claim == "keep"):
            return
        self._queue.append((ending, wire_call(self._consumer, self._app, ending)))
        self._wake.set()

    @property
    def unsettled(self) -> list[Delivery]:
        """Deliveries whose ending has not landed yet, in flight included (they are still
        heartbeated, and never reclaimed by this worker)."""
        return [ending.delivery for ending, _ in (*self._inflight, *self._queue)]

    def __len__(self) -> int:
        return len(self._queue) + len(self._inflight)

    async def run(self) -> None:
        """Apply endings until closed and nothing is left."""
        while True:
            if not self._queue:
                if self.closing.is_set():
                    return
                self._wake.clear()
                await self._wake.wait()  # an ending, or close()
                continue
            fault = await self.flush()
            if fault is None:
                self.failures = 0
                continue
            if fault == "reload":
                continue  # redis-py loads the script again on the next call
            # Capped at 1 s: after a Redis restart the settle must land before the
            # visibility timeout hands the held-up jobs to another worker.
            delay = reconnect_delay(self.failures, cap=1.0)
            self.failures += 1
            await asyncio.sleep(delay)  # new endings join the next try

    async def flush(self) -> Fault | None:
        """Send every queued ending once; None when nothing failed, else the kind of fault.

        Raises:
            LockgateError: a refusal that cannot heal (the worker stops).
        """
        batch, self._queue = self._queue, []
        self._inflight = batch
        try:
            replies = await self._consumer.settle([call for _, call in batch])
        except BaseException as e:  # cancelled too: nothing queued is ever dropped
            self._queue = batch + self._queue
            if not isinstance(e, LockgateError) or classify(e) == "fatal":
                raise
            log.error("could not settle %d jobs (%s); keeping them and their claims, "
                      "trying again", len(batch), e)  # fmt: skip
            return classify(e)
        finally:
            self._inflight = []
        failed: list[tuple[Ending, ScriptCall]] = []
        faults: list[LockgateError] = []
        queued = 0  # jobs of flows these settles queued
        for (ending, call), reply in zip(batch, replies, strict=True):
            if isinstance(reply, LockgateError):
                if classify(reply) != "fatal":
                    log.error("job %s: settling it failed (%s); trying again",
                              ending.delivery.job_id, reply)  # fmt: skip
                faults.append(reply)
                failed.append((ending, call))
                continue
            self._landed(ending, int(reply[0]) == 1, int(reply[1]) == 1)
            if len(reply) > 2:
                queued += int(reply[2])
                if ending.outcome.cancelled and int(reply[0]) == 1:
                    await self._cancel_flow_of(ending)
        if queued:  # idle workers of a partitioned namespace wait on wake-up lists
            await self._app.store.wake_idle_async(dict.fromkeys(self._app.queues, queued))
        self._queue = failed + self._queue
        for error in faults:
            if classify(error) == "fatal":
                raise error
        if any(classify(error) == "transient" for error in faults):
            return "transient"
        return "reload" if faults else None

    async def _cancel_flow_of(self, ending: Ending) -> None:
        """A flow's job ended cancelled, and with it its flow (see ``lua/_flow.lua``): the
        flow's other queued jobs are cancelled too (they would run for nothing); a
        failure is logged (they then run, and their flow stays cancelled)."""
        job = ending.delivery.job
        if job is None or job.flow is None:
            return
        try:
            await self._app.cancel_flow_async(job.flow)
        except LockgateError as e:
            log.warning("flow %s: its queued jobs not cancelled (%s)", job.flow, e)

    def _landed(
        self, ending: Ending, owned: bool, claim_applied: bool, *, notify: bool = True
    ) -> None:
        claim, outcome = ending.claim, ending.outcome
        if claim is not None and outcome.claim != "keep":
            claim.settled(outcome.claim, int(claim_applied))
        if not owned and outcome.kind != "abandoned":
            log.warning("job %s (%s): no longer pending for this worker (another worker "
                        "took it over, or an earlier reply was lost): left alone",
                        ending.delivery.job_id, outcome.kind)  # fmt: skip
        if notify:  # the worker's counters and wake-up belong to its loop's thread
            self._applied(ending, owned)

    def apply_now(self, ending: Ending) -> None:
        """Apply an ending at once through the app's sync client, from a pool thread.

        For runs abandoned by a forced stop that end while the process lives. Tried a few
        times; if it cannot land, the claim is let go (it lapses, the job is redelivered)
        rather than held for as long as the process lives.
        """
        call = wire_call(self._consumer, self._app, ending)
        for attempt in range(APPLY_TRIES):
            try:
                _, scripts = self._app.store.sync_connection()
                (reply,) = settle_sync(scripts, self._app.redis_url, [call])
                if isinstance(reply, LockgateError):
                    raise reply
            except LockgateError as e:
                log.error("job %s: an abandoned run ended but could not settle (%s)",
                          ending.delivery.job_id, e)  # fmt: skip
                time.sleep(reconnect_delay(attempt, cap=1.0))
                continue
            self._landed(ending, int(reply[0]) == 1, int(reply[1]) == 1, notify=False)
            log.info("job %s: an abandoned run ended and settled itself (%s)",
                     ending.delivery.job_id, ending.outcome.kind)  # fmt: skip
            return
        if ending.claim is not None:
            self._app.lease_keeper.remove(ending.claim)
