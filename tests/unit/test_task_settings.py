"""TaskSettings: a task's options, declared once, drive ``@app.task`` and ``@app.cron``."""

from __future__ import annotations

import ast
import itertools
import typing
from dataclasses import fields
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from lockgate import App, Backoff, ConfigError
from lockgate.core import tasks
from lockgate.core.config import Levels
from lockgate.core.ratelimit import Rate
from lockgate.core.retry import DEFAULT_TTL
from lockgate.core.tasks import OPTIONS, TaskKeywords, TaskSettings

NOWHERE = "redis://127.0.0.1:1/0"


@pytest.fixture
def app() -> App:
    return App(NOWHERE, namespace="unit")


def test_the_keywords_typed_dict_mirrors_the_settings_fields() -> None:
    options = {option.name: option for option in fields(TaskSettings) if option.init}
    hints = typing.get_type_hints(TaskSettings)
    assert typing.get_type_hints(TaskKeywords) == {name: hints[name] for name in options}
    assert TaskKeywords.__required_keys__ == frozenset()
    assert frozenset(options) == OPTIONS
    assert len(OPTIONS) == 19


def test_every_option_is_documented() -> None:
    # mkdocstrings renders each field's docstring (the string under it): App.task's docs
    # point there.
    tree = ast.parse(Path(tasks.__file__).read_text(encoding="utf-8"))
    body = next(
        node.body
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name == "TaskSettings"
    )
    documented = {
        field.target.id
        for field, under in itertools.pairwise(body)
        if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
        if isinstance(under, ast.Expr) and isinstance(under.value, ast.Constant)
    }
    assert OPTIONS <= documented


def test_defaults() -> None:
    settings = TaskSettings()
    assert (settings.priority, settings.queue, settings.name) == (None, "default", None)
    assert settings.retry.retries == 3 and settings.retry.backoff == Backoff(base=1.0)
    assert (settings.retry.retry_on, settings.retry.dead_on, settings.retry.timeout) == (
        (),
        (),
        None,
    )
    assert (settings.idempotent, settings.idempotency_ttl_seconds) == (False, DEFAULT_TTL)
    assert (settings.expires_seconds, settings.rate, settings.keep_result_ms) == (None, None, 0)


def test_durations_are_normalised_once() -> None:
    settings = TaskSettings(
        timeout=timedelta(seconds=2),
        backoff=timedelta(seconds=3),
        idempotency_ttl=timedelta(hours=1),
        expires=timedelta(minutes=5),
        keep_result=timedelta(milliseconds=1500),
        retry_on=[ValueError],  # type: ignore[arg-type]
        dead_on=[KeyError],  # type: ignore[arg-type]
    )
    assert settings.retry.timeout == 2.0 and settings.retry.backoff == Backoff(base=3.0)
    assert settings.retry.retry_on == (ValueError,)
    assert settings.retry.dead_on == (KeyError,)
    assert settings.idempotency_ttl_seconds == 3600.0
    assert settings.expires_seconds == 300.0
    assert settings.keep_result_ms == 1500
    assert TaskSettings(keep_result=0.0001).keep_result_ms == 1  # kept at least 1 ms
    assert TaskSettings(keep_result=0).keep_result_ms == 0


def test_checks_that_name_the_task_wait_for_its_name() -> None:
    with pytest.raises(ConfigError, match="task 'send_otp': rate_limit must look like"):
        TaskSettings(rate_limit="nope", name="send_otp")
    unnamed = TaskSettings(rate_limit="nope")  # the function's name is not known yet
    with pytest.raises(ConfigError, match="task '_lambda_': rate_limit must look like"):
        unnamed.declared(lambda: None, Levels())


def test_declared_fills_in_the_level_and_the_name_and_parses_the_rate() -> None:
    def send_otp() -> None: ...

    declared = TaskSettings(rate_limit="5/m").declared(send_otp, Levels())
    assert (declared.priority, declared.name, declared.rate) == ("normal", "send_otp", Rate(5, 60))
    with pytest.raises(ConfigError, match="unknown priority 'urgent'"):
        TaskSettings(priority="urgent").declared(send_otp, Levels())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"retries": -1}, "retries must be >= 0"),
        ({"timeout": 0}, "timeout must be positive"),
        ({"queue": "no spaces"}, "queue 'no spaces' must be"),
        ({"name": "no spaces"}, "task name 'no spaces' must be"),
        ({"idempotency_ttl": "1d"}, "idempotency_ttl must be seconds or a timedelta"),
        ({"keep_result": -1}, "keep_result must not be negative"),
        ({"expires": 0, "name": "t"}, "task 't': expires must be positive"),
        (
            {"idempotent": True, "idempotency_ttl": 5, "name": "t"},
            "idempotency TTL for \"job ids of task 't'\" is 5s",
        ),
    ],
)
def test_bad_options_are_config_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TaskSettings(**options)


@pytest.mark.parametrize("option", ["bogus", "retry", "rate", "fn_name"])
def test_unknown_options_are_refused_by_task_and_cron(app: App, option: str) -> None:
    keywords: Any = {option: 1}
    with pytest.raises(TypeError, match=rf"App\.task\(\) got an unexpected keyword .*'{option}'"):
        app.task(**keywords)
    with pytest.raises(TypeError, match=rf"App\.cron\(\) got an unexpected keyword .*'{option}'"):
        app.cron("* * * * *", **keywords)
    assert app.tasks == {}


def test_task_attributes_come_from_the_settings(app: App) -> None:
    @app.task(
        priority="low",
        queue="mail",
        name="mail.send",
        retries=1,
        backoff=2,
        timeout=timedelta(seconds=9),
        retry_on=(KeyError,),
        dead_on=(LookupError,),
        idempotent=True,
        idempotency_ttl=60,
        expires=30,
        rate_limit="10/s",
        keep_result=1.5,
    )
    def send() -> None: ...

    assert (send.name, send.queue, send.priority) == ("mail.send", "mail", "low")
    assert (send.retry.retries, send.retry.backoff, send.retry.timeout) == (1, Backoff(base=2), 9)
    assert (send.retry.retry_on, send.retry.dead_on) == ((KeyError,), (LookupError,))
    assert (send.idempotent, send.idempotency_ttl, send.expires) == (True, 60.0, 30.0)
    assert (send.rate_limit, send.keep_result_ms) == (Rate(10, 1), 1500)
    assert send.settings.name == "mail.send" and send.settings.priority == "low"


def test_cron_takes_the_task_options(app: App) -> None:
    @app.cron("*/5 * * * *", priority="low", name="rollup", retries=0, expires=30, keep_result=60)
    def tick() -> None: ...

    assert (tick.name, tick.priority, tick.retry.retries, tick.expires) == (
        "rollup",
        "low",
        0,
        30.0,
    )
    assert tick.keep_result_ms == 60_000
    assert app.tasks["rollup"] is tick and "rollup" in app.schedules
