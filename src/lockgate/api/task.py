"""A task registered on an App, the job messages it builds, and the handle an enqueue
returns."""

from __future__ import annotations

import inspect
import os
import time
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar

from lockgate.api.using import ConfiguredTask
from lockgate.core import codec, tracing
from lockgate.core.arguments import Schema
from lockgate.core.codec import Job
from lockgate.core.config import Levels
from lockgate.core.fairness import key_function
from lockgate.core.logs import get_logger
from lockgate.core.message import Message, check_size
from lockgate.core.options import (
    CELERY_METHODS,
    EnqueueOptions,
    celery_hints,
    check_eta,
    option_named,
    start_delay,
)
from lockgate.core.status import CancelOutcome, JobInfo, Status, answer
from lockgate.core.tasks import TaskSettings
from lockgate.errors import ConfigError, InvalidArguments
from lockgate.integrations.atomic import sending_on_commit
from lockgate.integrations.outbox import enqueue_on_commit_async
from lockgate.integrations.transactions import OutboxWriter, enqueue_on_commit

P = ParamSpec("P")
Q = ParamSpec("Q")
R = TypeVar("R")
T = TypeVar("T")

log = get_logger(__name__)


class TaskHost(Protocol):
    """What a task and an enqueue's handle use of their App
    (:class:`lockgate.api.app.App`): its levels and payload limit, its enqueue, and the
    job handle's queries."""

    @property
    def levels(self) -> Levels: ...

    @property
    def max_payload_bytes(self) -> int: ...

    @property
    def queues(self) -> tuple[str, ...]: ...

    @property
    def namespace(self) -> str: ...

    @property
    def outbox(self) -> OutboxWriter | None: ...

    def enqueue_many(self, messages: Iterable[Message]) -> list[EnqueueResult]: ...

    async def enqueue_many_async(self, messages: Iterable[Message]) -> list[EnqueueResult]: ...

    def job(self, job_id: str) -> JobInfo: ...

    def cancel(self, job_id: str) -> CancelOutcome: ...

    def wait_result(self, job_id: str, task: str = "", timeout: float | None = None) -> Any: ...

    async def wait_result_async(
        self, job_id: str, task: str = "", timeout: float | None = None
    ) -> Any: ...


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """What an enqueue did, and a handle on the job.

    Attributes:
        job_id: the job's id (generated when the caller gave none).
        created: False when a job with this id was already queued or running (the
            handle then follows that job).
        task: the task's name.
    """

    job_id: str
    created: bool
    task: str = field(default="", compare=False)
    app: TaskHost | None = field(default=None, repr=False, compare=False)
    # An eager run's end (``App.eager``): the handle answers from it, in or out of the block.
    ran: JobInfo | None = field(default=None, repr=False, compare=False)

    def _owner(self) -> TaskHost:
        if self.app is None:
            raise ConfigError("this EnqueueResult was made by hand: it knows no App")
        return self.app

    def status(self) -> Status:
        """The job's status now: ``waiting``, ``delayed``, ``running``, ``done``,
        ``dead``, ``cancelled`` or ``unknown`` (see [App.job][lockgate.App.job])."""
        return self.info().status

    def info(self) -> JobInfo:
        """All that is known of the job (see [App.job][lockgate.App.job])."""
        return self.ran if self.ran is not None else self._owner().job(self.job_id)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the job to end and return what its task returned.

        Args:
            timeout: seconds to wait at most; None waits as long as it takes.

        Raises:
            JobFailed: it was dead-lettered (the error's type name, message, traceback).
            JobCancelled: it was cancelled, or expired unrun.
            TimeoutError: it did not end within ``timeout``.
            ConfigError: its task keeps no result (declare it with ``keep_result``).
            ResultUnavailable: the job is unknown, or its result expired.
        """
        if self.ran is not None:
            return answer(self.ran)
        return self._owner().wait_result(self.job_id, self.task, timeout)

    async def result_async(self, timeout: float | None = None) -> Any:
        """Async [result][lockgate.EnqueueResult.result]."""
        if self.ran is not None:
            return answer(self.ran)
        return await self._owner().wait_result_async(self.job_id, self.task, timeout)

    def cancel(self) -> CancelOutcome:
        """Cancel the job (see [App.cancel][lockgate.App.cancel]).

        Returns:
            What was done ([CancelOutcome][lockgate.CancelOutcome]): true when the job
            will not run or was told to stop.
        """
        return self._owner().cancel(self.job_id)


def _arguments_of(
    build: Callable[Q, Message],
) -> Callable[[Callable[..., T]], Callable[Q, T]]:
    """Type a method that sends what ``build`` makes as taking ``build``'s arguments (for
    type checkers; nothing changes at run time): they are declared once, on ``build``."""

    def sends(send: Callable[..., T]) -> Callable[Q, T]:
        return send

    return sends


class Task(Generic[P, R]):
    """A function registered on an App. Calling it runs it here; ``enqueue`` queues it."""

    def __init__(self, app: TaskHost, fn: Callable[P, R], settings: TaskSettings) -> None:
        """Declare ``fn`` a task of ``app`` (what [App.task][lockgate.App.task] does).

        Args:
            app: the App it is registered on.
            fn: the task function.
            settings: its options; the level and name it lacks are filled in.

        Raises:
            ConfigError: see [TaskSettings][lockgate.core.tasks.TaskSettings].
        """
        self.app = app
        self.fn = fn
        self.settings = settings = settings.declared(fn, app.levels)
        self.name = settings.task_name(fn)
        self.queue = settings.queue
        self.priority = settings.level(app.levels)
        self.retry = settings.retry
        self.idempotent = settings.idempotent
        self.idempotency_ttl = settings.idempotency_ttl_seconds
        self.expires = settings.expires_seconds
        self.rate_limit = settings.rate
        self.keep_result_ms = settings.keep_result_ms
        self.is_async = inspect.iscoroutinefunction(fn)
        self.signature = inspect.signature(fn)
        # Decided once here, so that enqueue and the worker only look values up.
        self.schema = Schema(self.name, fn, self.signature)
        self.key_of = key_function(self.name, settings.key_by, self.signature)
        self.key_concurrency = settings.key_concurrency
        self.key_rate = settings.key_rate
        self.debounce = settings.debounce_ms
        if shadowed := option_named(self.signature.parameters.values()):
            log.warning(
                "task %r has parameters named like enqueue options (%s): a plain "
                "%s.enqueue(...) takes those keywords for itself; pass them to the task "
                "through %s.using(...).enqueue(...), whose keywords are all the task's",
                self.name, ", ".join(shadowed), fn.__name__, fn.__name__,
            )  # fmt: skip

    @cached_property
    def returns(self) -> Any:
        """The type a kept result decodes to: the return annotation, else ``Any``."""
        try:
            hints = typing.get_type_hints(self.fn)
        except Exception:  # an annotation that does not resolve here: take it as it is
            return Any
        return hints.get("return", Any)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue} priority={self.priority}>"

    def check_arguments(self, args: Iterable[Any], kwargs: Mapping[str, Any]) -> None:
        """Check that arguments bind to the task's signature (not their values' types).

        Raises:
            InvalidArguments: they do not.
        """
        self.schema.bind(args if isinstance(args, Sequence) else tuple(args), kwargs)

    def prepare(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """Turn a decoded job's arguments into the ones the task is called with.

        Binds them to the signature and converts each value to its parameter's type
        annotation (``"2024-01-31"`` to a ``date`` for ``d: date``; for ``*args`` and
        ``**kwargs`` the annotation of each item), leniently, so producers in other
        languages may send the JSON form. Unannotated parameters are passed as they are.

        Args:
            args: the job's positional arguments, as decoded.
            kwargs: the job's keyword arguments, as decoded.

        Returns:
            (args, kwargs) to call the task function with.

        Raises:
            InvalidArguments: they do not bind, or a value cannot be converted (the
                worker dead-letters the job with reason "wrong arguments").
        """
        return self.schema.prepare(args, kwargs)

    def message(
        self,
        *args: Any,
        job_id: str | None = None,
        priority: str | None = None,
        delay: float | timedelta | None = None,
        eta: datetime | None = None,
        **kwargs: Any,
    ) -> Message:
        """Build a job without sending it (for [App.enqueue_many][lockgate.App.enqueue_many]).

        Args:
            job_id: stable id; a job with the same id already queued, delayed or running
                makes the enqueue a no-op. Defaults to a random id.
            priority: overrides the task's level for this job.
            delay: seconds (or a timedelta) before the job may run.
            eta: when the job may run: a timezone-aware datetime
                (``datetime.now(UTC) + timedelta(minutes=5)``).

        A task parameter named like one of these options (or ``queue``) gets its
        argument through [using][lockgate.Task.using]: ``task.using().message(...)``.

        Raises:
            InvalidArguments: the arguments do not bind to the task, or a value does not
                fit its parameter's annotation (``"5"`` for an ``int``, a string for a
                ``date``). A keyword another job library uses (Celery's ``countdown=``,
                ``queue=``, ...) that binds to no parameter gets a hint naming lockgate's
                own.
            SerializationError: a value would not arrive as it is: it has no JSON form,
                nests deeper than ``codec.MAX_DEPTH``, or its JSON form would come back as
                another value or type (a ``date`` for an unannotated parameter, NaN, a
                tuple where no annotation asks for one). See `lockgate.core.arguments`.
            ConfigError: unknown priority, both delay and eta, an ``eta`` without a time
                zone, a start past the task's ``expires``, or no ``job_id`` for a
                debounced task.
        """
        return self.build(args, kwargs, job_id, priority, delay, eta)

    def using(
        self,
        *,
        job_id: str | None = None,
        priority: str | None = None,
        delay: float | timedelta | None = None,
        eta: datetime | None = None,
        queue: str | None = None,
    ) -> ConfiguredTask[P, EnqueueResult]:
        """This task with enqueue options set: the object's ``enqueue``,
        ``enqueue_async``, ``message`` and ``enqueue_on_commit`` take the task's own
        arguments only, whatever their names (the name follows Django's ``Task.using``).

        ``notify.using(priority="critical").enqueue("u", priority="high", delay=3)``
        queues ``notify("u", priority="high", delay=3)`` at the ``critical`` level.

        Args:
            job_id: the job's id (see [message][lockgate.Task.message]).
            priority: its level; None: the task's.
            delay: seconds (or a timedelta) before it may run.
            eta: when it may run: a timezone-aware datetime.
            queue: the queue it goes to instead of the task's: one of ``app.queues`` (the
                queues its tasks are declared on), so that a worker serving it knows
                the task.

        Returns:
            A [ConfiguredTask][lockgate.api.using.ConfiguredTask].

        Raises:
            ConfigError: a queue not in ``app.queues``, an unknown priority, both delay
                and eta, or an ``eta`` that is no timezone-aware datetime.
        """
        options = EnqueueOptions(job_id, priority, delay, eta, queue)
        self._check_options(options)
        return ConfiguredTask[P, EnqueueResult](self, options)

    def _check_options(self, options: EnqueueOptions) -> None:
        if options.queue is not None:
            self._check_queue(options.queue)
        if options.priority is not None:
            self.app.levels.index(options.priority)
        if options.delay is not None and options.eta is not None:
            raise ConfigError("give delay or eta, not both")
        if options.eta is not None:
            check_eta(options.eta)

    def _check_queue(self, queue: str) -> None:
        if queue not in self.app.queues:
            raise ConfigError(
                f"queue {queue!r} is not one of this app's queues "
                f"({', '.join(self.app.queues)}): a job goes to a queue some task is "
                "declared on, which the workers serving it know"
            )

    def build(
        self,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        job_id: str | None = None,
        priority: str | None = None,
        delay: float | timedelta | None = None,
        eta: datetime | None = None,
        queue: str | None = None,
    ) -> Message:
        """The job ``message`` and ``using(...).message`` build: the task's arguments
        with the options of [using][lockgate.Task.using], as separate arguments (no
        tuple to make on the enqueue path); see [message][lockgate.Task.message] for what
        it raises."""
        if job_id is None and self.debounce is not None:
            raise ConfigError(
                f"task {self.name!r} is debounced: an enqueue needs the job_id that later "
                "enqueues of the same job will repeat"
            )
        try:
            self.schema.check(args, kwargs)
        except InvalidArguments as e:
            if hints := celery_hints(kwargs, self.signature):
                raise InvalidArguments(f"{e} ({'; '.join(hints)})") from None
            raise
        level = priority or self.priority
        self.app.levels.index(level)
        if queue is not None:
            self._check_queue(queue)
        job = Job(
            id=codec.check_job_id(job_id) if job_id is not None else os.urandom(16).hex(),
            task=self.name,
            queue=queue or self.queue,
            level=level,
            args=list(args),
            kwargs=kwargs,
            enqueued=time.time(),
            key=self.key_of(args, kwargs) if self.key_of is not None else None,
            secret=self.settings.secret_args,
        )
        wait = start_delay(delay, eta, job.enqueued)
        if self.expires is not None and wait >= self.expires:
            raise ConfigError(
                f"task {self.name!r} expires {self.expires:g} s after enqueue, but this job "
                f"would start {wait:g} s after it: it would be dropped unrun"
            )
        return Message(job, wait, named=job_id is not None)

    @_arguments_of(message)
    def enqueue(self, *args: Any, **kwargs: Any) -> EnqueueResult:
        """Queue a run of this task (sync; for Django, Flask and scripts).

        Takes the arguments of [message][lockgate.Task.message]: the task's arguments,
        and ``job_id``, ``priority``, ``delay`` or ``eta``; for another queue, or a task
        parameter named like one of those, see [using][lockgate.Task.using].

        Returns:
            The job's id, and whether it was created (False for a duplicate id).

        Raises:
            InvalidArguments: the arguments do not fit the task.
            ConfigError: unknown priority, both delay and eta, or an ``eta`` without a
                time zone.
            SerializationError: an argument would not arrive as it is.
            OutcomeUnknown: no reply came once the job was sent: it may have been
                queued; enqueue again with ``job_id=error.job_ids[0]`` to be sure.
            ConnectionFailed: Redis cannot be reached (nothing was sent).
        """
        return self.send(self.message(*args, **kwargs))

    @_arguments_of(message)
    async def enqueue_async(self, *args: Any, **kwargs: Any) -> EnqueueResult:
        """The async form of [enqueue][lockgate.Task.enqueue]: the same arguments, result
        and errors."""
        return await self.send_async(self.message(*args, **kwargs))

    def send(self, message: Message) -> EnqueueResult:
        """Queue a job this task built (what ``enqueue`` does with its
        [message][lockgate.Task.message])."""
        return self.app.enqueue_many([message])[0]

    async def send_async(self, message: Message) -> EnqueueResult:
        """Async :meth:`send`."""
        return (await self.app.enqueue_many_async([message]))[0]

    def enqueue_on_commit(
        self,
        conn: Any,
        *args: Any,
        job_id: str | None = None,
        priority: str | None = None,
        delay: float | timedelta | None = None,
        eta: datetime | None = None,
        **kwargs: Any,
    ) -> str:
        """Queue a run of this task once the transaction ``conn`` is in commits.

        A rollback leaves no job behind. Outside a transaction the job is queued at once.
        The job is built now, so bad arguments raise here; a send that fails after the
        commit is logged and retried in the background, never raised (see
        `lockgate.transactions`, which also lists the known limits).

        Args:
            conn: a Django connection (``django.db.connection``): the job is queued by
                ``transaction.on_commit``, right after the commit. Or a psycopg 3
                connection: PostgreSQL is asked for the transaction's outcome, and the job
                is queued a few milliseconds after the commit. With ``App(outbox=DSN)``,
                either one to PostgreSQL: the job is written into the outbox in the
                transaction, and a worker relays it (`lockgate.integrations.outbox`).
            *args: the task's arguments, then the options of
                [message][lockgate.Task.message].

        Returns:
            The job's id (generated when ``job_id`` is None).

        Raises:
            InvalidArguments: the arguments do not fit the task.
            ConfigError: unknown priority, both delay and eta, or ``conn`` is neither a
                psycopg 3 connection nor a Django one.
            SerializationError: an argument would not arrive as it is, or the job is
                over ``max_payload_bytes``.
            MissingExtra: ``conn`` is not a Django connection and psycopg is missing.
            DatabaseError: psycopg: the transaction's id could not be read.
            ConnectionFailed: queued at once (no transaction) and Redis cannot be reached.
        """
        message = self.message(
            *args, job_id=job_id, priority=priority, delay=delay, eta=eta, **kwargs
        )
        return self.send_on_commit(conn, message)

    async def enqueue_on_commit_async(self, conn: Any, *args: Any, **kwargs: Any) -> str:
        """[enqueue_on_commit][lockgate.Task.enqueue_on_commit] that also takes a psycopg 3
        ``AsyncConnection``, given ``App(outbox=DSN)``: the job is written into the outbox
        in the connection's current transaction (see `lockgate.integrations.outbox`).
        Other connections are handled as ``enqueue_on_commit`` does. The same arguments,
        result and errors; also:

        Raises:
            ConfigError: an ``AsyncConnection``, and the App has no outbox.
        """
        return await self.send_on_commit_async(conn, self.message(*args, **kwargs))

    def send_on_commit(self, conn: Any, message: Message) -> str:
        """Queue a job this task built once the transaction ``conn`` is in commits (what
        [enqueue_on_commit][lockgate.Task.enqueue_on_commit] does with its message).

        Returns:
            The job's id.
        """
        # Traced, the producer span is this call (the job carries it to the later send);
        # a send at once (no transaction) is not warned about.
        with tracing.sending([message]) as (traced,), sending_on_commit():
            enqueue_on_commit(self.app, conn, self._sized(traced))
        return message.job.id

    async def send_on_commit_async(self, conn: Any, message: Message) -> str:
        """Async :meth:`send_on_commit` (see
        [enqueue_on_commit_async][lockgate.Task.enqueue_on_commit_async])."""
        with tracing.sending([message]) as (traced,), sending_on_commit():
            await enqueue_on_commit_async(self.app, conn, self._sized(traced))
        return message.job.id

    def _sized(self, message: Message) -> Message:
        """``message``, encoded and size-checked now rather than after the commit."""
        check_size(message, codec.encode(message.job), self.app.max_payload_bytes)
        return message

    if not TYPE_CHECKING:  # for type checkers, a Task has no such attributes

        def __getattr__(self, name: str) -> Any:
            # Only looked up when an attribute is missing: Celery's sending methods get
            # lockgate's name for them (the others, a plain AttributeError).
            if name in CELERY_METHODS:
                raise AttributeError(
                    f"a lockgate Task has no {name!r} (Celery's): use {CELERY_METHODS[name]}"
                )
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
