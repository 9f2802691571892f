"""The worker: the run loop only. Reads as many jobs as it has free slots, runs them, settles.

Async tasks run on the event loop, sync tasks in a bounded thread pool with the job's
context copied. A finished run is settled exactly one way: acknowledged (success),
rescheduled with backoff (a retryable failure), or dead-lettered (anything else, including
entries that cannot be decoded, unknown tasks and wrong arguments). A job stopped before
it finished stays pending and is reclaimed: nothing is acked unprocessed.

Crash recovery: every worker reclaims, one at a time, jobs idle past the visibility timeout
(their worker died). A reclaimed job has been delivered before, so it runs alone: if it is
the one that kills its worker, only its own delivery count grows, and past
``max_deliveries`` it is dead-lettered while the jobs that merely ran beside it go through.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lockgate import deadletter
from lockgate.app import App, Task
from lockgate.broker import Consumer, Delivery, async_client, translated
from lockgate.codec import Job
from lockgate.config import WorkerConfig
from lockgate.context import JobContext, set_current
from lockgate.errors import (
    AlreadyProcessed,
    ClaimBusy,
    ConnectionFailed,
    InvalidArguments,
    LockgateError,
)
from lockgate.idempotency import Claim
from lockgate.policy import ReadPolicy, StrictPolicy, make_policy, reconnect_delay
from lockgate.retry import decide
from lockgate.sorted_broker import SortedConsumer, SortedProducer
from lockgate.stream_broker import StreamConsumer

log = logging.getLogger(__name__)
FORGET_EVERY = 10  # reclaim rounds between sweeps of consumers that are gone


class Abandoned(TimeoutError):
    """A sync run went past its timeout; its thread goes on, unwatched by the job."""

    def __init__(self, task: str, timeout: float, running: asyncio.Future[Any]) -> None:
        super().__init__(f"task {task!r} ran over its timeout of {timeout:g}s")
        self.running = running


class Worker:
    """Runs an app's jobs.

    Args:
        app: the app whose tasks run here.
        config: concurrency, policy, queues, timeouts; defaults suit production.
    """

    def __init__(self, app: App, config: WorkerConfig | None = None) -> None:
        self.app = app
        self.config = config or WorkerConfig()
        self.name = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.queues = self.config.queues or app.queues
        self.processed = 0
        self.retried = 0
        self.dead = 0
        self._running: dict[asyncio.Task[None], Delivery] = {}
        self._held: Delivery | None = None  # a reclaimed job waiting to run alone
        self._alone: asyncio.Task[None] | None = None  # the reclaimed job running alone
        self._done: list[tuple[Delivery, Claim | None]] = []
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._ack_wake = asyncio.Event()
        self._closing = asyncio.Event()  # helpers finish their round and return
        self._abandoned: set[asyncio.Future[None]] = set()  # waits given up at a stop
        self._settling: set[asyncio.Future[None]] = set()  # claims of abandoned sync runs
        self._consumer: Consumer | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._next_reclaim = 0.0
        self._reclaim_rounds = 0
        self._burst = False

    @property
    def failed(self) -> int:
        """Runs that ended in a retry or a dead letter."""
        return self.retried + self.dead

    def request_stop(self) -> None:
        """Stop taking jobs; running ones get the grace period to finish."""
        if self._stopping.is_set():
            log.warning("second stop request: cancelling running jobs now")
            for task in self._running:
                task.cancel()
        self._stopping.set()
        self._wake.set()

    async def run(self, *, install_signal_handlers: bool = False, burst: bool = False) -> None:
        """Run until :meth:`request_stop` (or SIGTERM/SIGINT when handlers are installed).

        Args:
            install_signal_handlers: stop gracefully on SIGTERM and SIGINT.
            burst: stop by itself once nothing is queued, delayed or running (for
                scripts, examples and tests).

        Raises:
            ConnectionFailed: Redis cannot be reached at start.
        """
        client = async_client(self.app.redis_url, socket_timeout=None)
        try:
            with translated(self.app.redis_url):
                await client.ping()
        except ConnectionFailed:
            await client.aclose()
            raise
        self._consumer = self._make_consumer(client)
        self.app.adopt_async_client(client)  # claims and tasks share the worker's client
        self._burst = burst
        # Room beyond concurrency for sync runs abandoned after their timeout.
        self._pool = ThreadPoolExecutor(self.config.concurrency * 2, "lockgate-task")
        if install_signal_handlers:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self.request_stop)
        helpers = [
            asyncio.create_task(self._ack_loop()),
            asyncio.create_task(self._heartbeat_loop()),
        ]
        log.info(
            "worker %s serving queues %s (backend %s, policy %s, concurrency %d)",
            self.name, ",".join(self.queues), self.app.backend, self.config.policy,
            self.config.concurrency,
        )  # fmt: skip
        try:
            await self._fetch_loop(self._policy())
        finally:
            await self._shut_down(helpers)

    def _make_consumer(self, client: Any) -> Consumer:
        if self.app.backend == "sorted":
            assert isinstance(self.app.producer, SortedProducer)
            return SortedConsumer(
                client, url=self.app.redis_url, keys=self.app.keys, levels=self.app.levels,
                queues=self.queues, lease_seconds=self.config.visibility_seconds,
                producer=self.app.producer,
            )  # fmt: skip
        return StreamConsumer(
            client, url=self.app.redis_url, keys=self.app.keys, levels=self.app.levels,
            queues=self.queues, consumer=self.name,
        )  # fmt: skip

    def _policy(self) -> ReadPolicy:
        if self.app.backend == "sorted":  # the ranked set itself decides the order
            return StrictPolicy(len(self.app.levels.names))
        return make_policy(self.config.policy, list(self.app.levels.weights.values()))

    async def _fetch_loop(self, policy: ReadPolicy) -> None:
        failures = 0
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                if await self._step(policy):
                    await self._wake.wait()
                failures = 0
            except ConnectionFailed as e:
                delay = reconnect_delay(failures)
                failures += 1
                log.error("%s; retrying in %.1fs", e, delay)
                await self._unless_stopping(asyncio.sleep(delay))

    async def _step(self, policy: ReadPolicy) -> bool:
        """One turn of the loop; True when it must wait for a running job to finish."""
        assert self._consumer is not None
        if self._alone is not None:
            return True
        if self._held is not None:
            if self._running:
                return True  # drain the others first: the reclaimed job runs alone
            held, self._held = self._held, None
            self._alone = self._start(held)
            return False
        free = self.config.concurrency - len(self._running)
        if free <= 0:
            return True
        if time.monotonic() >= self._next_reclaim and await self._reclaim():
            return False
        result = await self._consumer.read(free, policy.plan(free))
        policy.record(result.taken, result.dry)
        for delivery in result.deliveries:
            if delivery.deliveries > 1:  # sorted backend: a job whose lease expired
                await self._take_back(delivery)
            else:
                self._start(delivery)
        if not result.deliveries:
            if self._burst and result.next_due is None:
                if self._running:
                    return True  # wait for the last jobs, then look once more
                log.info("burst: nothing left to do")
                self._stopping.set()
                return False
            timeout = self.config.idle_wait_seconds
            if result.next_due is not None:
                timeout = min(timeout, result.next_due + 0.005)
            timeout = min(timeout, max(0.0, self._next_reclaim - time.monotonic()) + 0.005)
            await self._unless_stopping(self._consumer.wait_for_work(timeout))
        return False

    async def _reclaim(self) -> bool:
        """Take over one job a dead worker left; True when one was taken."""
        assert self._consumer is not None
        visibility = self.config.visibility_seconds
        delivery = await self._consumer.reclaim(visibility)
        if delivery is None:
            self._next_reclaim = time.monotonic() + visibility / 2
            self._reclaim_rounds += 1
            if self._reclaim_rounds % FORGET_EVERY == 0:
                # A live consumer removed here is harmless: it owns nothing, and its
                # next read recreates it.
                await self._consumer.forget_consumers(max(10.0, visibility * 4))
            return False
        log.warning("job %s reclaimed from a worker that stopped (delivery %d)",
                    delivery.job_id, delivery.deliveries)  # fmt: skip
        self._next_reclaim = 0.0  # more may be waiting: look again after this one
        await self._take_back(delivery)
        return True

    async def _take_back(self, delivery: Delivery) -> None:
        """Handle a job delivered before: dead-letter a poison one, else run it alone."""
        if delivery.deliveries > self.config.max_deliveries:
            reason = f"delivered {delivery.deliveries} times (max {self.config.max_deliveries})"
            await self._dead_letter(delivery, reason)
            return
        if self._held is not None:  # cannot happen: reads stop while one is held
            raise AssertionError("two reclaimed jobs held at once")
        self._held = delivery

    def _start(self, delivery: Delivery) -> asyncio.Task[None]:
        task = asyncio.create_task(self._execute(delivery))
        self._running[task] = delivery
        task.add_done_callback(self._finished)
        return task

    async def _unless_stopping(self, waiting: Awaitable[None]) -> None:
        """Await ``waiting``, abandoning it when a stop is requested."""
        waiter = asyncio.ensure_future(waiting)
        stopper = asyncio.ensure_future(self._stopping.wait())
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

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.pop(task, None)
        if task is self._alone:
            self._alone = None
        self._wake.set()

    async def _execute(self, delivery: Delivery) -> None:
        job = delivery.job
        if job is None:
            await self._dead_letter(delivery, "undecodable entry")
            return
        task = self.app.tasks.get(job.task)
        if task is None:
            await self._dead_letter(delivery, f"unknown task {job.task!r}")
            return
        try:
            task.check_arguments(job.args, job.kwargs)
        except InvalidArguments as e:
            await self._dead_letter(delivery, "wrong arguments", e)
            return
        set_current(
            JobContext(
                job.id, job.task, job.queue, job.level, job.attempt, job.enqueued,
                app=self.app, retry_window=task.retry.window,
                idempotency_ttl=task.idempotency_ttl,
            )
        )  # fmt: skip
        claim = await self._claim_job(delivery, task, job) if task.idempotent else None
        if claim is False:
            return
        error: BaseException | None = None
        try:
            await self._call(task, job)
        except asyncio.CancelledError as e:
            log.warning("job %s (%s) stopped before it finished; left pending", job.id, job.task)
            if isinstance(claim, Claim):
                await claim.__aexit__(type(e), e, None)
            raise
        except BaseException as e:  # a task's SystemExit must not stop the worker
            error = e
        if isinstance(error, Abandoned):
            if isinstance(claim, Claim):
                self._settle_when_done(claim, error.running)
                claim = None
            error = TimeoutError(str(error))  # what users see: a plain timeout
        elif isinstance(claim, Claim) and error is not None:
            await claim.__aexit__(type(error), error, None)  # released: a retry may run
        await self._settle(delivery, task, job, error, claim if isinstance(claim, Claim) else None)

    async def _claim_job(self, delivery: Delivery, task: Task[Any, Any], job: Job) -> Claim | bool:
        """Claim an idempotent task's job id; False when the job must not run now."""
        assert self._consumer is not None
        claim = Claim(
            self.app, f"job:{job.id}", ttl=task.idempotency_ttl,
            lease=self.config.visibility_seconds,
        )  # fmt: skip
        try:
            await claim.__aenter__()
        except AlreadyProcessed:
            log.info("job %s (%s) already processed: acknowledged without running",
                     job.id, job.task)  # fmt: skip
            self._done.append((delivery, None))
            self._ack_wake.set()
            return False
        except ClaimBusy as e:
            # Another worker runs it right now: back off without spending an attempt.
            await self._consumer.retry(delivery, job, e.delay or 0.0)
            return False
        return claim

    async def _call(self, task: Task[Any, Any], job: Job) -> None:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for runs the task in a new
        # asyncio task, which lets a SystemExit raised by the task stop the event loop.
        timeout = task.retry.timeout
        if task.is_async:
            async with asyncio.timeout(timeout):
                await task.fn(*job.args, **job.kwargs)
            return
        call = functools.partial(task.fn, *job.args, **job.kwargs)
        context = contextvars.copy_context()
        running = asyncio.get_running_loop().run_in_executor(self._pool, context.run, call)
        try:
            async with asyncio.timeout(timeout):
                returned = await asyncio.shield(running)
        except TimeoutError:
            raise Abandoned(task.name, timeout or 0.0, running) from None
        if inspect.isawaitable(returned):
            close = getattr(returned, "close", None)
            if close is not None:
                close()  # a coroutine never awaited would warn later, far from here
            raise TypeError(
                f"task {task.name!r} is a plain function that returned an awaitable; "
                "declare it with 'async def' so the worker awaits it"
            )

    def _settle_when_done(self, claim: Claim, running: asyncio.Future[Any]) -> None:
        """Keep an abandoned sync run's claim until its thread ends, then settle it.

        Releasing it at the timeout would let the retry run the side effect a second time
        while the first run still goes on; held, the retry meets ClaimBusy and waits.
        """

        def settle(done: asyncio.Future[Any]) -> None:
            failed = done.cancelled() or done.exception() is not None
            action = claim.__aexit__(Exception if failed else None, None, None)
            settling = asyncio.ensure_future(action)
            self._settling.add(settling)
            settling.add_done_callback(self._settling.discard)

        running.add_done_callback(settle)

    async def _settle(
        self,
        delivery: Delivery,
        task: Task[Any, Any],
        job: Job,
        error: BaseException | None,
        claim: Claim | None = None,
    ) -> None:
        outcome = decide(error, job.attempt, task.retry)
        if outcome.action == "ack":
            # The done marker goes with the ack, in the same round trip and before it.
            self._done.append((delivery, claim if error is None else None))
            self._ack_wake.set()
            return
        assert self._consumer is not None and error is not None
        if outcome.action == "retry":
            log.warning("job %s (%s) attempt %d failed: %r; retry in %.2fs",
                        job.id, job.task, job.attempt, error, outcome.delay)  # fmt: skip
            following = Job(
                id=job.id, task=job.task, queue=job.queue, level=job.level, args=job.args,
                kwargs=job.kwargs, attempt=job.attempt + 1, enqueued=job.enqueued,
            )  # fmt: skip
            await self._consumer.retry(delivery, following, outcome.delay)
            self.retried += 1
            return
        log.error("job %s (%s) attempt %d failed: %r", job.id, job.task, job.attempt, error,
                  exc_info=error)  # fmt: skip
        await self._dead_letter(delivery, outcome.reason, error)

    async def _dead_letter(
        self, delivery: Delivery, reason: str, error: BaseException | None = None
    ) -> None:
        assert self._consumer is not None
        if delivery.job is None:
            log.error("entry %s of %s -> dead-letter queue: %s: %s", delivery.ref,
                      delivery.source, reason, delivery.error)  # fmt: skip
        else:
            log.error("job %s -> dead-letter queue: %s", delivery.job_id, reason)
        if await self._consumer.dead_letter(delivery, deadletter.record(delivery, reason, error)):
            self.dead += 1

    async def _ack_loop(self) -> None:
        while not self._closing.is_set():
            await self._ack_wake.wait()
            self._ack_wake.clear()
            await self._flush_acks()
        await self._flush_acks()

    async def _flush_acks(self) -> None:
        assert self._consumer is not None
        if not self._done:
            return
        batch, self._done = self._done, []
        claims = [claim for _, claim in batch if claim is not None]
        done_calls = [claim.settle_call("done", claim.ttl) for claim in claims]
        try:
            kept = await self._consumer.ack([delivery for delivery, _ in batch], done_calls)
        except LockgateError as e:
            # Unacked jobs stay pending in Redis and run again elsewhere: at-least-once;
            # their claims expire with the lease and the rerun finds them free.
            log.error("could not ack %d jobs: %s", len(batch), e)
            for claim in claims:
                self.app.lease_keeper.remove(claim)
            return
        for claim, still_ours in zip(claims, kept, strict=True):
            claim.settled("done", still_ours)
        self.processed += len(batch)

    async def _heartbeat_loop(self) -> None:
        assert self._consumer is not None
        interval = self.config.visibility_seconds / 3
        while not self._closing.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), interval)
            if self._closing.is_set():
                return
            alive = list(self._running.values())
            if self._held is not None:
                alive.append(self._held)
            if alive:
                try:
                    await self._consumer.heartbeat(alive)
                except LockgateError as e:
                    log.error("heartbeat failed: %s", e)

    async def _shut_down(self, helpers: list[asyncio.Task[None]]) -> None:
        running = list(self._running)
        if running:
            log.info("stopping: waiting up to %.1fs for %d jobs", self.config.grace_seconds,
                     len(running))  # fmt: skip
            _, late = await asyncio.wait(running, timeout=self.config.grace_seconds)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        # Helpers are told to finish, not cancelled: a cancellation landing inside a Redis
        # call can be absorbed by the client and leave the helper waiting forever.
        self._closing.set()
        self._ack_wake.set()
        _, stuck = await asyncio.wait(helpers, timeout=10)
        for helper in stuck:
            helper.cancel()
        if self._consumer is not None:
            self.app.release_async_client(self._consumer.client)
            await self._consumer.close()
        if self._abandoned:
            await asyncio.wait(self._abandoned, timeout=5)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        log.info("worker %s stopped: %d done, %d retried, %d dead-lettered",
                 self.name, self.processed, self.retried, self.dead)  # fmt: skip
