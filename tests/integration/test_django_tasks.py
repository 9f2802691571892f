"""Django's tasks framework on lockgate (``lockgate.django.LockgateBackend``), end to end:
the test project's ``@task`` functions (tests/django_tasks_project) enqueued through Django
and run by a real worker on real Redis, with PostgreSQL for the transactions.

The same file runs in two tiers: the ``django-tasks`` backport on Django 5.2 (the main
environment) and Django 6's ``django.tasks`` (``make test-django6``, Python 3.12): the
project imports whichever is there, as the backend does (Django 6's first).

Django is set up once for the module: from the project's settings when nothing set it up
yet, and in any case with the project's ``TASKS`` (``override_settings``), so that the
example project's tests (test_django_example.py) may run before or after this module.
Django's database calls are sync-only, so most tests are sync and run the worker with
``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import django
import pytest
from django.conf import settings
from django.db import connection, connections, transaction
from django.test import override_settings

from conftest import WAIT_TIMEOUT, delete_namespace, running, wait_until, worker_for
from lockgate import App, ConfigError
from lockgate.integrations import django_tasks as integration
from lockgate.integrations.outbox import COUNT_SQL
from lockgate.integrations.postgres import init_schema
from lockgate.integrations.transactions import drain

FRAMEWORK = integration.framework()
TESTS = Path(__file__).resolve().parents[1]  # where django_tasks_project is
PROJECT_TASKS = {
    "default": {
        "BACKEND": "lockgate.django.LockgateBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"APP": "django_tasks_project.jobs:app"},
    },
    "direct": {
        "BACKEND": "lockgate.django.LockgateBackend",
        "OPTIONS": {"APP": "django_tasks_project.jobs:app", "OUTBOX": False},
    },
}


@pytest.fixture(scope="module")
def project(redis_url: str) -> Iterator[Any]:
    """The project's tasks module, its App on the session's Redis and a namespace of this
    module's own (deleted at the end)."""
    namespace = uuid.uuid4().hex
    set_up_here = not settings.configured
    with pytest.MonkeyPatch.context() as env:
        env.setenv("LOCKGATE_TEST_NAMESPACE", namespace)
        env.setenv("LOCKGATE_REDIS_URL", redis_url)
        if set_up_here:
            env.setenv("DJANGO_SETTINGS_MODULE", "django_tasks_project.settings")
            django.setup()
        with override_settings(TASKS=PROJECT_TASKS):
            # Afresh: pytest-xdist may run this module's tests in two stretches of one
            # process, setting this fixture up twice.
            for name in ("django_tasks_project.tasks", "django_tasks_project.jobs"):
                sys.modules.pop(name, None)
            tasks = importlib.import_module("django_tasks_project.tasks")
            from django_tasks_project.jobs import app, outboxed

            assert app.namespace == namespace, "the project was imported before this module"
            yield tasks
            for each in (app, outboxed):
                each.close()
                delete_namespace(redis_url, each.namespace)
            connections.close_all()
    if set_up_here:  # the example's tests set Django up from their own settings
        from django.utils.functional import empty

        settings._wrapped = empty


@pytest.fixture
def app(project: Any) -> App:
    from django_tasks_project.jobs import app

    return app


def run_worker(app: App, **config: Any) -> str:
    """Run a real worker until nothing is queued, delayed or running; its name."""
    worker = worker_for(app, **config)
    asyncio.run(asyncio.wait_for(worker.run(burst=True), WAIT_TIMEOUT))
    return worker.name


def backend(alias: str = "default") -> Any:
    return importlib.import_module(FRAMEWORK.package).task_backends[alias]


def test_the_backend_says_what_it_supports(project: Any) -> None:
    # Django 6's own framework when it has one (the backport is installed in both tiers).
    assert FRAMEWORK.package == ("django.tasks" if django.VERSION >= (6,) else "django_tasks")
    default = backend()
    assert type(default).__module__ == "lockgate.contrib.django_tasks"
    assert default.supports_defer
    assert default.supports_priority
    assert default.supports_get_result
    assert default.supports_async_task


def test_a_sync_task_runs_on_a_worker_and_its_result_is_complete(project: Any, app: App) -> None:
    before = datetime.now(UTC)
    result = project.add.enqueue(2, 3)
    assert result.status == FRAMEWORK.status.READY
    assert app.job(result.id).status == "waiting"  # the TaskResult's id is the job's
    assert project.add.get_result(result.id).status == FRAMEWORK.status.READY
    worker = run_worker(app)
    result.refresh()
    assert result.status == FRAMEWORK.status.SUCCESSFUL
    assert result.return_value == 5
    assert (result.args, result.kwargs) == ([2, 3], {})
    assert result.worker_ids == [worker]
    assert result.attempts == 1
    assert result.errors == []
    assert before <= result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at
    fetched = project.add.get_result(result.id)
    assert fetched.task.func is project.add.func
    assert fetched.backend == "default"


async def test_an_async_task_enqueued_with_aenqueue(project: Any, app: App) -> None:
    result = await project.greet.aenqueue(name="ada")
    assert (await project.greet.aget_result(result.id)).status == FRAMEWORK.status.READY
    worker = worker_for(app)
    await asyncio.wait_for(worker.run(burst=True), WAIT_TIMEOUT)
    await result.arefresh()
    assert result.status == FRAMEWORK.status.SUCCESSFUL
    assert result.return_value == "hello ada"
    assert result.kwargs == {"name": "ada"}
    assert result.worker_ids == [worker.name]


def test_an_exception_is_kept_with_its_class_path_and_traceback(project: Any, app: App) -> None:
    result = project.fail.enqueue("out of paper")
    worker = run_worker(app)
    fetched = project.fail.get_result(result.id)
    assert fetched.status == FRAMEWORK.status.FAILED
    assert [e.exception_class_path for e in fetched.errors] == ["django_tasks_project.tasks.Boom"]
    assert fetched.errors[0].exception_class is project.Boom
    traceback = fetched.errors[0].traceback
    assert "raise Boom(message)" in traceback
    assert traceback.rstrip().endswith("Boom: out of paper")  # the note is not in it
    assert fetched.args == ["out of paper"]
    assert fetched.worker_ids == [worker]
    assert fetched.finished_at >= fetched.started_at
    with pytest.raises(ValueError, match="failed"):
        fetched.return_value  # noqa: B018
    info = app.job(result.id)  # and lockgate's side: dead-lettered, not retried
    assert (info.status, info.attempts, info.error.type) == ("dead", 1, "Boom")


def test_takes_context_gets_the_attempt_and_the_task_result(project: Any, app: App) -> None:
    result = project.introspect.enqueue("ctx")
    worker = run_worker(app)
    seen = project.introspect.get_result(result.id).return_value
    assert seen == {
        "tag": "ctx", "attempt": 1, "id": result.id, "status": "RUNNING",
        "worker_ids": [worker],
    }  # fmt: skip


def test_priorities_map_onto_levels_and_order_the_runs(project: Any, app: App) -> None:
    default = backend()
    first, middle, last = app.levels.names[0], app.default_priority, app.levels.names[-1]
    assert [default.level(p) for p in (100, 50, 49, 0, -49, -50, -100)] == [
        first, first, middle, middle, middle, last, last
    ]  # fmt: skip
    low = [project.eventually.enqueue(n) for n in range(3)]
    normal = project.add.enqueue(1, 1)
    high = project.urgent.enqueue(7)
    assert [job_level(app, r.id) for r in (low[0], normal, high)] == [last, middle, first]
    run_worker(app, concurrency=1, policy="strict")
    started = {r.id: project.add.get_backend().get_result(r.id).started_at
               for r in [*low, normal, high]}  # fmt: skip
    order = sorted(started, key=started.__getitem__)
    assert order[0] == high.id
    assert order[1] == normal.id
    # using() changes a task's priority as it does its level.
    moved = project.eventually.using(priority=90).enqueue(0)
    assert job_level(app, moved.id) == first
    run_worker(app)


def job_level(app: App, job_id: str) -> str:
    """The level of a waiting job, read from its stored payload."""
    from lockgate.core import codec

    return codec.decode(app.store.jobs.status(job_id)[1]).level


def test_priorities_option_overrides_the_mapping(project: Any, app: App) -> None:
    levels = app.levels.names
    tasks = {
        "custom": {
            "BACKEND": "lockgate.django.LockgateBackend",
            "OPTIONS": {"APP": "django_tasks_project.jobs:app",
                        "PRIORITIES": {levels[0]: 90, levels[-1]: -100}},
        }
    }  # fmt: skip
    with override_settings(TASKS={**PROJECT_TASKS, **tasks}):
        custom = backend("custom")
        assert [custom.level(p) for p in (100, 90, 89, -100)] == [
            levels[0], levels[0], levels[-1], levels[-1]
        ]  # fmt: skip
        bad = {"bad": {**tasks["custom"], "OPTIONS": {
            "APP": "django_tasks_project.jobs:app", "PRIORITIES": {"nope": -100}}}}  # fmt: skip
    with override_settings(TASKS={**PROJECT_TASKS, **bad}):
        with pytest.raises(ConfigError, match="PRIORITIES'\\] names level 'nope'"):
            backend("bad")


def test_run_after_defers_the_job(project: Any, app: App) -> None:
    run_after = datetime.now(UTC) + timedelta(seconds=1)
    result = project.add.using(run_after=run_after).enqueue(4, 4)
    assert app.job(result.id).status == "delayed"
    assert project.add.get_result(result.id).status == FRAMEWORK.status.READY
    run_worker(app)  # a burst worker waits for delayed jobs too
    done = project.add.get_result(result.id)
    assert done.return_value == 8
    assert done.started_at >= run_after


def test_django_queues_are_lockgate_queues(project: Any, app: App) -> None:
    assert {"default", "emails"} <= set(app.queues)
    result = project.send.enqueue("ada@example.org")
    from lockgate.core import codec

    assert codec.decode(app.store.jobs.status(result.id)[1]).queue == "emails"
    run_worker(app)
    assert project.send.get_result(result.id).return_value == "sent to ada@example.org"
    with pytest.raises(FRAMEWORK.invalid_task, match="Queue 'nowhere' is not valid"):
        project.add.using(queue_name="nowhere")


def test_a_queue_no_runner_serves_is_refused_at_validation(project: Any, app: App) -> None:
    """A backend without QUEUES takes any queue name in Django: lockgate's refuses one it
    has no runner for, naming the queues it has."""
    tasks = {"open": {"BACKEND": "lockgate.django.LockgateBackend", "QUEUES": [],
                      "OPTIONS": {"APP": "django_tasks_project.jobs:app"}}}  # fmt: skip
    with override_settings(TASKS={**PROJECT_TASKS, **tasks}):
        with pytest.raises(FRAMEWORK.invalid_task, match="queue 'elsewhere' is not a queue"):
            project.add.using(backend="open", queue_name="elsewhere")


def test_a_job_naming_something_else_than_a_task_is_dead_lettered_unrun(
    project: Any, app: App
) -> None:
    runner = app.tasks[integration.run_task_name("default")]
    plain = runner.enqueue("django_tasks_project.tasks.plain", [], {})
    module = runner.enqueue("django_tasks_project.tasks", [], {})
    missing = runner.enqueue("django_tasks_project.tasks.nothing_here", [], {})
    run_worker(app)
    assert project.CALLED == []
    for handle, what in ((plain, "function"), (module, "module"), (missing, "NoneType")):
        info = app.job(handle.job_id)
        assert (info.status, info.error.type) == ("dead", "ConfigError")
        assert f"is a {what}, not a Django @task" in info.error.message
        assert "lockgate's workers run only those" in info.error.message


def test_a_worker_process_started_from_the_command_line(project: Any, app: App) -> None:
    """``lockgate worker django_tasks_project.jobs:app`` with only DJANGO_SETTINGS_MODULE:
    the App module registers the runners, the startup hook sets Django up."""
    results = [project.add.enqueue(20, 22), project.django_ready.enqueue()]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "django_tasks_project.settings",
           "PYTHONPATH": str(TESTS)}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "lockgate", "worker", "django_tasks_project.jobs:app", "--burst"],
        env=env, capture_output=True, text=True, timeout=WAIT_TIMEOUT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [r.task.get_result(r.id).return_value for r in results] == [42, True]


def test_get_result_of_an_unknown_job(project: Any) -> None:
    with pytest.raises(FRAMEWORK.no_result, match="is unknown"):
        project.add.get_result("no-such-job")


def test_enqueue_in_an_atomic_block_waits_for_the_commit(project: Any, app: App) -> None:
    with transaction.atomic():
        result = project.add.enqueue(5, 5)
        with pytest.raises(FRAMEWORK.no_result):  # nothing sent before the commit
            project.add.get_result(result.id)
    assert drain(WAIT_TIMEOUT)
    assert project.add.get_result(result.id).status == FRAMEWORK.status.READY
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        dropped = project.add.enqueue(6, 6)
        raise ZeroDivisionError
    run_worker(app)
    assert project.add.get_result(result.id).return_value == 10
    with pytest.raises(FRAMEWORK.no_result):  # the rollback left no job
        project.add.get_result(dropped.id)


def test_with_the_apps_outbox_the_job_is_a_row_of_the_transaction(project: Any) -> None:
    """App(outbox=DSN): enqueue() in an atomic block writes the job into the outbox in that
    transaction (a rollback leaves nothing); a worker relays it to Redis and runs it."""
    from django_tasks_project.jobs import OUTBOX_DSN, outboxed

    init_schema(OUTBOX_DSN)  # the default outbox table, if missing (rows are by namespace)
    tasks = {"outboxed": {"BACKEND": "lockgate.django.LockgateBackend",
                          "OPTIONS": {"APP": "django_tasks_project.jobs:outboxed"}}}  # fmt: skip
    count = outboxed.outbox.sql(COUNT_SQL)
    with override_settings(TASKS={**PROJECT_TASKS, **tasks}):
        add = project.add.using(backend="outboxed")
        with pytest.raises(ZeroDivisionError), transaction.atomic():
            add.enqueue(0, 0)
            raise ZeroDivisionError
        with transaction.atomic():
            result = add.enqueue(7, 8)
            with connection.cursor() as cursor:  # the row, seen in its own transaction
                cursor.execute(count.as_string(cursor.connection), [outboxed.namespace])
                assert cursor.fetchone() == (1,)
        assert outbox_rows(count, outboxed.namespace) == 1  # committed: the one kept
        with pytest.raises(FRAMEWORK.no_result):  # not relayed yet: no worker
            add.get_result(result.id)

        async def relay_and_run() -> None:
            async with running(worker_for(outboxed)):
                await wait_until(lambda: outboxed.job(result.id).status == "done")

        asyncio.run(relay_and_run())
        assert add.get_result(result.id).return_value == 15
        assert outbox_rows(count, outboxed.namespace) == 0


def outbox_rows(count: Any, namespace: str) -> int:
    """Committed outbox rows of a namespace, as another connection sees them."""
    import psycopg

    from django_tasks_project.jobs import OUTBOX_DSN

    with psycopg.connect(OUTBOX_DSN, autocommit=True) as conn:
        row = conn.execute(count, (namespace,)).fetchone()
    assert row is not None
    return int(row[0])


def test_without_the_outbox_option_enqueue_sends_at_once(project: Any, app: App) -> None:
    direct = project.add.using(backend="direct")
    with transaction.atomic():
        result = direct.enqueue(1, 2)
        assert direct.get_result(result.id).status == FRAMEWORK.status.READY
    run_worker(app)
    assert direct.get_result(result.id).return_value == 3


def test_bad_options_are_refused(project: Any) -> None:
    cases = [
        ({"APP": "django_tasks_project.jobs:app", "RETRIES": 3}, "has 'RETRIES'"),
        ({}, "needs 'APP'"),
        ({"APP": "django_tasks_project.jobs"}, "as 'module:attribute'"),
        ({"APP": "django_tasks_project.tasks:add"}, "is a Task, not an App"),
    ]
    for options, message in cases:
        tasks = {"bad": {"BACKEND": "lockgate.django.LockgateBackend", "OPTIONS": options}}
        with override_settings(TASKS={**PROJECT_TASKS, **tasks}):
            with pytest.raises(ConfigError, match=message):
                backend("bad")
