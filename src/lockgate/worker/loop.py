"""The worker: the run loop. Reads as many jobs as it has free slots and schedules them.

The loop reads, reclaims and starts runs; a :class:`~lockgate.worker.runner.JobRunner` runs one
job and returns its ending; the :class:`~lockgate.worker.settler.Settler` applies each ending in
one owner-checked script call and retries it until it lands. Two helpers run beside the
loop, each owned and supervised here: the settler and the heartbeat (which keeps running
and not-yet-settled entries from being reclaimed). A helper that fails is logged and
restarted; one that meets an error that cannot heal (a wrong password, a missing ACL
permission) stops the worker with that error. Redis errors are classified once
(:mod:`lockgate.faults`): transient ones are retried with capped backoff, the worker stays
up. The scheduler of the ``@app.cron`` tasks it serves (:mod:`lockgate.worker.scheduler`) is
one more such helper, and stops with the loop.

Crash recovery: every worker reclaims, one at a time, jobs idle past the visibility timeout
(their worker died), finding them with ``XPENDING IDLE`` however many live entries the PEL
holds. A reclaimed job runs in a child process of its own, beside new work: if it is the
one that kills its process, only the child dies, the death is counted against that job
alone, and after ``max_deliveries`` such deaths it is dead-lettered.

Stopping: the first SIGTERM/SIGINT stops reading; running jobs get the grace period;
then async runs are cancelled (left pending, their claims released) while sync runs and
child processes, which cannot be interrupted safely, are waited for with their claims
held. A second signal stops at once: what still runs is abandoned with its claim kept
(it settles itself if it ends while the process lives; otherwise the claim lapses with
the process and the job is redelivered).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from lockgate.api.app import App
from lockgate.backend.broker import Consumer, Delivery, Liveness
from lockgate.backend.faults import classify
from lockgate.core.config import WorkerConfig
from lockgate.core.context import Holder
from lockgate.core.intake import IntakeLimit, sample_lag
from lockgate.core.logs import get_logger
from lockgate.core.outcome import dead
from lockgate.core.policy import ReadPolicy, StrictPolicy, make_policy, reconnect_delay
from lockgate.errors import AccessDenied, LockgateError
from lockgate.worker import cancels
from lockgate.worker.cancels import CANCEL_LOOK
from lockgate.worker.events import Watchers
from lockgate.worker.joblog import line_extra
from lockgate.worker.liveness import LivenessKeeper
from lockgate.worker.registry import Registry
from lockgate.worker.relay import relay_loop
from lockgate.worker.runner import Ending, JobRunner, TaskPool, isolated
from lockgate.worker.scheduler import Scheduler, served
from lockgate.worker.settler import Settler
from lockgate.worker.startup import worker_client

log = get_logger(__name__)
GATHER = 0.01  # seconds a partitioned worker's read may wait for more free slots
FORGET_EVERY = 10  # reclaim rounds between sweeps of consumers that are gone
FORCED_FLUSH = 1.0  # seconds a forced stop still gives the settler
DELIVERY_FACTOR = 4  # deliveries, per allowed crash, after which a job is dead-lettered
SHORT_WAIT = 0.1  # seconds: an idle wait shorter than this sleeps instead of blocking
TICK_EVERY = 0.05  # seconds between the event loop's ticks to its liveness keeper


class Worker:
    """Runs an app's jobs.

    Args:
        app: the app whose tasks run here.
        config: concurrency, policy, queues, timeouts; defaults suit production.

    Attributes:
        watchers: told of each job started and settled (metrics, activity counts, job
            logs); add to it before :meth:`run` (see :mod:`lockgate.worker.events`).
    """

    def __init__(self, app: App, config: WorkerConfig | None = None) -> None:
        self.app = app
        self.config = config or WorkerConfig()
        self.name = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.queues = self.config.queues or app.queues
        self.watchers = Watchers()
        # Heartbeats and activity counts for `stats` and the dashboard (lockgate.worker.registry).
        self._registry = Registry(
            app, self.name, self.queues, self.config.concurrency, lambda: len(self._running)
        )
        self.watchers.add(self._registry.recorder)
        self.watchers.add(self._registry.runs)
        self.processed = 0
        self.retried = 0
        self.dead = 0
        self._running: dict[asyncio.Task[None], Delivery] = {}
        self._landed = 0  # settles applied: a burst worker reads again after one lands
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._closing = asyncio.Event()  # helpers finish their round and return
        self._fatal: BaseException | None = None
        self._abandoned: set[asyncio.Future[None]] = set()  # waits given up at a stop
        self._consumer: Consumer | None = None
        self._runner: JobRunner | None = None
        self._settler: Settler | None = None
        self._pool: TaskPool | None = None
        self._next_reclaim = 0.0
        self._reclaim_rounds = 0
        self._burst = False
        self._intake = IntakeLimit(self.config.concurrency)
        # A partitioned read may first count the jobs of every partition (see
        # lockgate.backend.partitioned): while jobs run, a read waits up to GATHER seconds after the
        # last one for a quarter of the slots to free, so that reads carry several jobs.
        partitioned = app.store.layout.partitioned
        self._min_read = max(1, self.config.concurrency // 4) if partitioned else 1
        self._gather_until = 0.0  # until when a read waits for more free slots
        self._gathering = False
        self._reading = False  # the fetch loop's last read worked (see ready)
        self._read_at = 0.0  # monotonic time of the last read or wait that completed
        # Ready while a read or a liveness beat completed this recently (a hung server
        # completes neither; a busy worker, whose slots are full, still beats).
        self._ready_within = max(2 * self.config.idle_wait_seconds, 2.0)
        self._liveness: LivenessKeeper | None = None

    @property
    def ready(self) -> bool:
        """Connected to Redis and consuming: the fetch loop runs, its last read worked,
        a read or a liveness beat completed within twice the idle wait (2 s at least: a
        hung server completes neither), and no stop was asked for (a ``/readyz`` probe,
        see :mod:`lockgate.ops.metrics`). Safe to read from any thread."""
        if not self._reading or self._stopping.is_set():
            return False
        latest = self._read_at
        if self._liveness is not None and self._liveness.last_ok is not None:
            latest = max(latest, self._liveness.last_ok)
        return time.monotonic() - latest <= self._ready_within

    @property
    def failed(self) -> int:
        """Runs that ended in a retry or a dead letter."""
        return self.retried + self.dead

    @property
    def busy_threads(self) -> int:
        """Pool threads still at work after a stop: sync runs abandoned at their timeout
        or by a forced stop, waits on child processes. The interpreter would wait for
        them at exit; the CLI exits without them (their claims lapse with the process)."""
        return self._pool.busy if self._pool is not None else 0

    def request_stop(self) -> None:
        """Stop taking jobs; running ones get the grace period. A second call stops now."""
        if self._stopping.is_set():
            log.warning("second stop request: stopping now; runs that cannot be cancelled "
                        "keep their claims and are redelivered if they do not end")  # fmt: skip
            self._stop_now()
        self._stopping.set()
        self._wake.set()

    def _stop_now(self) -> None:
        """Cancel every run: async ones stop, sync and child runs are abandoned (claims
        kept, settled by their own thread if they end while the process lives)."""
        if self._runner is not None:
            self._runner.forced.set()
        for task in self._running:
            task.cancel()
        self._stopping.set()
        self._wake.set()

    async def run(self, *, install_signal_handlers: bool = False, burst: bool = False) -> None:
        """Run until [request_stop][lockgate.Worker.request_stop] (or a signal, if handled).

        Args:
            install_signal_handlers: stop gracefully on SIGTERM and SIGINT (twice: now).
            burst: stop by itself once nothing is queued, delayed or running (for
                scripts, examples and tests).

        Raises:
            ConnectionFailed: Redis cannot be reached at start (within ``redis_wait``).
            AccessDenied: Redis refuses this client (password, ACL, missing command).
            StartupFailed: an ``on_startup`` hook raised (no job was taken).
        """
        concurrency = self.config.concurrency
        store = self.app.store
        client = await worker_client(store, 2 * concurrency + 8, self.config.redis_wait_seconds)
        # Jobs of idempotent tasks are claimed by the read that hands them out.
        idempotent = [name for name, task in self.app.tasks.items() if task.idempotent]
        consumer = self._consumer = store.consumer(
            client, queues=self.queues, name=self.name,
            lease_seconds=self.config.visibility_seconds,
            claims=store.read_claims(
                idempotent, self.config.claim_lease_seconds, self.app.legacy_markers
            ),
        )  # fmt: skip
        store.adopt_async_client(client)  # claims and tasks share the worker's client
        # Alive before the first read: nobody takes a job of a worker that beats.
        timing = Liveness.of(self.config.visibility_seconds)
        liveness = self._liveness = LivenessKeeper(
            store.url, self.name, consumer.liveness_keys, timing, self._running_ids
        )
        keyed = {n: t.key_concurrency or 0 for n, t in self.app.tasks.items() if t.key_of}
        try:
            await store.declare_key_limits(client, keyed)  # reads look the limits up there
            await asyncio.to_thread(liveness.start)
            await self.app.hooks.start(self.app)
        except BaseException:
            await asyncio.to_thread(liveness.stop)
            store.release_async_client(client)
            await consumer.close()
            raise
        self._burst = burst
        # Sync runs, runs abandoned at their timeout, and waits on child processes.
        self._pool = TaskPool(concurrency * 3)
        self._settler = Settler(self.app, consumer, self._applied)
        quiet, gap = timing.args
        runner = self._runner = JobRunner(
            self.app, self.config, self._pool, self._settler.apply_now,
            Holder(self.name, int(quiet), int(gap)), began=self.watchers.started,
        )  # fmt: skip
        if install_signal_handlers:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self.request_stop)
        helpers = [
            asyncio.create_task(self._supervised("settle", self._settler.run)),
            asyncio.create_task(self._supervised("heartbeat", self._heartbeat_loop)),
            asyncio.create_task(self._supervised("tick", self._tick_loop)),
            asyncio.create_task(self._supervised("cancel", self._cancel_loop)),
            asyncio.create_task(
                self._supervised(
                    "lag",
                    lambda: sample_lag(self._intake.observe, self._closing, grew=self._wake.set),
                )
            ),
            asyncio.create_task(
                self._supervised("registry", lambda: self._registry.run(self._closing))
            ),
            asyncio.create_task(
                self._supervised("progress", lambda: runner.progress.run(self._closing))
            ),
        ]
        # A burst worker schedules nothing: it is done once nothing is left to run.
        schedules = served(self.app, self.queues) if self.config.scheduler and not burst else []
        if schedules:
            scheduler = Scheduler(self.app, schedules, stop=self._stopping)
            helpers.append(asyncio.create_task(self._supervised("schedule", scheduler.run)))
        if (relay := relay_loop(self.app, self._stopping, burst)) is not None:
            helpers.append(asyncio.create_task(self._supervised("outbox", relay)))
        log.info(
            "worker %s serving queues %s (backend %s, policy %s, concurrency %d)",
            self.name, ",".join(self.queues), self.app.backend, self.config.policy,
            concurrency,
        )  # fmt: skip
        try:
            await self._supervised("fetch", lambda: self._fetch_loop(self._policy()))
        finally:
            await self._shut_down(helpers)
        if self._fatal is not None:
            raise self._fatal

    def _policy(self) -> ReadPolicy:
        if self.app.store.broker.ranked:  # the ranked set itself decides the order
            return StrictPolicy(len(self.app.levels.names))
        return make_policy(self.config.policy, list(self.app.levels.weights.values()))

    # supervision

    async def _supervised(self, name: str, loop: Callable[[], Awaitable[None]]) -> None:
        """Run a loop; log and restart it when it fails; stop the worker on a fatal error."""
        failures = 0
        while True:
            started = time.monotonic()
            try:
                await loop()
                return
            except asyncio.CancelledError:
                raise
            except LockgateError as e:
                fault = classify(e)
                if fault == "fatal":  # run() raises it: one line from the CLI
                    log.debug("%s: %s; the worker stops", name, e)
                    self._fail(e)
                    return
                # Function not found: the script runners load the library on the next call.
                delay = 0.0 if fault == "reload" else reconnect_delay(failures)
                log.error("%s: %s; retrying in %.1fs", name, e, delay)
            except Exception as e:  # a bug must not stop the loop silently either
                delay = reconnect_delay(failures)
                log.exception("%s loop failed (%r); restarting it in %.1fs", name, e, delay)
            if name == "fetch":
                self._reading = False  # not ready until a read works again
            if time.monotonic() - started > 1.0:
                failures, delay = 0, reconnect_delay(0)  # it had recovered: start over
            failures += 1
            if self._closing.is_set() or (name == "fetch" and self._stopping.is_set()):
                return
            await self._unless_stopping(asyncio.sleep(delay), closing=name != "fetch")

    def _fail(self, error: BaseException) -> None:
        """A fatal error: stop at once, as a second stop would (claims are kept)."""
        if self._fatal is None:
            self._fatal = error
        self._stop_now()
        if self._settler is not None:
            self._settler.close()

    # the loop

    async def _fetch_loop(self, policy: ReadPolicy) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            if await self._step(policy):
                if self._gathering:  # for more free slots, not for long
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(
                            self._wake.wait(), self._gather_until - time.monotonic()
                        )
                else:
                    await self._wake.wait()

    async def _step(self, policy: ReadPolicy) -> bool:
        """One turn of the loop; True when it must wait for a running job to finish."""
        assert self._consumer is not None
        free = self._intake.free(len(self._running))
        self._gathering = (
            free < self._min_read
            and bool(self._running)
            and (time.monotonic() < self._gather_until)
        )
        if free <= 0 or self._gathering:
            return True
        if time.monotonic() >= self._next_reclaim and await self._reclaim():
            return False
        mine = self._mine() if self.app.store.broker.ranked else ()
        landed = self._landed
        result = await self._consumer.read(free, policy.plan(free), mine)
        self._gather_until = self._read_at = time.monotonic()
        self._gather_until += GATHER
        self._reading = True
        policy.record(result.taken, result.dry)
        for delivery in result.deliveries:
            self._start(delivery)
        if not result.deliveries:
            if self._burst:
                if self._running or (self._settler is not None and len(self._settler)):
                    # Wait for the last runs and their settles, then look once more: a
                    # read made before a settle lands sees its job still in flight.
                    return True
                if self._landed != landed:
                    return False  # a settle landed during the read (a put-back): look again
                if result.next_due is None:
                    log.info("burst: nothing left to do")
                    self._stopping.set()
                    return False
            timeout = self.config.idle_wait_seconds
            if result.next_due is not None:
                timeout = min(timeout, result.next_due + 0.002)
            timeout = min(timeout, max(0.0, self._next_reclaim - time.monotonic()) + 0.005)
            if timeout < SHORT_WAIT:
                # Redis times a blocking read out on its own clock tick (hz 10: 100 ms), so
                # a short wait (a retry or a rate-limited job due soon) sleeps here instead.
                await self._unless_stopping(asyncio.sleep(timeout))
            else:
                await self._unless_stopping(self._consumer.wait_for_work(timeout))
                self._read_at = time.monotonic()
        return False

    async def _reclaim(self) -> bool:
        """Take over one job a dead worker left; True when one was taken."""
        assert self._consumer is not None
        visibility = self.config.visibility_seconds
        delivery = await self._consumer.reclaim(visibility, self._mine())
        if delivery is None:
            self._next_reclaim = time.monotonic() + visibility / 2
            self._reclaim_rounds += 1
            if self._reclaim_rounds % FORGET_EVERY == 0:
                # A live consumer removed here is harmless: it owns nothing, and its
                # next read recreates it. Flows a producer left half queued are finished.
                await self._consumer.forget_consumers(max(10.0, visibility * 4))
                await self.app.store.flows.finish_releases()
            return False
        log.warning("job %s reclaimed from a worker that stopped (delivery %d)",
                    delivery.job_id, delivery.deliveries)  # fmt: skip
        self._next_reclaim = 0.0  # more may be waiting: look again after this one
        self._start(delivery)
        return True

    def _running_ids(self) -> list[str]:
        """Ids of the jobs running here; called from the liveness thread too."""
        try:
            return [d.job_id for d in list(self._running.values())]
        except RuntimeError:  # changed while copied: the next call gets it
            return []

    def _mine(self) -> list[str]:
        """Refs of the jobs this worker runs or has yet to settle."""
        assert self._settler is not None
        return [d.ref for d in (*self._running.values(), *self._settler.unsettled)]

    def _start(self, delivery: Delivery) -> None:
        task = asyncio.create_task(self._execute(delivery))
        self._running[task] = delivery
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._registry.runs.ended(self._running.pop(task, None))  # settled or not
        self._wake.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("a run failed outside its task: %r", task.exception())

    async def _execute(self, delivery: Delivery) -> None:
        assert self._runner is not None and self._settler is not None
        # Poison is counted by the runner (a job that kills its own child process); this
        # is the safety net for a job whose worker keeps dying while it runs, whatever
        # the cause.
        limit = DELIVERY_FACTOR * self.config.max_deliveries
        if delivery.deliveries > limit:
            reason = f"delivered {delivery.deliveries} times (max {limit})"
            ending = self._runner.with_read_claim(Ending(delivery, dead(reason)))
        else:
            try:
                ending = await self._runner.run(delivery)
            except asyncio.CancelledError:
                return  # a forced stop: the entry stays pending, reclaimed later
            except AccessDenied as e:  # the server refuses a claim: stop, entry pending
                self._fail(e)
                return
            except Exception as e:  # a bug in the runner: leave the entry to be reclaimed
                log.exception("job %s: the runner failed (%r); left pending",
                              delivery.job_id, e)  # fmt: skip
                return
        if ending.outcome.kind == "dead" and delivery.job is None:
            log.error("entry %s of %s -> dead-letter queue: %s%s", delivery.ref,
                      delivery.source, ending.outcome.reason, _error_text(ending, delivery),
                      extra=line_extra(ending, traceback=True))  # fmt: skip
        elif ending.outcome.kind == "dead":
            log.error("job %s -> dead-letter queue: %s%s", delivery.job_id,
                      ending.outcome.reason, _error_text(ending, delivery),
                      extra=line_extra(ending, traceback=True))  # fmt: skip
        elif ending.outcome.kind == "retry" and ending.outcome.error is not None:
            job = delivery.job
            log.warning("job %s (%s) attempt %d failed: %s: %s; retry in %.2fs",
                        delivery.job_id, job.task if job else "?",
                        job.attempt if job else 0, ending.outcome.error.type,
                        ending.outcome.error.message, ending.outcome.delay,
                        extra=line_extra(ending))  # fmt: skip
        if ending.outcome.kind == "retry":  # a put-back whose job was cancelled meanwhile
            ending = await cancels.unless_cancelled(self.app.store, ending)
        self._settler.add(ending)

    def _applied(self, ending: Ending, owned: bool) -> None:
        self._wake.set()  # a slot may be free, and a burst worker may be done
        self._landed += 1
        if self.watchers:
            self.watchers.settled(ending, owned)
        if not owned:
            return
        kind = ending.outcome.kind
        if kind == "done":
            self.processed += 1
        elif kind == "dead":
            self.dead += 1
        elif ending.outcome.error is not None:
            self.retried += 1

    async def _unless_stopping(self, waiting: Awaitable[None], *, closing: bool = False) -> None:
        """Await ``waiting``, abandoning it when a stop (or, for helpers, closing) comes."""
        waiter = asyncio.ensure_future(waiting)
        event = self._closing if closing else self._stopping
        stopper = asyncio.ensure_future(event.wait())
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if waiter.done():
            waiter.result()  # a connection error surfaces here
            return
        # On Python 3.11 a cancel can be absorbed inside a Redis call that has a socket
        # timeout; the blocked read then ends with its own timeout, or when the client
        # closes at shutdown. Either way the stop does not wait for it.
        waiter.cancel()
        self._abandoned.add(waiter)
        waiter.add_done_callback(self._forget_waiter)

    def _forget_waiter(self, waiter: asyncio.Future[None]) -> None:
        self._abandoned.discard(waiter)
        if not waiter.cancelled():
            waiter.exception()  # retrieved: an error of an abandoned wait is of no interest

    async def _heartbeat_loop(self) -> None:
        """Keep the entries of running and unsettled jobs fresh, every third of the
        visibility timeout, the first at once (a loop restarted after an outage must not
        wait a period first). The worker's liveness (:mod:`lockgate.worker.liveness`) is what
        keeps its jobs its own; this keeps their idle times short, so the reclaim scripts
        look at dead workers' entries only."""
        assert self._consumer is not None and self._settler is not None
        interval = self.config.visibility_seconds / 3
        while not self._closing.is_set():
            alive = [*self._running.values(), *self._settler.unsettled]
            if alive:
                await self._consumer.heartbeat(alive)
            await self._unless_stopping(asyncio.sleep(interval), closing=True)

    async def _tick_loop(self) -> None:
        """Tell the liveness keeper that the event loop runs (it logs a blocked loop)."""
        assert self._liveness is not None
        while not self._closing.is_set():
            self._liveness.tick()
            await self._unless_stopping(asyncio.sleep(TICK_EVERY), closing=True)

    async def _cancel_loop(self) -> None:
        """Pass ``App.cancel`` requests of the jobs running here to the runner, every
        ``CANCEL_LOOK`` seconds while any runs (see :func:`lockgate.worker.cancels.look`)."""
        assert self._runner is not None
        while not self._closing.is_set():
            await self._unless_stopping(asyncio.sleep(CANCEL_LOOK), closing=True)
            running = [d for d in self._running.values() if d.job is not None]
            if self._closing.is_set() or not running:
                continue
            if not await cancels.look(self.app.store, self._runner, running):
                return

    # stopping

    def _cancellable(self, task: asyncio.Task[None]) -> bool:
        """Async runs here stop on cancel; sync runs and child processes cannot."""
        delivery = self._running.get(task)
        if delivery is None or delivery.job is None:
            return True
        if isolated(delivery):
            return False
        registered = self.app.tasks.get(delivery.job.task)
        return registered is None or registered.is_async

    async def _shut_down(self, helpers: list[asyncio.Task[None]]) -> None:
        assert self._runner is not None and self._settler is not None
        running = list(self._running)
        if running:
            log.info("stopping: waiting up to %.1fs for %d jobs", self.config.grace_seconds,
                     len(running))  # fmt: skip
            await self._unless_forced(asyncio.wait(running, timeout=self.config.grace_seconds))
            late = [task for task in running if not task.done()]
            for task in late:
                if self._cancellable(task):
                    task.cancel()
            if any(not self._cancellable(task) for task in late):
                log.warning("%d sync or isolated runs cannot be interrupted: waiting for them "
                            "(a second stop leaves them)",
                            sum(not self._cancellable(t) for t in late))  # fmt: skip
            await asyncio.gather(*late, return_exceptions=True)
        # Helpers are told to finish, not cancelled: a cancellation landing inside a Redis
        # call can be absorbed by the client and leave the helper waiting forever.
        self._settler.close()
        flush_limit = FORCED_FLUSH if self._runner.forced.is_set() else self.config.grace_seconds
        settler_task = helpers[0]
        await asyncio.wait({settler_task}, timeout=max(flush_limit, 0.5))
        if len(self._settler):
            log.error("%d jobs could not be settled before stopping: they will be "
                      "redelivered", len(self._settler))  # fmt: skip
        await self.app.hooks.stop(self.app)
        self._closing.set()
        _, stuck = await asyncio.wait(helpers, timeout=5)
        for helper in stuck:
            helper.cancel()
        if stuck:  # give a cancelled helper's call in flight the time to end first
            await asyncio.wait(stuck, timeout=1)
        # The last settles' counts, and off the registry, once its loop ended (no heartbeat
        # of that loop can land after the removal and list a stopped worker again).
        await self._registry.close()
        if self._liveness is not None:
            # Sync runs abandoned by a forced stop go on in their threads, and endings
            # left unsettled are theirs: their jobs are not handed out at once.
            leave = self.busy_threads == 0 and not len(self._settler)
            await asyncio.to_thread(self._liveness.stop, leave=leave)
        if self._consumer is not None:
            self.app.store.release_async_client(self._consumer.client)
            await self._consumer.close()
        if self._abandoned:
            await asyncio.wait(self._abandoned, timeout=5)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        log.info("worker %s stopped: %d done, %d retried, %d dead-lettered",
                 self.name, self.processed, self.retried, self.dead)  # fmt: skip

    async def _unless_forced(self, waiting: Awaitable[Any]) -> None:
        assert self._runner is not None
        waiter = asyncio.ensure_future(waiting)
        forced = asyncio.ensure_future(self._runner.forced.wait())
        await asyncio.wait({waiter, forced}, return_when=asyncio.FIRST_COMPLETED)
        forced.cancel()
        if not waiter.done():
            waiter.cancel()


def _error_text(ending: Ending, delivery: Delivery) -> str:
    error = ending.outcome.error
    if error is not None:
        return f" ({error.type}: {error.message})"
    return f" ({delivery.error})" if delivery.error else ""
