"""The App: task registry and enqueue, async at the core with a thin sync facade."""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import timedelta, tzinfo
from types import SimpleNamespace
from typing import Any, ParamSpec, TypeVar, Unpack, overload

from lockgate.api import waiting
from lockgate.api.eager import EagerRuns
from lockgate.api.flow_jobs import FlowServices
from lockgate.api.flows import FlowInfo, FlowOps, FlowResult
from lockgate.api.hooks import H, Hooks
from lockgate.api.idempotency import DEFAULT_LEASE, Claim, LeaseKeeper
from lockgate.api.task import EnqueueResult, Task
from lockgate.backend.broker import EnqueuePlan, Outgoing
from lockgate.backend.connections import AsyncClient, SyncClient
from lockgate.backend.keys import Keys, check_key
from lockgate.backend.lua import AsyncScripts, SyncScripts
from lockgate.backend.store import Store
from lockgate.core import codec, tracing
from lockgate.core.app_config import (
    CompatibilityConfig,
    ConnectionConfig,
    LevelsConfig,
    LimitsConfig,
)
from lockgate.core.codec import Job
from lockgate.core.config import Backend, resolve_redis_url, seconds
from lockgate.core.cron import Schedule, check_arguments
from lockgate.core.flows import Step
from lockgate.core.message import Message, check_size
from lockgate.core.retry import DEFAULT_TTL
from lockgate.core.status import CancelOutcome, JobInfo, job_info
from lockgate.core.tasks import TaskKeywords, TaskSettings
from lockgate.errors import ConfigError
from lockgate.integrations.atomic import warn_if_in_atomic
from lockgate.integrations.outbox import Outbox, outbox_of

P = ParamSpec("P")
R = TypeVar("R")


class App:
    """A lockgate application: where tasks are declared and jobs are enqueued.

    Args:
        redis_url: None uses ``$LOCKGATE_REDIS_URL``, else ``redis://127.0.0.1:6379/0``.
        namespace: prefix (and Cluster hash tag) of every key; apps sharing jobs share it.
        levels: level name -> weight; order is precedence (first is highest).
        backend: ``streams`` (a stream per queue and level) or ``sorted`` (one ranked set
            per queue with aging); producers and workers must agree.
        aging: sorted backend: seconds of waiting worth one level of precedence.
        max_payload_bytes: largest encoded job accepted by enqueue.
        dead_letter_max_len: dead letters kept (the oldest are trimmed); None: no limit.
        dead_letter_max_age: seconds (or a timedelta) a dead letter is kept; None: no limit.
        legacy_markers: also write done markers (and mirror claims) the way lockgate 0.1
            and 0.2 workers read them, for a rolling upgrade while such workers still run;
            about 250 B of Redis memory per marker (480 B for an ``idempotent=True`` job)
            instead of about 45 B; turn it off once none runs. Markers those releases
            wrote are honoured either way. Job and step claims and ``incr_once`` guards
            are then also mirrored under their 0.2 names (``job:<task>:<id>``, which two
            jobs can share: task ``a`` with id ``b:c``, task ``a:b`` with id ``c``),
            tagged so that a marker counts only for its own job here.
        status_ttl: seconds (or a timedelta) an ended job's status (done, dead, cancelled,
            with its times and attempts) stays readable by ``App.job``, then reads
            ``unknown``: about 300 B of Redis memory per job ended in that window. None
            or 0: not kept.
        partitions: how many partitions (hash tags, so Redis Cluster slots) the
            namespace's jobs are spread over, fixed for its life: 1 keeps every key
            under one tag (one primary of a cluster); more spread the jobs, and their
            load and memory, over the cluster's primaries (see
            :mod:`lockgate.backend.partitions`). Producers and workers must agree: a count other
            than the one recorded in Redis is a ``ConfigError`` at the first connection.
            The sorted backend has one partition.
        flow_ttl: seconds (or a timedelta) a finished flow's records (its jobs' results
            for ``parent_results``, its state for ``App.flow``) are kept; a failed flow's
            live at least as long as its dead letters.
        unknown_task_grace: seconds (or a timedelta) from its enqueue during which a job
            whose task the worker that took it does not know (a rolling deploy) is put
            back for one that knows it, no attempt spent; then it is dead-lettered. 0:
            dead-lettered at once.
        outbox: a PostgreSQL DSN: ``enqueue_on_commit`` with a PostgreSQL connection
            writes the job into the outbox table in the caller's transaction, and workers
            relay it to Redis (see :mod:`lockgate.integrations.outbox`). None: sent after
            the commit.

    Raises:
        ConfigError: invalid namespace, levels, backend, aging, payload or dead-letter
            limit, a ``legacy_markers`` that is not a bool, a bad ``partitions``
            (several with the sorted backend), or an ``outbox`` that is no DSN.
    """

    def __init__(
        self,
        redis_url: str | None = None,
        namespace: str = "default",
        levels: Mapping[str, int] | None = None,
        backend: Backend = "streams",
        *,
        aging: float | timedelta = 60.0,
        max_payload_bytes: int = 1_048_576,
        dead_letter_max_len: int | None = 100_000,
        dead_letter_max_age: float | timedelta | None = timedelta(days=30),
        legacy_markers: bool = False,
        status_ttl: float | timedelta | None = timedelta(minutes=10),
        partitions: int = 1,
        flow_ttl: float | timedelta = timedelta(days=1),
        unknown_task_grace: float | timedelta = timedelta(minutes=10),
        outbox: str | Outbox | None = None,
    ) -> None:
        connection = ConnectionConfig(
            redis_url=redis_url, namespace=namespace, backend=backend, partitions=partitions
        )
        ranking = LevelsConfig(levels=levels, aging=aging)
        limits = LimitsConfig(
            max_payload_bytes=max_payload_bytes,
            dead_letter_max_len=dead_letter_max_len,
            dead_letter_max_age=dead_letter_max_age,
            status_ttl=status_ttl,
        )
        compatibility = CompatibilityConfig(legacy_markers=legacy_markers)
        self.namespace = connection.namespace
        self.backend: Backend = connection.backend
        self.partitions = connection.partitions
        self.levels = ranking.order
        self.aging_seconds = ranking.aging_seconds
        self.max_payload_bytes = limits.max_payload_bytes
        self.dead_letter_max_len: int = limits.trim_len
        self.dead_letter_max_age_ms: int = limits.trim_age_ms
        self.status_ttl_ms: int = limits.status_ttl_ms
        self.legacy_markers = compatibility.legacy_markers
        self.flow_ttl_ms = max(1, round(seconds(flow_ttl, "flow_ttl") * 1000))
        self.unknown_task_grace = seconds(unknown_task_grace, "unknown_task_grace")
        self.outbox = outbox_of(outbox)  # lockgate worker --outbox sets it too
        self.store = Store(
            connection.url, self.namespace, self.levels, self.backend, self.aging_seconds,
            self.partitions, queues=lambda: self.queues,
        )  # fmt: skip
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.schedules: dict[str, Schedule] = {}  # of the @cron tasks, by task name
        self.lease_keeper = LeaseKeeper(self)
        self.hooks = Hooks()
        # What the startup hooks set up for the tasks (a database pool, an HTTP client).
        self.state = SimpleNamespace()
        self._eager: EagerRuns | None = None  # inside ``with app.eager():``
        self._flows = FlowOps(self)
        self.services = FlowServices(self, self._flows)  # what running jobs ask
        _APPS.add(self)

    def on_startup(self, hook: H) -> H:
        """Run ``hook`` in each worker process once it reached Redis, before its first job.

        Sync or async, taking no argument or the App; what it sets up goes on
        ``app.state``. Hooks run in declaration order; one that raises stops the worker
        with [StartupFailed][lockgate.StartupFailed] (exit 2 from the CLI).

        Raises:
            ConfigError: ``hook`` is not a function of no argument or one (the App).
        """
        return self.hooks.on_startup(hook)

    def on_shutdown(self, hook: H) -> H:
        """Run ``hook`` in each worker process after its last job settled (last declared
        first); one that raises is logged and the others still run. See
        :mod:`lockgate.api.hooks` for runs it cannot wait for.

        Raises:
            ConfigError: ``hook`` is not a function of no argument or one (the App).
        """
        return self.hooks.on_shutdown(hook)

    @property
    def redis_url(self) -> str:
        """The Redis URL (see ``App(redis_url=...)``)."""
        return self.store.url

    @redis_url.setter
    def redis_url(self, url: str) -> None:
        self.store.retarget(resolve_redis_url(url))

    @property
    def keys(self) -> Keys:
        """The namespace's key names (for inspection: lockgate's own calls go through
        ``app.store``)."""
        return self.store.keys

    @property
    def default_priority(self) -> str:
        """The middle level (``normal`` with the default levels)."""
        return self.levels.default

    @property
    def queues(self) -> tuple[str, ...]:
        """Queues the registered tasks use, in declaration order."""
        return tuple(dict.fromkeys(task.queue for task in self.tasks.values())) or ("default",)

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(self, **settings: Unpack[TaskKeywords]) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(self, fn: Callable[P, R] | None = None, **settings: Unpack[TaskKeywords]) -> Any:
        """Register a function (sync or async) as a task: ``@app.task``, or
        ``@app.task(...)`` with options as keyword arguments (``priority="low"``,
        ``retries=5``, ...): the fields of [TaskSettings][lockgate.core.tasks.TaskSettings],
        where each is documented with its default.

        Raises:
            TypeError: a keyword argument that is not one of those options.
            ConfigError: unknown level, bad queue or task name, a name already registered,
                a bad retry option, an idempotency TTL under twice the retry window, an
                expiry that is not positive or is shorter than the first retry's delay,
                or a ``rate_limit`` not of the form ``"N/s"``, ``"N/m"``, ``"N/h"``.
        """
        declared = TaskSettings.of(settings, "App.task")

        def register(func: Callable[..., Any]) -> Task[Any, Any]:
            return self._register(func, declared)

        return register(fn) if fn is not None else register

    def _register(self, func: Callable[..., Any], settings: TaskSettings) -> Task[Any, Any]:
        registered = Task(self, func, settings)
        if registered.name in self.tasks:
            raise ConfigError(f"a task named {registered.name!r} is already registered")
        self.tasks[registered.name] = registered
        return registered

    def cron(
        self,
        expression: str,
        *,
        tz: str | tzinfo = "UTC",
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        **settings: Unpack[TaskKeywords],
    ) -> Callable[[Callable[P, R]], Task[P, R]]:
        """Register a function (sync or async) as a task run on a schedule.

        Each worker that serves the task's queue runs a scheduler (off with
        ``WorkerConfig(scheduler=False)`` or ``lockgate worker --no-scheduler``; a burst
        worker runs none) that enqueues each tick as job ``cron:<task>:<tick in UTC>``.
        The enqueue takes a once-only key per tick, so a tick is enqueued once however
        many workers run, and not again after its job ended. Missed ticks: a scheduler
        that starts enqueues the latest tick up to now unless one already did, so after
        downtime the last missed tick runs once, late, and the earlier ones not at all
        (a newly declared schedule's latest tick, too, runs when its first worker starts).
        Workers' clocks must agree within a fraction of the period (NTP).

        Args:
            expression: ``minute hour day-of-month month day-of-week``, or six fields
                with seconds first (``*/10 * * * * *``); also ``L``, ``LW``, ``5L``,
                ``MON#2`` (cronsim's syntax; no ``@daily``).
            tz: the time zone the expression is read in: ``"UTC"``, an IANA name
                (``"Europe/Paris"``) or a ``zoneinfo.ZoneInfo``. Around DST changes it
                runs as Debian's cron does: a daily job whose time is skipped in spring
                runs when the clock jumps, and runs once on the day an hour repeats.
            args: the positional arguments of each tick's job.
            kwargs: its keyword arguments (any names: they all go to the task).
            **settings: the options of [task][lockgate.App.task]
                ([TaskSettings][lockgate.core.tasks.TaskSettings]).

        Raises:
            TypeError: a keyword argument that is not an option of a task.
            ConfigError: a bad expression or time zone (naming the task), ``args`` and
                ``kwargs`` that do not fit the function, or what
                [task][lockgate.App.task] refuses.
            SerializationError: an argument would not arrive as it is.
        """
        declared = TaskSettings.of(settings, "App.cron")

        def register(func: Callable[P, R]) -> Task[P, R]:
            task_name = declared.task_name(func)
            schedule = Schedule.parse(task_name, expression, tz, args, kwargs)
            check_arguments(func, task_name, schedule.args, schedule.kwargs)
            registered = self._register(func, declared)
            self.schedules[task_name] = schedule
            return registered

        return register

    def outgoing(self, message: Message) -> Outgoing:
        """A message encoded and checked, with what its enqueue call needs of its task.

        Raises:
            SerializationError: it is over ``max_payload_bytes``, or does not encode.
        """
        data = check_size(message, codec.encode(message.job), self.max_payload_bytes)
        once_key, once_ttl_ms = message.once or (None, 0)
        delay_ms = round(message.delay * 1000)
        registered = self.tasks.get(message.job.task)
        limited = registered.name if registered and registered.key_concurrency else ""
        debounce = registered.debounce if registered is not None else None
        return Outgoing(message.job, data, delay_ms, once_key, once_ttl_ms, limited, debounce)

    def _plan(self, messages: Iterable[Message]) -> tuple[list[Job], EnqueuePlan]:
        messages = list(messages)
        if messages:  # a plain enqueue in Django's transaction.atomic() is warned about
            warn_if_in_atomic(messages[0].job.task)
        outgoing = [self.outgoing(message) for message in messages]
        return [m.job for m in messages], self.store.broker.plan_enqueue(outgoing)

    def limited_task(self, task: str) -> str:
        """``task`` when it is registered with a ``key_concurrency``, else ""."""
        registered = self.tasks.get(task)
        return task if registered is not None and registered.key_concurrency else ""

    def idempotent(
        self,
        key: str,
        ttl: float | timedelta = DEFAULT_TTL,
        *,
        lease: float | timedelta = DEFAULT_LEASE,
        conn: Any = None,
    ) -> Claim:
        """Guard a side effect so it happens once: ``with`` or ``async with``.

        Claims ``key`` before the block (an owner token with a renewed lease), leaves a
        done marker for ``ttl`` on success, and releases the claim on an exception so a
        retry can run. Inside a worker, a duplicate's ``AlreadyProcessed`` that escapes
        the task acknowledges the job without error.

        Args:
            key: what is done once (e.g. ``f"email:{order_id}"``), at most 512 bytes.
            ttl: how long the done marker blocks duplicates.
            lease: how long a claim outlives an owner that stopped renewing it.
            conn: a psycopg 3 connection: PostgreSQL becomes the source of truth, the
                claim row joining the connection's current transaction.

        Raises:
            AlreadyProcessed: on entry, when the key is done.
            ClaimBusy: on entry, when another worker holds a live claim: a worker puts
                the job back and looks again soon (50 ms doubling to 1 s), spending no
                attempt.
            ConfigError: bad key, TTL or lease, or a TTL under twice the running task's
                retry window.
        """
        return Claim(self, key, ttl=ttl, lease=lease, conn=conn)

    def incr_once(
        self, name: str, request_id: str, amount: int = 1, *, ttl: float | timedelta = DEFAULT_TTL
    ) -> tuple[bool, int]:
        """Increment counter ``name`` once per ``request_id`` (retries do not double-count).

        Returns:
            (counted, value): False and the current value for a repeated request id.
        """
        check_key(request_id)
        guard_ttl = max(1, round(seconds(ttl, "ttl") * 1000))
        return self.store.incr_once(name, request_id, int(amount), guard_ttl, self.legacy_markers)

    def counter(self, name: str) -> int:
        """The current value of a counter kept by [incr_once][lockgate.App.incr_once]."""
        return self.store.counter(name)

    def cooldown(self, key: str, period: float | timedelta) -> bool:
        """Start a cooldown on ``key`` unless one is running (the lesson's OTP check).

        One atomic ``SET NX PX``, not EXISTS then SET, so two racing callers cannot both
        pass.

        Returns:
            True when the caller may act (no cooldown was running; one starts now).
        """
        check_key(key)
        ms = max(1, round(seconds(period, "period") * 1000))
        return self.store.cooldown(key, ms)

    def enqueue_many(self, messages: Iterable[Message]) -> list[EnqueueResult]:
        """Queue many jobs in one round trip (batches of 500 per script call).

        Raises:
            SerializationError: an argument has no JSON form (nothing is enqueued).
            OutcomeUnknown: no reply came once the jobs were sent (a timeout, a lost
                connection): they may have been queued; its ``job_ids`` are theirs, and
                enqueueing the same messages again (they keep their ids) is safe.
            ConnectionFailed: Redis cannot be reached (nothing was sent).
        """
        if self._eager is not None:
            eager = self._eager
            return [self._ran(eager.run(m.job), m.job) for m in messages]
        if tracing.hooks is not None:  # a span around the send, its context in the jobs
            with tracing.hooks.send(list(messages)) as traced:
                return self._enqueue_many(traced)
        return self._enqueue_many(messages)

    def _enqueue_many(self, messages: Iterable[Message]) -> list[EnqueueResult]:
        jobs, plan = self._plan(messages)
        if not jobs:
            return []
        created = self.store.enqueue(plan, [j.id for j in jobs])
        return [EnqueueResult(j.id, c, j.task, self) for j, c in zip(jobs, created, strict=True)]

    async def enqueue_many_async(self, messages: Iterable[Message]) -> list[EnqueueResult]:
        """Async [enqueue_many][lockgate.App.enqueue_many]."""
        if self._eager is not None:
            eager = self._eager
            return [self._ran(await eager.run_async(m.job), m.job) for m in messages]
        if tracing.hooks is not None:
            with tracing.hooks.send(list(messages)) as traced:
                return await self._enqueue_many_async(traced)
        return await self._enqueue_many_async(messages)

    async def _enqueue_many_async(self, messages: Iterable[Message]) -> list[EnqueueResult]:
        jobs, plan = self._plan(messages)
        if not jobs:
            return []
        created = await self.store.enqueue_async(plan, [j.id for j in jobs])
        return [EnqueueResult(j.id, c, j.task, self) for j, c in zip(jobs, created, strict=True)]

    def enqueue_flow(self, flow: Step, *, flow_id: str | None = None) -> FlowResult:
        """Enqueue a workflow ([chain][lockgate.chain], [group][lockgate.group],
        ``.then``) whole or not at all: its first jobs are queued, each other job once
        every job it waits for succeeded (moved in those jobs' settle calls).

        Args:
            flow: the flow (or one Message).
            flow_id: its id, from which its jobs' ids derive (``<flow_id>.<n>``); a flow
                that exists with this id is not enqueued again (``created=False``).
                Default: a random id.

        Raises:
            ConfigError: a step with its own ``job_id``, or a task with a per-key limit
                in a flow of a partitioned namespace.
            SerializationError: a job does not encode, or is over ``max_payload_bytes``.
            OutcomeUnknown: no reply came: enqueue again with the same ``flow_id``.
            ConnectionFailed: Redis cannot be reached.
        """
        if self._eager is not None:
            return self._flows.ran_eagerly(self._flows.plan(flow, flow_id), self._eager.run)
        return self._flows.enqueue(flow, flow_id)

    async def enqueue_flow_async(self, flow: Step, *, flow_id: str | None = None) -> FlowResult:
        """Async [enqueue_flow][lockgate.App.enqueue_flow]."""
        if self._eager is not None:
            return self._flows.ran_eagerly(self._flows.plan(flow, flow_id), self._eager.run)
        return await self._flows.enqueue_async(flow, flow_id)

    def flow(self, flow_id: str) -> FlowInfo:
        """What is known of a flow: its state, its jobs with theirs, which wait on which."""
        return self._flows.info(flow_id)

    async def flow_async(self, flow_id: str) -> FlowInfo:
        """Async [flow][lockgate.App.flow]."""
        return await self._flows.info_async(flow_id)

    def cancel_flow(self, flow_id: str) -> int:
        """Cancel every job of a flow that has not started (running ones are told to stop,
        as [cancel][lockgate.App.cancel] does), so that none of it runs later; how many
        were cancelled."""
        return self._flows.cancel(flow_id)

    async def cancel_flow_async(self, flow_id: str) -> int:
        """Async [cancel_flow][lockgate.App.cancel_flow]."""
        return await self._flows.cancel_async(flow_id)

    def _ran(self, info: JobInfo, job: Job) -> EnqueueResult:
        return EnqueueResult(info.id, True, job.task, self, info)

    @contextlib.contextmanager
    def eager(self) -> Iterator[None]:
        """Run each job enqueued inside the block inline, in the caller, instead of
        queueing it: for users' unit tests.

        A job runs as a worker would run it (arguments through the wire encoding,
        ``current_job()`` set, failures retried by its task's policy with the delays
        skipped, until it ends done or dead); its handle's ``status()`` and
        ``result()`` and [App.job][lockgate.App.job] answer from that run. Nothing
        touches the queue (see :mod:`lockgate.api.eager`). Blocks nest.
        """
        outer = self._eager
        self._eager = outer or EagerRuns(self)
        try:
            yield
        finally:
            self._eager = outer
            if outer is None:  # its flows end with it, as its jobs do
                self._flows.eager.clear()

    # status, results, cancellation

    def job(self, job_id: str) -> JobInfo:
        """What is known of a job: its status, attempts, times, and its result or error
        when its task keeps them (``keep_result``).

        Two round trips, whatever the backend (the job's marker, then one read-only
        script). A job's status is ``waiting``, ``delayed``, ``running``, then ``done``,
        ``dead`` (a final failure: there is no other failed state) or ``cancelled``,
        kept for ``status_ttl`` after it ended; ``unknown`` before its enqueue and after
        that.

        Raises:
            ConnectionFailed: Redis cannot be reached.
        """
        if self._eager is not None and job_id in self._eager.jobs:
            return self._eager.jobs[job_id]
        return job_info(job_id, self.store.jobs.status(job_id), self._returns)

    async def job_async(self, job_id: str) -> JobInfo:
        """Async [job][lockgate.App.job]."""
        if self._eager is not None and job_id in self._eager.jobs:
            return self._eager.jobs[job_id]
        return job_info(job_id, await self.store.jobs.status_async(job_id), self._returns)

    def cancel(self, job_id: str) -> CancelOutcome:
        """Cancel a job.

        A waiting or delayed job is removed at once (atomically) and ends ``cancelled``;
        its id is free again. A running job's worker is told within a fraction of a
        second: an async run gets ``CancelledError`` at its next await and ends
        ``cancelled`` (neither retried nor dead-lettered); a sync run sees
        ``current_job().cancelled`` become true (one in a child process, a job that
        crashed a worker before, is not reached).

        Returns:
            ``CANCELLED`` (it had not started: it will not run), ``CANCELLING`` (it is
            running: its worker was told to stop it), ``ENDED`` (it had ended) or
            ``UNKNOWN`` (no such job); true for the first two (see
            [CancelOutcome][lockgate.CancelOutcome]).

        Raises:
            ConnectionFailed: Redis cannot be reached.
        """
        return self._flows.cancel_job(job_id)

    async def cancel_async(self, job_id: str) -> CancelOutcome:
        """Async [cancel][lockgate.App.cancel]."""
        return await self._flows.cancel_job_async(job_id)

    def wait_result(self, job_id: str, task: str = "", timeout: float | None = None) -> Any:
        """Wait for a job to end and return its result (see
        [EnqueueResult.result][lockgate.EnqueueResult.result])."""
        self._check_kept(task, job_id)
        return waiting.wait_result(self, job_id, timeout)

    async def wait_result_async(
        self, job_id: str, task: str = "", timeout: float | None = None
    ) -> Any:
        """Async [wait_result][lockgate.App.wait_result]."""
        self._check_kept(task, job_id)
        return await waiting.wait_result_async(self, job_id, timeout)

    def _check_kept(self, task: str, job_id: str) -> None:
        if self._eager is not None and job_id in self._eager.jobs:
            return  # an eager run keeps its result here, whatever its task declares
        registered = self.tasks.get(task)
        if registered is not None and not registered.keep_result_ms:
            raise ConfigError(
                f"task {task!r} keeps no result: declare it with "
                f"@app.task(keep_result=SECONDS) to read results"
            )

    def _returns(self, task: str) -> Any:
        registered = self.tasks.get(task)
        return registered.returns if registered is not None else Any

    def sync_connection(self) -> tuple[SyncClient, SyncScripts]:
        """The app's shared sync client and its scripts (created on first use)."""
        return self.store.sync_connection()

    async def async_connection(self) -> tuple[AsyncClient, AsyncScripts]:
        """The running loop's async client and its scripts (created on first use)."""
        return await self.store.async_connection()

    def client(self) -> SyncClient:
        """The app's sync Redis client (shared; for inspection and tests)."""
        return self.store.sync_connection()[0]

    def close(self) -> None:
        """Close the sync client."""
        self.store.close()

    async def aclose(self) -> None:
        """Close this loop's async client."""
        await self.store.aclose()

    def _after_fork_in_child(self) -> None:
        # Another parent thread may have held a lock; the parent's clients are set aside,
        # never closed here (see Store.after_fork_in_child).
        self.store.after_fork_in_child(_FORKED_AWAY)
        self.lease_keeper._after_fork_in_child()


# Every live App, made fit for a forked child by the hook below (see lockgate.process.isolation).
_APPS: weakref.WeakSet[App] = weakref.WeakSet()
_FORKED_AWAY: list[object] = []  # kept alive so that no finaliser closes them in a child


def _after_fork_in_child() -> None:
    for app in list(_APPS):
        app._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
