"""The job runner: runs one delivery and returns how it ended. It never settles anything.

A first delivery runs here: an async task on the event loop, a sync one in a thread of the
worker's pool with the job's context copied. A delivery seen before (its worker died while
running it) runs in a child process of its own (:mod:`lockgate.process.isolation`): if it is the
poison that kills its process, only the child dies, its death is pinned on that job alone,
and the worker goes on reading new work on its free slots.

Sync runs cannot be stopped. One that outlives its timeout or a forced stop is
*abandoned*: it keeps its claim (renewed while the process lives) and, when its thread
ends, settles itself through the sync client, so no other worker runs the side effect
while the first run still goes on.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import msgspec

from lockgate.api.app import App
from lockgate.api.idempotency import Claim, step_claim
from lockgate.api.task import Task
from lockgate.backend.broker import Delivery, ReadClaim
from lockgate.backend.keys import Keys
from lockgate.core import tracing
from lockgate.core.codec import Job
from lockgate.core.config import WorkerConfig
from lockgate.core.context import Holder, JobContext, set_current
from lockgate.core.logs import get_logger
from lockgate.core.outcome import (
    ALREADY_PROCESSED,
    CANCELLED,
    DONE,
    ErrorInfo,
    Outcome,
    dead,
    decide,
    earliest,
    expired,
    markers_expired,
    wait,
)
from lockgate.core.status import encode_result
from lockgate.core.unknown_task import unknown_task
from lockgate.errors import (
    AccessDenied,
    AlreadyProcessed,
    BrokerError,
    ClaimBusy,
    ConfigError,
    InvalidArguments,
    SerializationError,
)
from lockgate.process import isolation
from lockgate.worker import flow_traces
from lockgate.worker.progress import ProgressWriter

log = get_logger(__name__)

# A claim that could not be taken because Redis did not answer: look again soon.
CLAIM_RETRY = 0.5


@dataclass(slots=True)
class Ending:
    """How a run ended: the outcome, the job claim it held (None when none), its task,
    when the run started and ended (Unix time; 0 when it never started), and the trace and
    span ids of its span when traced (``lockgate.otel``)."""

    delivery: Delivery
    outcome: Outcome
    claim: Claim | None = None
    task: Task[Any, Any] | None = None
    started: float = 0.0
    finished: float = 0.0
    trace_ids: tracing.SpanIds | None = None


Finisher = Callable[[Any, BaseException | None], None]


class SyncRun:
    """A call in a pool thread (a sync task, or the wait for a child process) which can be
    told, once abandoned, what to do with its result when it ends."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._call = call
        self._lock = threading.Lock()
        self._finished = False
        self._finisher: Finisher | None = None

    def __call__(self) -> Any:
        result: Any = None
        error: BaseException | None = None
        try:
            result = self._call()
            return result
        except BaseException as e:
            error = e
            raise
        finally:
            with self._lock:
                self._finished = True
                finisher = self._finisher
            if finisher is not None:
                try:
                    finisher(result, error)
                except Exception:  # the thread is the last owner of this job: say so
                    log.exception("an abandoned run could not settle its job")

    def abandon(self, finisher: Finisher) -> bool:
        """Hand the run's end to ``finisher`` (called in its thread); False if it ended."""
        with self._lock:
            if self._finished:
                return False
            self._finisher = finisher
            return True


class TaskPool(ThreadPoolExecutor):
    """The worker's threads, counting the calls still running (or waiting to run)."""

    def __init__(self, size: int) -> None:
        super().__init__(size, "lockgate-task")
        self._busy = 0
        self._busy_lock = threading.Lock()

    @property
    def busy(self) -> int:
        """Calls submitted and not finished: a process exit would have to wait for them."""
        with self._busy_lock:
            return self._busy

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._busy_lock:
            self._busy += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _: Future[Any]) -> None:
        with self._busy_lock:
            self._busy -= 1


def _not_told(delivery: Delivery, now: float) -> None:
    """No one to tell that a run began."""


class Abandoned(Exception):
    """A sync run was left to finish alone (its timeout passed, or a forced stop)."""


class JobRunner:
    """Runs deliveries of one worker.

    Args:
        app: the app whose tasks run.
        config: the worker's configuration.
        pool: threads for sync tasks and for waiting on child processes.
        finish_abandoned: applies, from the run's own thread, the ending of a sync run
            abandoned by a forced stop (the worker's sync settle path).
        holder: the worker that holds the claims its runs make (see
            :class:`lockgate.core.context.Holder`).
        began: told when a run begins, its task about to be called (the worker's
            watchers: a run put back unrun never begins).
    """

    def __init__(
        self,
        app: App,
        config: WorkerConfig,
        pool: TaskPool,
        finish_abandoned: Callable[[Ending], None],
        holder: Holder | None = None,
        began: Callable[[Delivery, float], None] | None = None,
    ) -> None:
        self.app = app
        self.holder = holder
        self._began = began if began is not None else _not_told
        self._steps = functools.partial(step_claim, app)  # the runs' step claims
        self.config = config
        self.pool = pool
        # Where its runs report progress (current_job().set_progress); the worker runs it.
        self.progress = ProgressWriter(app.store.jobs, app.status_ttl_ms)
        self.forced = asyncio.Event()  # a second stop: abandon what cannot be cancelled
        self._finish_abandoned = finish_abandoned
        # Runs inside their task function now, by job id: what App.cancel can reach.
        self._inside: dict[str, tuple[_Run, asyncio.Task[Any] | None]] = {}

    async def run(self, delivery: Delivery) -> Ending:
        """Run a delivery; the ending says how to settle it."""
        hooks, job = tracing.hooks, delivery.job
        if hooks is not None and job is not None:
            return await self._run_traced(hooks, delivery, job)
        ending = self.with_read_claim(await self._run(delivery))
        ending.finished = time.time()
        return ending

    async def _run_traced(self, hooks: tracing.TraceHooks, delivery: Delivery, job: Job) -> Ending:
        """:meth:`run` in the attempt's span, current while its task runs (a sync task's
        thread gets a copy of the context, a child process a copy of the thread's).

        A flow job's span context is kept for its children when the span starts, before
        the task runs, never after: nothing is awaited between a task's return and the
        hand-off of its ending, which a stop's cancel or a failure there would drop (the
        entry left pending, the finished job run again). Kept at each start, the one
        kept last is the attempt that ended done: a child runs only once all its parents
        are done, and a done job starts no other attempt (but for a redelivery turned
        back while the run it repeats goes on: then the link names that attempt's span,
        in the same trace). A stop or a failure while it is kept costs a run whose task
        has not started (its entry runs it later, once), or the links (best effort)."""
        links = await flow_traces.parent_traces(self.app, job) if job.flow else []
        with hooks.process(job, delivery.queue, time.time(), links) as attempt:
            if job.flow is not None:
                await flow_traces.record_trace(self.app, job, hooks.carrier())
            ending = self.with_read_claim(await self._run(delivery))
            ending.finished = time.time()
            attempt.end(ending.outcome)
            ending.trace_ids = attempt.ids
        return ending

    def cancel(self, job_id: str, take: str) -> bool:
        """Cancel a job's run, when it is inside its task function and is the take
        ``take`` (stream entry id, or sorted take token): the run's
        ``current_job().cancelled`` becomes true, and an async run (not one in a child
        process) gets ``CancelledError`` at its next await. True when it was reached."""
        inside = self._inside.get(job_id)
        if inside is None:
            return False
        run, task = inside
        if take not in (run.delivery.ref, run.delivery.owner) or run.context.cancelled:
            return False
        run.context.request_cancel()
        log.info("job %s (%s): cancel requested", job_id, run.task.name)
        if task is not None:
            task.cancel()
        return True

    def with_read_claim(self, ending: Ending) -> Ending:
        """The ending, holding the job claim its read took when the run did not get as far
        as using it (a wrong argument, a job delivered too often): settling lets it go."""
        delivery, read_claim = ending.delivery, ending.delivery.claim
        if ending.claim is None and read_claim is not None and read_claim.state == 1:
            job = delivery.job
            task = self.app.tasks.get(job.task) if job is not None else None
            if job is not None and task is not None:
                ending.claim = self._job_claim(task, job, read_claim.token)
        return ending

    async def _run(self, delivery: Delivery) -> Ending:
        job = delivery.job
        if job is None:
            return Ending(delivery, dead("undecodable entry"))
        task = self.app.tasks.get(job.task)
        if task is None:
            outcome = unknown_task(job, self.app.unknown_task_grace, time.time())
            if outcome.kind == "retry":  # a dead letter is logged by the loop
                log.info("job %s: %s (in %.1fs)", job.id, outcome.reason, outcome.delay)
            return Ending(delivery, outcome)
        late = expired(job, task.expires, time.time())
        if late is not None:
            log.info("job %s (%s) dropped unrun: %s", job.id, job.task, late.reason)
            return Ending(delivery, late, task=task)
        try:
            args, kwargs = task.prepare(job.args, job.kwargs)
        except InvalidArguments as e:
            return Ending(delivery, dead("wrong arguments", e))
        if markers_expired(job.markers_expire, time.time()):
            return Ending(delivery, dead(
                "the done markers of its finished steps expired before this attempt "
                "started: it would run them again; raise the steps' ttl"
            ), task=task)  # fmt: skip
        if task.rate_limit is not None or (task.key_rate is not None and job.key is not None):
            held = await self._rate_limited(task, delivery)
            if held is not None:  # its read claim, if any, is let go (with_read_claim)
                return Ending(delivery, held, task=task)
        context = JobContext.of_run(
            job.id, job.task, job.queue, job.level, job.attempt, job.enqueued,
            app=self.app, retry_window=task.retry.window, idempotency_ttl=task.idempotency_ttl,
            holder=self.holder, steps=self._steps, flow=job.flow, services=self.app.services,
            progress=self.progress.board,
        )  # fmt: skip
        set_current(context)
        run = _Run(delivery, task, job, args, kwargs, context)
        if task.idempotent:
            run.claim, early = await self._claim(task, job, delivery.claim)
            if early is not None:
                return Ending(delivery, early, task=task)
        started = time.time()
        self._began(delivery, started)
        try:
            if isolated(delivery):
                outcome = await self._run_isolated(run)
            else:
                outcome = await self._run_here(run)
        except Exception as e:  # the runner itself failed (a fork refused, say)
            log.exception("job %s (%s) could not be run; trying again", job.id, job.task)
            outcome = wait(job, CLAIM_RETRY, f"could not be run: {e!r}")
        return Ending(delivery, outcome, run.claim, task, started)

    async def _rate_limited(self, task: Task[Any, Any], delivery: Delivery) -> Outcome | None:
        """Ask the task's shared limiters (its job's key's ``key_rate_limit``'s, then its
        ``rate_limit``'s) for a start now: None to start, else an outcome that puts the
        same attempt back (no attempt spent) until the start they reserved for it, when it
        starts without asking again (or, when only the key's limiter reserved it, asks the
        task's alone)."""
        job, taken = delivery.job, delivery.claim
        assert job is not None
        if taken is not None and taken.state != 1:
            return None  # done, or run by another worker: the claim step ends it unrun
        if job.rate_reserved:
            return None  # its start was reserved when it was put back
        key_rate = task.key_rate if not job.key_reserved else None  # reserved: asked
        try:
            delay, all_reserved = await self.app.store.rate_limit_wait(
                task.name, task.rate_limit, key_rate, job.key
            )
        except AccessDenied:
            raise  # no retry mends an ACL: the worker stops (see Worker._execute)
        except BrokerError as e:
            log.warning("job %s (%s): rate limit check failed (%s); trying again",
                        job.id, job.task, e)  # fmt: skip
            return Outcome("retry", delay=CLAIM_RETRY, next_job=job,
                           reason=f"rate limit check failed: {e}")  # fmt: skip
        if delay <= 0:
            return None
        # A put-back (waits + 1, no attempt spent): the run has not begun.
        if all_reserved:
            following = msgspec.structs.replace(job, waits=job.waits + 1, rate_reserved=True)
        else:  # the key's limiter alone reserved it
            following = msgspec.structs.replace(job, waits=job.waits + 1, key_reserved=True)
        return Outcome("retry", delay=delay, next_job=following, reason="rate limited")

    def _job_claim(self, task: Task[Any, Any], job: Job, token: str | None = None) -> Claim:
        return Claim(
            self.app, Keys.job_claim_name(task.name, job.id), ttl=task.idempotency_ttl,
            lease=self.config.claim_lease_seconds,
            legacy_key=Keys.legacy_job_claim_name(job.id), legacy_scope=task.name,
            older_key=Keys.older_job_claim_name(task.name, job.id), token=token, job_id=job.id,
            job_key=job.home,
        )  # fmt: skip

    async def _claim(
        self, task: Task[Any, Any], job: Job, taken: ReadClaim | None
    ) -> tuple[Claim | None, Outcome | None]:
        """Claim an idempotent task's job (unless its read did); an outcome instead when
        it must not run now."""
        claim = self._job_claim(task, job, taken.token if taken is not None else None)
        try:
            if taken is not None:
                claim.enter_taken(taken.state, taken.wait)
            else:
                await claim.__aenter__()
        except AlreadyProcessed:
            log.info("job %s (%s) already processed: acknowledged without running",
                     job.id, job.task)  # fmt: skip
            return None, Outcome("done", reason=ALREADY_PROCESSED, claim="keep")
        except ClaimBusy as e:
            # Another worker runs it right now: look again soon, spending no attempt.
            return None, wait(job, e.delay or 0.0, str(e))
        except AccessDenied:
            raise  # no retry mends an ACL: the worker stops (see Worker._execute)
        except BrokerError as e:
            log.warning("job %s (%s): claim failed (%s); trying again", job.id, job.task, e)
            return None, wait(job, CLAIM_RETRY, f"claim failed: {e}")
        return claim, None

    def _decide(self, error: BaseException | None, run: _Run, returned: Any = None) -> Outcome:
        if error is not None and run.context.cancelled:
            return CANCELLED  # it stopped because it was asked to: not a failure
        markers = min(run.context.done_markers, default=0.0)
        outcome = decide(
            error, run.job, run.task.retry, now=time.time(),
            markers_expire=earliest(run.job.markers_expire, markers),
        )  # fmt: skip
        if outcome is DONE and (run.task.keep_result_ms or run.job.flow is not None):
            try:
                return replace(outcome, result=encode_result(returned))
            except SerializationError as e:  # as an eager run ends: the same in tests
                if run.task.keep_result_ms:
                    return dead("its result could not be kept", e)
                # A flow's job that keeps no result of its own: done (its effects
                # happened), with nothing for the jobs that wait for it.
                log.warning("job %s: its result is not kept for its flow (%s)", run.job.id, e)
        return outcome

    async def _run_here(self, run: _Run) -> Outcome:
        task, job = run.task, run.job
        error: BaseException | None = None
        returned: Any = None
        self._inside[job.id] = (run, asyncio.current_task() if task.is_async else None)
        try:
            if task.is_async and task.retry.timeout is None:
                returned = await task.fn(*run.args, **run.kwargs)  # no timer to arm
            elif task.is_async:
                async with asyncio.timeout(task.retry.timeout):
                    returned = await task.fn(*run.args, **run.kwargs)
            else:
                returned = await self._run_sync(run)
        except asyncio.CancelledError:
            if run.context.cancelled:
                current = asyncio.current_task()
                if current is not None and task.is_async:
                    current.uncancel()  # asked for by App.cancel: this run ends here
                return CANCELLED
            if task.is_async:
                log.warning("job %s (%s) stopped before it finished; left pending",
                            job.id, job.task)  # fmt: skip
                return Outcome("abandoned", reason="stopped", claim="release")
            log.warning("job %s (%s): sync run abandoned at a forced stop; it keeps its "
                        "claim and settles itself if it ends", job.id, job.task)  # fmt: skip
            return Outcome("abandoned", reason="forced stop", claim="keep")
        except Abandoned as e:
            # Timed out: the thread goes on and keeps the claim until it ends, so the
            # retry meets ClaimBusy and waits instead of running the side effect twice.
            return replace(self._decide(TimeoutError(str(e)), run), claim="keep")
        except BaseException as e:  # a task's SystemExit must not stop the worker
            error = e
        finally:
            self._inside.pop(job.id, None)
        return self._decide(error, run, returned)

    async def _run_sync(self, run: _Run) -> Any:
        task = run.task
        returned = await self._in_thread(
            SyncRun(lambda: task.fn(*run.args, **run.kwargs)), task.retry.timeout, run
        )
        if inspect.isawaitable(returned):
            close = getattr(returned, "close", None)
            if close is not None:
                close()  # a coroutine never awaited would warn later, far from here
            raise ConfigError(  # a declaration no retry mends: never retried
                f"task {task.name!r} is a plain function that returned an awaitable; "
                "declare it with 'async def' so the worker awaits it"
            )
        return returned

    async def _in_thread(self, call: SyncRun, timeout: float | None, run: _Run) -> Any:
        """Await a call in a pool thread, which cannot be interrupted.

        Past ``timeout`` the call is abandoned (it keeps the claim until it ends, then
        settles the claim alone). A graceful stop waits for it; a forced stop abandons it
        to settle the whole job itself when it ends, from its thread.
        """
        loop = asyncio.get_running_loop()
        running = loop.run_in_executor(self.pool, contextvars.copy_context().run, call)
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    return await asyncio.shield(running)
            except TimeoutError:
                if running.done():
                    # The task's own TimeoutError (or it ended as the timeout fired): its
                    # outcome, not the timeout's. Waiting on would raise it again at once.
                    return running.result()
                if call.abandon(self._claim_finisher(run)):
                    raise Abandoned(
                        f"task {run.task.name!r} ran over its timeout of {timeout:g}s"
                    ) from None
                deadline = None  # it ended at the timeout: take its result
            except asyncio.CancelledError:
                if running.done():
                    # The call itself raised CancelledError (a sync task told by App.cancel
                    # to stop): its outcome. Waiting on would raise it again at once.
                    return running.result()
                if not self.forced.is_set():
                    # A graceful stop cannot interrupt a thread: wait for it, keeping the
                    # claim and the heartbeat; a second stop abandons it.
                    current = asyncio.current_task()
                    if current is not None:
                        current.uncancel()
                    continue
                if call.abandon(self._ending_finisher(run)):
                    raise

    def _claim_finisher(self, run: _Run) -> Finisher:
        """After a timeout: when the thread ends, settle the claim alone (done/release)."""

        def finish(_: Any, error: BaseException | None) -> None:
            if run.claim is not None:
                run.claim.__exit__(type(error) if error is not None else None, error, None)
            log.info("job %s (%s): the run abandoned at its timeout has ended",
                     run.job.id, run.task.name)  # fmt: skip

        return finish

    def _ending_finisher(self, run: _Run) -> Finisher:
        """After a forced stop: when the thread ends, settle the whole job from it."""

        def finish(result: Any, error: BaseException | None) -> None:
            if isolated(run.delivery):
                outcome = self._child_outcome(run, result) if error is None else wait(
                    run.job, CLAIM_RETRY, f"could not be run: {error!r}"
                )  # fmt: skip
            else:
                outcome = self._decide(error, run, result)
            ending = Ending(run.delivery, outcome, run.claim, run.task, finished=time.time())
            self._finish_abandoned(ending)

        return finish

    async def _run_isolated(self, run: _Run) -> Outcome:
        task, job = run.task, run.job

        def work() -> bytes:  # runs in the child process
            set_current(run.context)
            error: BaseException | None = None
            returned: Any = None
            try:
                if task.is_async:
                    returned = asyncio.run(task.fn(*run.args, **run.kwargs))
                else:
                    returned = task.fn(*run.args, **run.kwargs)
            except BaseException as e:
                error = e
            return msgspec.json.encode(self._decide(error, run, returned))

        log.info("job %s (%s) delivered %d times: running it in a child process",
                 job.id, job.task, run.delivery.deliveries)  # fmt: skip
        timeout = task.retry.timeout
        call = SyncRun(lambda: isolation.run_child(work, timeout=timeout))
        ended = await self._in_thread(call, None, run)  # the child has its own timeout
        return self._child_outcome(run, ended)

    def _child_outcome(self, run: _Run, ended: isolation.ChildExit) -> Outcome:
        """How a run in a child process ended (from any thread)."""
        job = run.job
        if ended.report is not None:
            try:
                return msgspec.json.decode(ended.report, type=Outcome)
            except msgspec.ValidationError as e:
                return dead("the child process sent an unreadable report", ErrorInfo.of(e))
        if ended.timed_out:
            return self._decide(TimeoutError(ended.reason), run)
        # Alone in its child, the job itself killed it: count that against the job, not
        # the delivery count, which also grows when a worker dies of something else.
        crashes, limit = job.crashes + 1, self.config.max_deliveries
        reason = f"its process died ({ended.reason})"
        if crashes >= limit:
            return dead(f"{reason}: {crashes} times, the most allowed (max {limit})")
        log.error("job %s (%s): %s, %d of %d times; trying it again in a new child",
                  job.id, job.task, reason, crashes, limit)  # fmt: skip
        following = msgspec.structs.replace(job, crashes=crashes, waits=0)
        return Outcome(
            "retry", next_job=following, reason=reason, error=ErrorInfo("ProcessDied", reason)
        )


def isolated(delivery: Delivery) -> bool:
    """Whether a delivery runs in a child process: delivered before, or a known crasher."""
    job = delivery.job
    return delivery.deliveries > 1 or (job is not None and job.crashes > 0)


@dataclass(slots=True)
class _Run:
    """One run of a job: what the runner's steps share."""

    delivery: Delivery
    task: Task[Any, Any]
    job: Job
    args: list[Any]
    kwargs: dict[str, Any]
    context: JobContext
    claim: Claim | None = None
