"""A backend of Django's tasks framework that runs ``@task`` functions on lockgate workers.

Documented as ``lockgate.django`` (see docs/django.md)::

    TASKS = {"default": {"BACKEND": "lockgate.django.LockgateBackend",
                         "OPTIONS": {"APP": "mysite.jobs:app"}}}

It is a module of ``contrib/``, the top layer (docs/architecture.md), because it needs the
whole App: it registers the runner tasks on it, builds their jobs and reads their
statuses through it and its store. What needs no App (finding the framework, running a
task on a worker, making a ``TaskResult``) is :mod:`lockgate.integrations.django_tasks`,
below ``api``; only the thin ``lockgate.django`` imports this module.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from lockgate.api.app import App
from lockgate.api.task import Task
from lockgate.core import codec
from lockgate.core.config import check_name
from lockgate.core.status import job_info
from lockgate.errors import ConfigError, SerializationError
from lockgate.integrations.django_tasks import (
    check_priorities,
    default_priorities,
    framework,
    level_of,
    run_django_task,
    run_task_name,
    task_result,
)

OPTIONS = ("APP", "PRIORITIES", "OUTBOX", "RESULT_TTL")
DEFAULT_RESULT_TTL = timedelta(days=1)
BACKEND_PATHS = ("lockgate.django.LockgateBackend", "lockgate.contrib.django_tasks.LockgateBackend")


def setup_django() -> None:
    """A worker's startup hook: ``django.setup()`` unless Django is set up already (a
    worker process is not started by ``manage.py``)."""
    django = importlib.import_module("django")
    apps = importlib.import_module("django.apps").apps
    if not apps.ready:
        django.setup()


def register(
    app: App,
    queues: Iterable[str] | None = None,
    result_ttl: float | timedelta | None = None,
) -> list[Task[Any, Any]]:
    """Register the runner of Django tasks on ``app``, once per Django queue: call it in the
    module that makes the App the workers run (the backend calls it in the web process).

    Registering again is a no-op for the queues already registered. The first call also
    adds a startup hook that sets Django up in each worker.

    Args:
        app: the App of ``OPTIONS["APP"]``.
        queues: Django queue names, each also a lockgate queue; None: those of every
            ``TASKS`` entry with this backend (Django's settings are read then, and
            ``["default"]`` stands for an entry without ``QUEUES``).
        result_ttl: how long each job's result (or error) is kept for ``get_result``;
            None: the largest ``OPTIONS["RESULT_TTL"]`` of those entries, else a day.

    Returns:
        The runner tasks, one per queue.

    Raises:
        ConfigError: a bad queue name, or a task of another function holds a runner's name.
    """
    entries = _entries() if queues is None or result_ttl is None else []
    if queues is None:
        queues = [q for entry in entries for q in entry.get("QUEUES") or ["default"]] or ["default"]
    if result_ttl is None:
        ttls = [e.get("OPTIONS", {}).get("RESULT_TTL") for e in entries]
        result_ttl = max((t for t in ttls if t is not None), default=DEFAULT_RESULT_TTL)
    if not any(hook is setup_django for hook in app.hooks.startup):
        app.on_startup(setup_django)
    runners = []
    for queue in dict.fromkeys(queues):
        name = run_task_name(check_name(queue, "queue"))
        found = app.tasks.get(name)
        if found is None:
            # No retries: Django's framework has none; a task that raises ends FAILED.
            found = app.task(name=name, queue=queue, retries=0, keep_result=result_ttl)(
                run_django_task
            )
        elif found.fn is not run_django_task:
            raise ConfigError(f"task {name!r} of the App is not lockgate's runner of Django tasks")
        runners.append(found)
    return runners


def _entries() -> list[Mapping[str, Any]]:
    settings = importlib.import_module("django.conf").settings
    tasks = getattr(settings, "TASKS", None) or {}
    return [entry for entry in tasks.values() if entry.get("BACKEND") in BACKEND_PATHS]


def load_app(spec: object) -> App:
    """The App that ``OPTIONS["APP"]`` names (``"module:attribute"``).

    Raises:
        ConfigError: not of that form, or it names no App.
    """
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise ConfigError(
            f"OPTIONS['APP'] names the lockgate App as 'module:attribute', got {spec!r}"
        )
    module, _, name = spec.partition(":")
    found = getattr(importlib.import_module(module), name, None)
    if not isinstance(found, App):
        raise ConfigError(f"OPTIONS['APP'] {spec!r} is a {type(found).__name__}, not an App")
    return found


class LockgateBackend(framework().base_backend):  # type: ignore[misc]  # Django is untyped
    """Django's tasks on lockgate workers: ``TASKS = {"default": {"BACKEND":
    "lockgate.django.LockgateBackend", "OPTIONS": {"APP": "module:app"}}}``.

    Options: ``APP`` (required: the App), ``PRIORITIES`` (level -> lowest Django priority
    it takes), ``OUTBOX`` (``enqueue()`` inside ``transaction.atomic()`` goes through
    ``enqueue_on_commit``; default True), ``RESULT_TTL`` (seconds each result is kept; a
    day). ``QUEUES`` (default ``["default"]``) are lockgate queues of the same names.

    Raises:
        ConfigError: an unknown option, no ``APP``, or a bad ``PRIORITIES`` or queue.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options = dict(self.options)
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ConfigError(
                f"TASKS[{alias!r}]['OPTIONS'] has {', '.join(map(repr, unknown))}; "
                f"lockgate's backend takes {', '.join(OPTIONS)}"
            )
        if "APP" not in options:
            raise ConfigError(f"TASKS[{alias!r}]['OPTIONS'] needs 'APP': 'module:app'")
        self.app = load_app(options["APP"])
        names = self.app.levels.names
        given = options.get("PRIORITIES")
        self.priorities = (
            default_priorities(names) if given is None else check_priorities(given, names)
        )
        self.outbox = bool(options.get("OUTBOX", True))
        ttl = options.get("RESULT_TTL", DEFAULT_RESULT_TTL)
        runners = register(self.app, sorted(self.queues) or ["default"], ttl)
        self.runners = {runner.queue: runner for runner in runners}

    def validate_task(self, task: Any) -> None:
        """Django's checks, and that the task's queue has a runner here.

        Raises:
            InvalidTask: (``InvalidTaskError`` with the backport) the task does not fit.
        """
        super().validate_task(task)
        if task.queue_name not in self.runners:
            raise framework().invalid_task(
                f"queue {task.queue_name!r} is not a queue of backend {self.alias!r}: list it "
                f"in TASKS[{self.alias!r}]['QUEUES'] (lockgate queues of the App: "
                f"{', '.join(self.app.queues)})"
            )

    def level(self, priority: int) -> str:
        """The lockgate level of a Django priority (``OPTIONS["PRIORITIES"]``)."""
        return level_of(priority, self.priorities)

    def _job(
        self, task: Any, args: Any, kwargs: Any
    ) -> tuple[Task[Any, Any], list[Any], dict[str, Any]]:
        """The runner of ``task``'s queue, and the runner's arguments and options."""
        self.validate_task(task)
        # Django's own JSON check (tuples made lists, a bad type a TypeError), as its
        # TaskResult makes them.
        normalize = framework().normalize_json
        arguments = [task.module_path, normalize(list(args)), normalize(dict(kwargs))]
        eta = task.run_after
        if eta is not None and eta.tzinfo is None:  # Django's local time (USE_TZ off)
            eta = importlib.import_module("django.utils.timezone").make_aware(eta)
        options = {"priority": self.level(task.priority), "eta": eta}
        return self.runners[task.queue_name], arguments, options

    def _ready(self, task: Any, job_id: str, arguments: list[Any]) -> Any:
        fw = framework()
        result = fw.result_class(
            task=task, id=job_id, status=fw.status.READY, enqueued_at=_now(),
            started_at=None, last_attempted_at=None, finished_at=None, args=arguments[1],
            kwargs=arguments[2], backend=self.alias, errors=[], worker_ids=[],
        )  # fmt: skip
        fw.signals.task_enqueued.send(type(self), task_result=result)
        return result

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Queue a run of ``task``: in a ``transaction.atomic()`` block (and ``OUTBOX``),
        through ``enqueue_on_commit`` on that connection; else at once.

        Returns:
            Its ``TaskResult`` (READY), whose id is the lockgate job's.

        Raises:
            InvalidTask: see :meth:`validate_task`.
            TypeError: an argument has no JSON form (Django's check).
            LockgateError: what [Task.enqueue][lockgate.Task.enqueue] raises.
        """
        runner, arguments, options = self._job(task, args, kwargs)
        connection = self._atomic_connection()
        if connection is None:
            job_id = runner.enqueue(*arguments, **options).job_id
        else:
            job_id = runner.enqueue_on_commit(connection, *arguments, **options)
        return self._ready(task, job_id, arguments)

    async def aenqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """The async :meth:`enqueue` (never in a transaction: Django's are sync-only)."""
        runner, arguments, options = self._job(task, args, kwargs)
        handle = await runner.enqueue_async(*arguments, **options)
        return self._ready(task, handle.job_id, arguments)

    def _atomic_connection(self) -> Any:
        """The default database's connection when an atomic block is open on it (and
        ``OUTBOX``), else None."""
        if not self.outbox:
            return None
        connection = importlib.import_module("django.db").connection
        return connection if connection.in_atomic_block else None

    def get_result(self, result_id: str) -> Any:
        """The ``TaskResult`` of job ``result_id``.

        Raises:
            TaskResultDoesNotExist: see :func:`lockgate.integrations.django_tasks.task_result`.
            ConnectionFailed: Redis cannot be reached.
        """
        reply = self.app.store.jobs.status(result_id)
        return task_result(*_read(result_id, reply), self.alias)

    async def aget_result(self, result_id: str) -> Any:
        """The async :meth:`get_result`."""
        reply = await self.app.store.jobs.status_async(result_id)
        return task_result(*_read(result_id, reply), self.alias)


def _read(job_id: str, reply: list[Any]) -> tuple[Any, codec.Job | None]:
    """A status reply as the job's info, and the job itself while it waits or runs."""
    info = job_info(job_id, reply, lambda _: Any)
    job = None
    if info.status in ("waiting", "delayed", "running") and reply[1]:
        try:
            job = codec.decode(reply[1])
        except SerializationError:
            job = None
    return info, job


def _now() -> datetime:
    return datetime.now(UTC)
