"""Django's tasks framework on lockgate: the framework found, a Django task's run on a
worker, and the ``TaskResult`` of a job. The backend that sends the jobs is
:mod:`lockgate.contrib.django_tasks` (documented path ``lockgate.django``).

Django 6 ships the framework as ``django.tasks``; Django 4.2-5.2 get it from the
``django-tasks`` backport (``django_tasks``), whose API is the same. The first found of
the two is used (Django 6's when both are installed), imported on first use, never by
``import lockgate``.

A Django task's job is a job of lockgate's runner task (``django.tasks.run:<queue>``, one
per Django queue), whose arguments are the Django task's module path, args and kwargs. On
the worker the runner imports the path's module, takes the attribute and runs it only if
it is a Django ``Task``: a job naming anything else fails, and is dead-lettered, before any
of it is called.

What a ``TaskResult`` needs that lockgate's own records do not keep (the task's path, its
arguments, the worker, the exception's class path) travels with the run's end: a
success returns an *envelope* (the kept result: those fields and the return value); a
failure re-raises the task's exception with a note (``NOTE``, one JSON line, the last of
its traceback) holding the same fields, so that the dead letter, the worker's log and
``get_result`` all show it. Pure apart from the framework's import and the task's run.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import socket
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec

from lockgate.core.codec import Job
from lockgate.core.context import JobContext, running_job
from lockgate.core.status import JobInfo, moment
from lockgate.errors import ConfigError, LockgateError, MissingExtra

FRAMEWORKS = ("django.tasks", "django_tasks")  # in order of preference
RUN_TASK = "django.tasks.run"  # the runner task of queue Q is named "django.tasks.run:Q"
NOTE = "lockgate.django: "  # how the note a failed run adds to its exception starts
UNKNOWN_WORKER = "unknown"  # a worker id lockgate does not know (an earlier attempt's)
NOTE_ARGS_MAX = 8192  # bytes of args and kwargs a failure's note carries at most
MIN_PRIORITY, MAX_PRIORITY = -100, 100  # Django's range
_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


@dataclass(frozen=True)
class Framework:
    """The parts of Django's tasks framework lockgate uses, from ``django.tasks`` or
    ``django_tasks`` (typed ``Any``: Django ships no type information)."""

    package: str
    task_class: Any
    result_class: Any
    status: Any
    error_class: Any
    context_class: Any
    base_backend: Any
    invalid_task: type[Exception]
    no_result: type[Exception]
    signals: Any
    normalize_json: Any


@functools.cache
def framework() -> Framework:
    """Django's tasks framework: ``django.tasks`` (Django 6), else ``django_tasks``.

    Raises:
        MissingExtra: neither is installed (nor Django).
    """
    for package in FRAMEWORKS:
        try:
            module = importlib.import_module(package)
        except ImportError as e:
            if e.name not in (package, "django"):  # it is there but broken: say so
                raise
            continue
        exceptions = importlib.import_module(f"{package}.exceptions")
        backends = importlib.import_module(f"{package}.backends.base")
        base = importlib.import_module(f"{package}.base")
        json = importlib.import_module(
            "django.utils.json" if package == "django.tasks" else f"{package}.utils"
        )
        return Framework(
            package=package,
            task_class=module.Task if hasattr(module, "Task") else base.Task,
            result_class=base.TaskResult,
            status=base.TaskResultStatus,
            error_class=base.TaskError,
            context_class=base.TaskContext,
            base_backend=backends.BaseTaskBackend,
            # Django 6 names it InvalidTask; the backport InvalidTaskError.
            invalid_task=getattr(exceptions, "InvalidTask", None) or exceptions.InvalidTaskError,
            no_result=exceptions.TaskResultDoesNotExist,
            signals=importlib.import_module(f"{package}.signals"),
            normalize_json=json.normalize_json,
        )
    raise MissingExtra(
        "lockgate.django",
        "django",
        "Django's tasks framework (django.tasks in Django 6, or the django-tasks backport)",
    )


def run_task_name(queue: str) -> str:
    """The name of the runner task of a Django queue."""
    return f"{RUN_TASK}:{queue}"


def is_run_task(name: str) -> bool:
    """Whether a task name is a runner task's."""
    return name.startswith(f"{RUN_TASK}:")


# Priorities


def default_priorities(levels: Sequence[str]) -> dict[str, int]:
    """Each level's lowest Django priority, by default: 50 and above to the first level,
    -50 and below to the last, the rest to the middle one (with two levels the middle is
    the second, with one every priority goes to it)."""
    middle = levels[len(levels) // 2]
    lowest = {levels[-1]: MIN_PRIORITY}
    lowest.setdefault(middle, -49)
    lowest.setdefault(levels[0], 50)
    return lowest


def check_priorities(option: object, levels: Sequence[str]) -> dict[str, int]:
    """``OPTIONS["PRIORITIES"]``: level name -> the lowest Django priority it takes.

    Raises:
        ConfigError: not a mapping, a level the App does not declare, a value that is no
            whole number in -100..100, or no level taking -100 (a priority would map to
            none).
    """
    if not isinstance(option, Mapping):
        raise ConfigError(
            "OPTIONS['PRIORITIES'] maps each lockgate level to the lowest Django priority "
            f"(-100..100) it takes, e.g. {default_priorities(levels)!r}; got {option!r}"
        )
    lowest: dict[str, int] = {}
    for level, value in option.items():
        if level not in levels:
            raise ConfigError(
                f"OPTIONS['PRIORITIES'] names level {level!r}; the App's levels: "
                f"{', '.join(levels)}"
            )
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"OPTIONS['PRIORITIES'][{level!r}] must be a whole number")
        if not MIN_PRIORITY <= value <= MAX_PRIORITY:
            raise ConfigError(f"OPTIONS['PRIORITIES'][{level!r}] must be in -100..100")
        lowest[level] = value
    if MIN_PRIORITY not in lowest.values():
        raise ConfigError("OPTIONS['PRIORITIES'] must give one level -100 (the lowest priority)")
    return lowest


def level_of(priority: int, lowest: Mapping[str, int]) -> str:
    """The level a Django priority maps to: the one whose lowest priority is the highest
    at or under it."""
    return max(
        ((floor, level) for level, floor in lowest.items() if floor <= priority),
        key=lambda pair: pair[0],
    )[1]


# The task behind a path


def find_task(path: str) -> Any:
    """The Django task at ``path`` (``module.function``): its module is imported, the
    attribute taken and its type checked; nothing else of it is called.

    Raises:
        ConfigError: ``path`` is not a dotted name, or names no Django ``Task``.
        ImportError: its module cannot be imported.
    """
    if not isinstance(path, str) or not _PATH.fullmatch(path):
        raise ConfigError(f"{path!r} is not the module path of a Django task")
    module, _, name = path.rpartition(".")
    found = getattr(importlib.import_module(module), name, None)
    task_class = framework().task_class
    if not isinstance(found, task_class):
        raise ConfigError(
            f"{path} is a {type(found).__name__}, not a Django @task ({task_class.__module__}."
            f"{task_class.__qualname__}): lockgate's workers run only those"
        )
    return found


def class_path(kind: type) -> str:
    """A class's dotted path, as Django's ``TaskError.exception_class_path`` has it."""
    return f"{kind.__module__}.{kind.__qualname__}"


def worker_id(job: JobContext) -> str:
    """The id of the worker running ``job``: its consumer name (host, pid and a token)."""
    if job.holder is not None:
        return job.holder.consumer
    return f"{socket.gethostname()}:{os.getpid()}"


def worker_ids(attempts: int, last: str | None) -> list[str]:
    """One id per attempt (``TaskResult.attempts`` counts them): lockgate knows only the
    last attempt's worker, when it knows one."""
    known = [last] if last is not None and attempts > 0 else []
    return [UNKNOWN_WORKER] * (attempts - len(known)) + known


# The run, on a worker


def run_django_task(path: str, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The runner task: run the Django task at ``path`` with ``args`` and ``kwargs``.

    Returns:
        The envelope kept as the job's result (see the module docstring).

    Raises:
        LockgateError: called outside a job run by a worker.
        ConfigError: ``path`` names no Django task (the job is dead-lettered).
        Exception: what the task raised, with the note of the module docstring.
    """
    job = running_job()
    if job is None:
        raise LockgateError("the runner of Django tasks runs only in a lockgate worker")
    fw = framework()
    db = importlib.import_module("django.db")
    worker, started = worker_id(job), time.time()
    record: dict[str, Any] = {
        "task": path, "args": args, "kwargs": kwargs, "worker": worker,
        "attempt": job.attempt, "enqueued": job.enqueued, "started": started,
    }  # fmt: skip
    result: Any = None
    db.close_old_connections()  # as Django does around a request: no stale connection
    try:
        task = find_task(path)
        result = fw.result_class(
            task=task, id=job.job_id, status=fw.status.RUNNING, args=args, kwargs=kwargs,
            enqueued_at=moment(job.enqueued), started_at=moment(started),
            last_attempted_at=moment(started), finished_at=None, backend=task.backend,
            errors=[], worker_ids=worker_ids(job.attempt, worker),
        )  # fmt: skip
        fw.signals.task_started.send(type(task.get_backend()), task_result=result)
        if task.takes_context:
            value = task.call(fw.context_class(task_result=result), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
        record["value"] = fw.normalize_json(value)
    except Exception as e:
        record["finished"] = time.time()
        record["exception"] = class_path(type(e))
        e.add_note(_note(record))
        if result is not None:
            _finished(result, record, fw.status.FAILED, e)
        raise
    finally:
        db.close_old_connections()
    record["finished"] = time.time()
    _finished(result, record, fw.status.SUCCESSFUL)
    return record


def _note(record: dict[str, Any]) -> str:
    """The note of a failed run: the record, without args and kwargs when they are large."""
    shown = record
    if len(msgspec.json.encode([record["args"], record["kwargs"]])) > NOTE_ARGS_MAX:
        shown = {**record, "args": None, "kwargs": None}
    return NOTE + msgspec.json.encode(shown).decode()


def _finished(
    result: Any, record: dict[str, Any], status: Any, error: Exception | None = None
) -> None:
    """Send Django's ``task_finished`` for a run that ended (receivers see it as a
    ``TaskResult``)."""
    fw = framework()
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", moment(record["finished"]))
    if error is not None:
        result.errors.append(
            fw.error_class(exception_class_path=record["exception"],
                           traceback="".join(traceback.format_exception(error)))
        )  # fmt: skip
    else:
        object.__setattr__(result, "_return_value", record["value"])
    fw.signals.task_finished.send(type(result.task.get_backend()), task_result=result)


# The TaskResult of a job


def task_result(info: JobInfo, job: Job | None, alias: str) -> Any:
    """The ``TaskResult`` of a Django task's job, from what lockgate knows of it.

    Args:
        info: the job's status, times, and kept result or error.
        job: the job itself while it waits or runs (its arguments), else None.
        alias: the backend's alias (``TaskResult.backend``).

    Raises:
        TaskResultDoesNotExist: the job is unknown (never enqueued, or its records
            expired), is no Django task's, or ended without a record of its task (it was
            cancelled, or its process died).
    """
    fw = framework()
    if info.status == "unknown":
        raise fw.no_result(
            f"job {info.id!r} is unknown: never enqueued, not yet committed, or its records expired"
        )
    if info.task and not is_run_task(info.task):
        raise fw.no_result(f"job {info.id!r} is a job of lockgate task {info.task!r}")
    if job is not None:  # waiting, delayed or running
        path, args, kwargs = job.args
        running = info.status == "running"
        return _result(
            fw, info.id, path, args, kwargs, alias,
            status=fw.status.RUNNING if running else fw.status.READY,
            enqueued_at=moment(job.enqueued),
            worker_ids=[UNKNOWN_WORKER] * info.attempts,
        )  # fmt: skip
    record = _record(info)
    if record is None:
        raise fw.no_result(
            f"job {info.id!r} ended {info.status} ({info.reason or 'no reason kept'}) "
            "without a record of its Django task"
        )
    errors = []
    if "exception" in record:
        error = info.error
        text = error.traceback if error is not None else ""
        lines = [line for line in text.splitlines(keepends=True) if not line.startswith(NOTE)]
        errors.append(
            fw.error_class(exception_class_path=record["exception"], traceback="".join(lines))
        )
    started = _moment(record.get("started"))
    result = _result(
        fw, info.id, record["task"], record.get("args") or [], record.get("kwargs") or {},
        alias, status=fw.status.FAILED if errors or info.status != "done"
        else fw.status.SUCCESSFUL,
        enqueued_at=_moment(record.get("enqueued")) or info.enqueued_at,
        started_at=started, last_attempted_at=started,
        finished_at=_moment(record.get("finished")) or info.finished_at, errors=errors,
        worker_ids=worker_ids(int(record.get("attempt", 1)), record.get("worker")),
    )  # fmt: skip
    if not errors:
        object.__setattr__(result, "_return_value", record.get("value"))
    return result


def _record(info: JobInfo) -> dict[str, Any] | None:
    """The envelope a run returned, or the note its exception carried; None: neither."""
    if isinstance(info.result, dict) and "task" in info.result:
        return info.result
    if info.error is None:
        return None
    for line in reversed(info.error.traceback.splitlines()):
        if line.startswith(NOTE):
            try:
                found = msgspec.json.decode(line[len(NOTE) :])
            except msgspec.DecodeError:
                return None
            return found if isinstance(found, dict) and "task" in found else None
    return None


def _moment(stamp: Any) -> datetime | None:
    return datetime.fromtimestamp(stamp, UTC) if isinstance(stamp, int | float) else None


def _result(fw: Framework, job_id: str, path: str, args: Any, kwargs: Any, alias: str,
            **fields: Any) -> Any:  # fmt: skip
    values: dict[str, Any] = {
        "enqueued_at": None, "started_at": None, "last_attempted_at": None,
        "finished_at": None, "errors": [], "worker_ids": [],
    }  # fmt: skip
    values.update(fields)
    return fw.result_class(
        task=find_task(path), id=job_id, args=args, kwargs=kwargs, backend=alias, **values
    )
