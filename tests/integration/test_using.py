"""The producer side's traps, against a real Redis: ``task.using(...)`` (a task whose
parameters are named like enqueue options; a per-call queue), the hints Celery's keywords
get, and an ``eta`` that must be timezone-aware."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from test_enqueue_on_commit import DSN

from conftest import drain
from lockgate import App, ConfigError, InvalidArguments
from lockgate.api.using import ConfiguredTask
from lockgate.integrations.transactions import drain as drain_commits

BACKENDS = ["streams", "sorted"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_using_passes_option_named_arguments_to_the_task(
    make_app: Callable[..., App], backend: str
) -> None:
    app = make_app(backend=backend)
    got: list[tuple[str, str, int]] = []

    @app.task
    def notify(user: str, priority: str, delay: int) -> None:
        got.append((user, priority, delay))

    r = notify.using(priority="critical").enqueue("u", priority="high", delay=3)
    info = app.job(r.job_id)
    assert info.status == "waiting"  # delay=3 went to the task, not the enqueue
    await drain(app)
    assert got == [("u", "high", 3)]

    # The async form and message() take the task's arguments the same way.
    await notify.using(job_id="n-2").enqueue_async(user="v", priority="low", delay=0)
    message = notify.using(delay=60).message("w", "normal", 1)
    assert (message.job.args, message.job.kwargs, message.delay) == (["w", "normal", 1], {}, 60)
    delayed = app.enqueue_many([message])[0]
    assert delayed.status() == "delayed"
    assert delayed.cancel()  # so that the drain need not wait a minute for it
    await drain(app)
    assert got == [("u", "high", 3), ("v", "low", 0)]


async def test_using_sets_level_id_and_delay_as_enqueue_does(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    @app.task
    def send(to: str) -> None: ...

    plain = send.message("a", job_id="j", priority="critical", delay=5)
    used = send.using(job_id="j", priority="critical", delay=5).message("a")
    fields = ("id", "task", "queue", "level", "args", "kwargs", "key")
    assert [getattr(used.job, f) for f in fields] == [getattr(plain.job, f) for f in fields]
    assert (used.delay, used.named) == (plain.delay, plain.named)
    assert send.using().message("a").job.level == send.priority
    assert isinstance(send.using(), ConfiguredTask)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_using_queue_sends_the_job_to_that_queue_and_its_worker_runs_it(
    make_app: Callable[..., App], backend: str
) -> None:
    app = make_app(backend=backend)
    ran: list[str] = []

    @app.task(queue="mail")
    def send(to: str) -> None:
        ran.append(to)

    @app.task(queue="bulk")
    def report() -> None: ...

    r = send.using(queue="bulk").enqueue("x@example.com")
    assert send.message("y").job.queue == "mail"  # the task's queue stays its default
    await drain(app, queues=("mail",))
    assert ran == []  # not in the task's queue
    assert app.job(r.job_id).status == "waiting"
    await drain(app, queues=("bulk",))
    assert ran == ["x@example.com"]
    assert app.job(r.job_id).status == "done"


async def test_using_refuses_a_queue_no_task_is_declared_on(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    @app.task(queue="mail")
    def send(to: str) -> None: ...

    with pytest.raises(ConfigError, match=r"queue 'nope' is not one of this app's queues \(mail\)"):
        send.using(queue="nope")
    with pytest.raises(ConfigError, match="unknown"):
        send.using(priority="urgent")
    with pytest.raises(ConfigError, match="not both"):
        send.using(delay=1, eta=datetime.now(UTC))


def test_using_enqueue_on_commit_takes_the_task_arguments(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    @app.task
    def notify(user: str, priority: str) -> None: ...

    with psycopg.connect(DSN) as conn:
        conn.execute("SELECT 1")  # in a transaction now
        job_id = notify.using(priority="low", job_id="c-1").enqueue_on_commit(
            conn, "u", priority="high"
        )
        assert app.job(job_id).status == "unknown"  # not before the commit
        conn.commit()
    assert drain_commits(30)
    info = app.client().xrange(app.keys.stream("default", "low"))
    assert len(info) == 1 and job_id == "c-1"
    assert app.job("c-1").status == "waiting"


async def test_using_enqueue_on_commit_async_takes_the_task_arguments(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    @app.task
    def notify(user: str, delay: int) -> None: ...

    with psycopg.connect(DSN) as conn:
        conn.execute("SELECT 1")  # in a transaction now
        job_id = await notify.using(job_id="c-2").enqueue_on_commit_async(conn, "u", delay=9)
        conn.rollback()  # a rollback leaves no job
    assert drain_commits(30)
    assert job_id == "c-2" and app.job("c-2").status == "unknown"
    with psycopg.connect(DSN) as conn:
        conn.execute("SELECT 1")
        await notify.using(job_id="c-3").enqueue_on_commit_async(conn, "u", delay=9)
        conn.commit()
    assert drain_commits(30)
    info = app.job("c-3")
    assert (info.status, info.task) == ("waiting", "notify")  # not delayed


def test_a_task_with_option_named_parameters_logs_one_warning_naming_using(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    with caplog.at_level(logging.WARNING, logger="lockgate.api.task"):

        @app.task
        def notify(user: str, priority: str, delay: int, queue: str) -> None: ...

        @app.task
        def plain(user: str, **options: Any) -> None: ...

    messages = [r.getMessage() for r in caplog.records if r.name == "lockgate.api.task"]
    assert len(messages) == 1
    assert "(priority, delay)" in messages[0]  # queue= goes to the task on a plain enqueue
    assert "notify.using(...).enqueue(...)" in messages[0]


def test_celery_keywords_get_a_hint_naming_lockgates_own(make_app: Callable[..., App]) -> None:
    app = make_app()

    @app.task
    def send(to: str) -> None: ...

    with pytest.raises(InvalidArguments, match=r"countdown=: lockgate's countdown is delay="):
        send.enqueue("a", countdown=10)
    with pytest.raises(InvalidArguments, match=r"queue=: .*task\.using\(queue=\.\.\.\)"):
        send.enqueue("a", queue="other")
    with pytest.raises(InvalidArguments, match=r"pass the task's arguments themselves"):
        send.message(args=("a",), kwargs={})
    with pytest.raises(InvalidArguments, match=r"expires=: .*@app\.task\(expires=SECONDS\)"):
        send.enqueue("a", expires=60)
    with pytest.raises(AttributeError, match=r"no 'delay' \(Celery's\): use task\.enqueue"):
        send.delay("a")  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match=r"'apply_async' .*task\.using\("):
        send.apply_async(("a",), countdown=3)  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="no attribute 'sendd'"):
        send.sendd  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(InvalidArguments) as plain:  # no Celery keyword: no hint
        send.enqueue("a", colour="red")
    assert "lockgate" not in str(plain.value)


async def test_a_task_that_takes_countdown_or_queue_still_gets_them(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    got: list[tuple[int, str]] = []

    @app.task
    def tick(countdown: int, queue: str = "q") -> None:
        got.append((countdown, queue))

    tick.enqueue(countdown=10, queue="mine")
    await drain(app)
    assert got == [(10, "mine")]

    @app.task
    def anything(**options: Any) -> None: ...

    assert anything.message(countdown=3).job.kwargs == {"countdown": 3}


def test_a_naive_or_numeric_eta_is_refused(make_app: Callable[..., App]) -> None:
    app = make_app()

    @app.task
    def remind() -> None: ...

    naive = datetime.now() + timedelta(hours=1)
    with pytest.raises(ConfigError, match=r"has no time zone: give a timezone-aware datetime"):
        remind.enqueue(eta=naive)
    with pytest.raises(ConfigError, match=r"datetime\.now\(UTC\) \+ timedelta"):
        remind.using(eta=naive)
    with pytest.raises(ConfigError, match=r"not int 30: for a number of seconds .* delay="):
        remind.enqueue(eta=30)  # type: ignore[arg-type]
    aware = remind.message(eta=datetime.now(UTC) + timedelta(hours=1))
    assert 3590 < aware.delay <= 3600
