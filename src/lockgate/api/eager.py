"""Eager mode for users' tests: ``with app.eager():`` runs each enqueued job inline, in the
caller, instead of sending it to Redis.

A job runs as a worker would run it: its arguments go through the wire encoding and the
task's type conversion, ``current_job()`` answers inside it, and a failure is decided by
the task's retry policy (retries run at once: their delays are skipped) until it ends
done or dead. Its handle's ``status()``, ``result()`` and ``App.job`` answer from what the
run left here, so a test reads the same API as production code. Nothing is queued: no
worker, no delay, no expiry, no rate limit, no job claim of ``idempotent=True`` tasks
(claims taken inside the task with ``app.idempotent`` still go to Redis).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import operator
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any, Protocol

from lockgate.api.idempotency import ClaimHost, step_claim
from lockgate.api.task import Task
from lockgate.core import codec
from lockgate.core.context import JobContext, JobServices, reset_current, set_current
from lockgate.core.flows import decode_result
from lockgate.core.outcome import ErrorInfo, dead, decide
from lockgate.core.sansio import drive, drive_async
from lockgate.core.status import JobInfo, encode_result, final_status, moment
from lockgate.errors import TaskNotFound


class EagerHost(ClaimHost, Protocol):
    """What eager runs use of their App (:class:`lockgate.api.app.App`): its tasks, and
    what the claims made in the runs use."""

    @property
    def tasks(self) -> Mapping[str, Task[Any, Any]]: ...

    @property
    def services(self) -> JobServices: ...


class EagerRuns:
    """What the eager runs of one ``with app.eager():`` block left, by job id."""

    def __init__(self, app: EagerHost) -> None:
        self._app = app
        self.jobs: dict[str, JobInfo] = {}

    def run(self, job: codec.Job) -> JobInfo:
        """Run ``job`` to its end in this thread (an async task on an event loop of its
        own, in a helper thread when this thread already runs one)."""
        task = self._task(job)
        if task.is_async:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return asyncio.run(self.run_async(job))
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                return pool.submit(asyncio.run, self.run_async(job)).result()
        return drive(self._attempts(task, job), operator.call)

    async def run_async(self, job: codec.Job) -> JobInfo:
        """Run ``job`` to its end on the running loop (a sync task inline)."""
        task = self._task(job)
        if not task.is_async:
            return self.run(job)
        return await drive_async(self._attempts(task, job), operator.call)

    def _attempts(
        self, task: Task[Any, Any], job: codec.Job
    ) -> Generator[Callable[[], Any], Any, JobInfo]:
        """The attempts of ``job`` until it ends, for the sync and async shells: each
        yields the task's call, which the shell makes (and awaits, for an async task)
        while the attempt's job context is current, and sends back what it returned (or
        throws back what it raised)."""
        attempt, started = job, time.time()
        while True:
            token = set_current(self._context(task, attempt))
            returned: Any = None
            error: BaseException | None = None
            try:
                args, kwargs = self._arguments(task, attempt)
                returned = yield functools.partial(task.fn, *args, **kwargs)
            except Exception as e:
                error = e
            finally:
                reset_current(token)
            ended = self._next(task, attempt, error, returned, started)
            if isinstance(ended, JobInfo):
                return ended
            attempt = ended

    def _task(self, job: codec.Job) -> Task[Any, Any]:
        task = self._app.tasks.get(job.task)
        if task is None:
            raise TaskNotFound(f"eager mode: task {job.task!r} is not registered on this app")
        return task

    def _context(self, task: Task[Any, Any], job: codec.Job) -> JobContext:
        return JobContext(
            job.id, job.task, job.queue, job.level, job.attempt, job.enqueued, app=self._app,
            retry_window=task.retry.window, idempotency_ttl=task.idempotency_ttl,
            steps=functools.partial(step_claim, self._app), flow=job.flow,
            services=self._app.services,
        )  # fmt: skip

    @staticmethod
    def _arguments(task: Task[Any, Any], job: codec.Job) -> tuple[list[Any], dict[str, Any]]:
        wired = codec.decode(codec.encode(job))  # what a worker would receive
        return task.prepare(wired.args, wired.kwargs)

    def _next(
        self, task: Task[Any, Any], job: codec.Job, error: BaseException | None,
        returned: Any, started: float,
    ) -> JobInfo | codec.Job:  # fmt: skip
        """The job's next attempt (its retry delay skipped), or how it ended."""
        outcome = decide(error, job, task.retry, now=time.time())
        if outcome.kind == "retry" and outcome.next_job is not None:
            return outcome.next_job
        result: Any = None
        failure = outcome.error
        if outcome.kind == "done" and not outcome.cancelled:
            try:  # what a worker would keep: encoded, then decoded as the task says
                kept = encode_result(returned)
                result = decode_result(kept, task.returns)
            except Exception as e:
                outcome, failure = dead("its result could not be kept", e), ErrorInfo.of(e)
        info = JobInfo(
            job.id, final_status(outcome), job.task, job.attempt, result, failure,
            moment(job.enqueued), moment(started), moment(time.time()), outcome.reason,
            result_kept=True,
        )  # fmt: skip
        self.jobs[job.id] = info
        return info
