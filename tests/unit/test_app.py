"""App and Task: declaration and enqueue checks that fail before any Redis round trip."""

from __future__ import annotations

import pytest

from lockgate import (
    App,
    ConfigError,
    InvalidArguments,
    LockgateError,
    SerializationError,
    Task,
    current_job,
)

# Nothing listens here: every check below must fail before a connection is attempted.
NOWHERE = "redis://127.0.0.1:1/0"


@pytest.fixture
def app() -> App:
    return App(NOWHERE, namespace="unit")


def test_task_decorator_forms(app: App) -> None:
    @app.task
    def plain(x: int) -> int:
        return x + 1

    @app.task(priority="critical", queue="mail", name="mail.send")
    async def send(to: str) -> None:
        return None

    assert isinstance(plain, Task) and isinstance(send, Task)
    assert (plain.name, plain.queue, plain.priority, plain.is_async) == (
        "plain",
        "default",
        "normal",
        False,
    )
    assert (send.name, send.queue, send.priority, send.is_async) == (
        "mail.send",
        "mail",
        "critical",
        True,
    )
    assert plain(1) == 2  # calling a task runs it here
    assert app.tasks == {"plain": plain, "mail.send": send}
    assert app.queues == ("default", "mail")


def test_queues_default_when_no_tasks(app: App) -> None:
    assert app.queues == ("default",)


def test_default_priority_is_the_middle_level() -> None:
    app = App(NOWHERE, namespace="unit", levels={"a": 4, "b": 2, "c": 1, "d": 1})
    assert app.default_priority == "c"


def test_unknown_priority_at_declaration(app: App) -> None:
    with pytest.raises(ConfigError, match="unknown priority 'urgent'"):

        @app.task(priority="urgent")
        def job() -> None: ...

    assert app.tasks == {}


def test_bad_queue_at_declaration(app: App) -> None:
    with pytest.raises(ConfigError, match="queue"):

        @app.task(queue="no spaces")
        def job() -> None: ...


def test_duplicate_task_name(app: App) -> None:
    @app.task
    def job() -> None: ...

    with pytest.raises(ConfigError, match="already registered"):

        @app.task(name="job")
        def other() -> None: ...

    assert app.tasks["job"] is job


@pytest.mark.parametrize("backend", ["redis", "Streams", "", None])
def test_bad_backend(backend: object) -> None:
    with pytest.raises(ConfigError, match="backend"):
        App(NOWHERE, namespace="unit", backend=backend)  # type: ignore[arg-type]


def test_wrong_arguments_at_enqueue(app: App) -> None:
    @app.task
    def add(a: int, b: int = 0) -> int:
        return a + b

    with pytest.raises(InvalidArguments, match="task 'add'") as missing:
        add.enqueue()
    assert isinstance(missing.value, TypeError)
    assert isinstance(missing.value, LockgateError)
    with pytest.raises(InvalidArguments):
        add.enqueue(1, 2, 3)
    with pytest.raises(InvalidArguments):
        add.enqueue(1, c=3)
    with pytest.raises(TypeError):
        add.message(b=1)


async def test_wrong_arguments_at_async_enqueue(app: App) -> None:
    @app.task
    async def job(x: int) -> None: ...

    with pytest.raises(InvalidArguments):
        await job.enqueue_async()


def test_unknown_priority_at_enqueue(app: App) -> None:
    @app.task
    def job() -> None: ...

    with pytest.raises(ConfigError, match="unknown priority 'urgent'"):
        job.enqueue(priority="urgent")


def test_bad_job_id_at_enqueue(app: App) -> None:
    @app.task
    def job() -> None: ...

    with pytest.raises(SerializationError):
        job.enqueue(job_id="")
    with pytest.raises(SerializationError):
        job.enqueue(job_id="x" * 257)


def test_unencodable_argument_enqueues_nothing(app: App) -> None:
    @app.task
    def job(x: object) -> None: ...

    with pytest.raises(SerializationError):
        job.enqueue(object())
    ok = job.message(1)
    with pytest.raises(SerializationError):
        app.enqueue_many([ok, job.message(object())])


def test_empty_batch_needs_no_redis(app: App) -> None:
    assert app.enqueue_many([]) == []


def test_message_builds_the_job(app: App) -> None:
    @app.task(priority="low", queue="q")
    def job(a: int, *, b: str) -> None: ...

    message = job.message(1, b="x", job_id="fixed", priority="critical")
    assert message.job.id == "fixed"
    assert (message.job.task, message.job.queue, message.job.level) == ("job", "q", "critical")
    assert (message.job.args, message.job.kwargs, message.job.attempt) == ([1], {"b": "x"}, 1)
    assert message.job.enqueued > 0
    generated = job.message(1, b="y")
    assert generated.job.level == "low"
    assert len(generated.job.id) == 32 and generated.job.id != job.message(1, b="y").job.id


def test_current_job_outside_a_task() -> None:
    with pytest.raises(LockgateError, match="only available inside"):
        current_job()


# --- task names (issue 22, item 7) ------------------------------------------------------


@pytest.mark.parametrize("name", ["billing.charge_card", "a:b", "x-y_z.1", "A" * 200])
def test_task_names_of_letters_digits_and_dot_dash_underscore_colon_are_accepted(
    app: App, name: str
) -> None:
    @app.task(name=name)
    def job() -> None:
        return None

    assert job.name == name
    assert app.tasks[name] is job


@pytest.mark.parametrize(
    "name",
    ["t<svg onload=alert(3)>", "", "A" * 201, "charge card", "charge\ncard", "charge\n", "café"],
)
def test_any_other_task_name_is_a_one_line_config_error_naming_it_and_the_rule(
    app: App, name: str
) -> None:
    with pytest.raises(ConfigError) as caught:

        @app.task(name=name)
        def job() -> None:
            return None

    message = str(caught.value)
    assert "\n" not in message
    assert repr(name)[:60].rstrip("'") in message
    assert "letters, digits" in message and "200" in message
    assert app.tasks == {}


def test_a_cron_task_name_is_checked_as_well(app: App) -> None:
    with pytest.raises(ConfigError, match="letters, digits"):

        @app.cron("* * * * *", name="every minute")
        def tick() -> None:
            return None


def test_functions_whose_own_name_is_no_valid_task_name_get_a_valid_default(app: App) -> None:
    def make() -> object:
        def inner() -> None:
            return None

        return inner

    nested = app.task(make())  # qualname '...<locals>.inner': the name is 'inner'
    anonymous = app.task(lambda: None)
    assert nested.name == "inner"
    assert anonymous.name == "_lambda_"
    assert set(app.tasks) == {"inner", "_lambda_"}
