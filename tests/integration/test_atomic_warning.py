"""A plain enqueue inside Django's ``transaction.atomic()`` logs a warning pointing to
``enqueue_on_commit`` (once per call site), against real Redis and PostgreSQL through
Django 5.2; ``enqueue_on_commit`` is not warned about, and without Django nothing imports
it.

Django is set up once for the module from the Django tasks test project's settings when
nothing set it up yet (the example project's and that project's share the database), and
put back as it was after.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import django
import psycopg
import pytest
from django.conf import settings
from django.db import connections, transaction

from conftest import drain
from lockgate import App, Task
from lockgate.integrations.transactions import drain as drain_commits

DSN = "host=127.0.0.1 dbname=test user=postgres"
LOGGER = "lockgate.integrations.atomic"


@pytest.fixture(scope="module", autouse=True)
def django_set_up() -> Iterator[None]:
    set_up_here = not settings.configured
    if set_up_here:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("DJANGO_SETTINGS_MODULE", "django_tasks_project.settings")
            django.setup()
    yield
    connections.close_all()
    if set_up_here:
        from django.utils.functional import empty

        settings._wrapped = empty


@pytest.fixture
def send(make_app: Callable[..., App]) -> Task[Any, None]:
    app = make_app()

    @app.task
    def send_receipt(order: str) -> None: ...

    return send_receipt


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_an_enqueue_in_an_atomic_block_warns_once_per_call_site(
    send: Task[Any, None], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER), transaction.atomic():
        for n in range(3):
            send.enqueue(f"A{n}")  # one line, three enqueues: one warning
        send.app.enqueue_many([send.message("B")])
    (first, second) = warnings_of(caplog)
    assert "task send_receipt is enqueued inside an open transaction.atomic() block" in first
    assert "Django database 'default'" in first
    assert "send_receipt.enqueue_on_commit(transaction connection, ...)" in first
    assert f"{__file__}:" in first and f"{__file__}:" in second
    assert first.split(__file__)[1] != second.split(__file__)[1]  # two lines named


def test_no_warning_outside_a_block_or_through_enqueue_on_commit(
    send: Task[Any, None], caplog: pytest.LogCaptureFixture
) -> None:
    django_db = connections["default"]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        send.enqueue("outside")
        with transaction.atomic():
            job_id = send.enqueue_on_commit(django_db, "on-commit")
            send.using(priority="critical").enqueue_on_commit(django_db, "configured")
            # A connection in no transaction sends at once, still not a plain enqueue.
            with psycopg.connect(DSN, autocommit=True) as idle:
                send.enqueue_on_commit(idle, "idle psycopg")
        assert drain_commits(30)
    assert warnings_of(caplog) == []
    assert send.app.job(job_id).status == "waiting"


def test_the_warning_does_not_stop_the_job(
    send: Task[Any, None], caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []
    app: App = send.app  # type: ignore[assignment]

    @app.task
    def record(order: str) -> None:
        ran.append(order)

    with caplog.at_level(logging.WARNING, logger=LOGGER), transaction.atomic():
        record.enqueue("C1")
    asyncio.run(drain(app))  # Django's calls are sync-only: the worker runs in a loop of its own
    assert ran == ["C1"]
    assert len(warnings_of(caplog)) == 1


def test_without_django_nothing_imports_it(redis_url: str, namespace: str) -> None:
    script = (
        "import sys\n"
        "from lockgate import App\n"
        f"app = App(redis_url={redis_url!r}, namespace={namespace!r})\n"
        "@app.task\n"
        "def ping() -> None: ...\n"
        "assert ping.enqueue().created\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'django')\n"
        "assert loaded == [], loaded\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
