"""The worker: the run loop only. Reads as many jobs as it has free slots, runs them, acks.

Async tasks run on the event loop, sync tasks in a bounded thread pool with the job's
context copied. A job is acknowledged only after it succeeded; anything else (a failure,
an undecodable entry, an unknown task, wrong arguments, a stop before it finished) stays
pending in Redis, never silently acked.
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
import uuid
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lockgate.app import App
from lockgate.broker import Consumer, Delivery, async_client, translated
from lockgate.config import WorkerConfig
from lockgate.context import JobContext, set_current
from lockgate.errors import ConnectionFailed, InvalidArguments
from lockgate.policy import ReadPolicy, StrictPolicy, make_policy, reconnect_delay
from lockgate.sorted_broker import SortedConsumer
from lockgate.stream_broker import StreamConsumer

log = logging.getLogger(__name__)


class Worker:
    """Runs an app's jobs.

    Args:
        app: the app whose tasks run here.
        config: concurrency, policy, queues, grace period; defaults suit production.
    """

    def __init__(self, app: App, config: WorkerConfig | None = None) -> None:
        self.app = app
        self.config = config or WorkerConfig()
        self.name = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.queues = self.config.queues or app.queues
        self.processed = 0
        self.failed = 0
        self._running: dict[asyncio.Task[None], Delivery] = {}
        self._done: list[Delivery] = []
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._ack_wake = asyncio.Event()
        self._consumer: Consumer | None = None
        self._pool: ThreadPoolExecutor | None = None

    def request_stop(self) -> None:
        """Stop taking jobs; running ones get the grace period to finish."""
        if self._stopping.is_set():
            log.warning("second stop request: cancelling running jobs now")
            for task in self._running:
                task.cancel()
        self._stopping.set()
        self._wake.set()

    async def run(self, *, install_signal_handlers: bool = False) -> None:
        """Run until :meth:`request_stop` (or SIGTERM/SIGINT when handlers are installed).

        Raises:
            ConnectionFailed: Redis cannot be reached at start.
        """
        client = async_client(self.app.redis_url)
        with translated(self.app.redis_url):
            await client.ping()
        self._consumer = self._make_consumer(client)
        self._pool = ThreadPoolExecutor(self.config.concurrency, "lockgate-task")
        if install_signal_handlers:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self.request_stop)
        helpers = [asyncio.create_task(self._ack_loop())]
        if self.app.backend == "sorted":
            helpers.append(asyncio.create_task(self._heartbeat_loop()))
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
            return SortedConsumer(
                client, url=self.app.redis_url, keys=self.app.keys, levels=self.app.levels,
                queues=self.queues, lease_seconds=self.config.lease_seconds,
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
        assert self._consumer is not None
        concurrency = self.config.concurrency
        failures = 0
        while not self._stopping.is_set():
            self._wake.clear()
            free = concurrency - len(self._running)
            if free <= 0:
                await self._wake.wait()
                continue
            try:
                result = await self._consumer.read(free, policy.plan(free))
                policy.record(result.taken, result.dry)
                for delivery in result.deliveries:
                    task = asyncio.create_task(self._execute(delivery))
                    self._running[task] = delivery
                    task.add_done_callback(self._finished)
                if not result.deliveries:
                    await self._unless_stopping(
                        self._consumer.wait_for_work(self.config.idle_wait_seconds)
                    )
                failures = 0
            except ConnectionFailed as e:
                delay = reconnect_delay(failures)
                failures += 1
                log.error("%s; retrying in %.1fs", e, delay)
                await self._unless_stopping(asyncio.sleep(delay))

    async def _unless_stopping(self, waiting: Awaitable[None]) -> None:
        """Await ``waiting``, abandoning it when a stop is requested."""
        waiter = asyncio.ensure_future(waiting)
        stopper = asyncio.ensure_future(self._stopping.wait())
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        for pending in (waiter, stopper):
            pending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiter

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.pop(task, None)
        self._wake.set()

    async def _execute(self, delivery: Delivery) -> None:
        job = delivery.job
        if job is None:
            log.error(
                "undecodable entry %s in %s: %s; left pending",
                delivery.ref, delivery.source, delivery.error,
            )  # fmt: skip
            return
        task = self.app.tasks.get(job.task)
        if task is None:
            log.error("job %s: unknown task %r; left pending", job.id, job.task)
            return
        try:
            task.check_arguments(job.args, job.kwargs)
        except InvalidArguments as e:
            log.error("job %s: %s; left pending", job.id, e)
            return
        set_current(JobContext(job.id, job.task, job.queue, job.level, job.attempt, job.enqueued))
        try:
            if task.is_async:
                await task.fn(*job.args, **job.kwargs)
            else:
                call = functools.partial(task.fn, *job.args, **job.kwargs)
                context = contextvars.copy_context()
                loop = asyncio.get_running_loop()
                returned = await loop.run_in_executor(self._pool, context.run, call)
                if inspect.isawaitable(returned):
                    close = getattr(returned, "close", None)
                    if close is not None:
                        close()  # a coroutine never awaited would warn later, far from here
                    raise TypeError(
                        f"task {task.name!r} is a plain function that returned an awaitable; "
                        "declare it with 'async def' so the worker awaits it"
                    )
        except asyncio.CancelledError:
            log.warning("job %s (%s) stopped before it finished; left pending", job.id, job.task)
            raise
        except BaseException:
            self.failed += 1
            log.exception("job %s (%s) failed; left pending", job.id, job.task)
            return
        self._done.append(delivery)
        self._ack_wake.set()

    async def _ack_loop(self) -> None:
        while True:
            await self._ack_wake.wait()
            self._ack_wake.clear()
            await self._flush_acks()

    async def _flush_acks(self) -> None:
        assert self._consumer is not None
        if not self._done:
            return
        batch, self._done = self._done, []
        try:
            await self._consumer.ack(batch)
        except ConnectionFailed as e:
            # Unacked jobs stay pending in Redis and run again elsewhere: at-least-once.
            log.error("could not ack %d jobs: %s", len(batch), e)
            return
        self.processed += len(batch)

    async def _heartbeat_loop(self) -> None:
        assert self._consumer is not None
        interval = self.config.lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            if self._running:
                try:
                    await self._consumer.heartbeat(list(self._running.values()))
                except ConnectionFailed as e:
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
        for helper in helpers:
            helper.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        if self._consumer is not None:
            with contextlib.suppress(ConnectionFailed):
                await self._flush_acks()
            await self._consumer.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        log.info("worker %s stopped: %d done, %d failed", self.name, self.processed, self.failed)
