"""Django's priorities onto lockgate's levels, and the run's record read back from a dead
job's traceback (lockgate.integrations.django_tasks; pure, no Django needed)."""

from __future__ import annotations

import pytest

from lockgate.core.outcome import ErrorInfo
from lockgate.core.status import JobInfo
from lockgate.errors import ConfigError
from lockgate.integrations.django_tasks import (
    NOTE,
    _record,
    check_priorities,
    default_priorities,
    level_of,
)

LEVELS = ("critical", "high", "normal", "low")
PRIORITIES = (100, 50, 49, 0, -49, -50, -100)


@pytest.mark.parametrize(
    ("levels", "expected"),
    [
        (LEVELS, ["critical", "critical", "normal", "normal", "normal", "low", "low"]),
        (("high", "normal", "low"), ["high", "high", "normal", "normal", "normal", "low", "low"]),
        (("fast", "slow"), ["fast", "fast", "slow", "slow", "slow", "slow", "slow"]),
        (("only",), ["only"] * 7),
    ],
)
def test_the_default_mapping(levels: tuple[str, ...], expected: list[str]) -> None:
    lowest = default_priorities(levels)
    assert [level_of(p, lowest) for p in PRIORITIES] == expected


def test_priorities_option() -> None:
    lowest = check_priorities({"critical": 90, "high": 40, "low": -100}, LEVELS)
    assert [level_of(p, lowest) for p in (100, 90, 89, 40, 39, -100)] == [
        "critical", "critical", "high", "high", "low", "low"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ([("low", -100)], "maps each lockgate level"),
        ({"urgent": -100}, "names level 'urgent'; the App's levels: critical, high"),
        ({"low": -100, "high": 101}, r"\['high'\] must be in -100..100"),
        ({"low": -100, "high": 1.5}, r"\['high'\] must be a whole number"),
        ({"low": -100, "high": True}, r"\['high'\] must be a whole number"),
        ({"high": 0}, "must give one level -100"),
    ],
)
def test_bad_priorities_option(option: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_priorities(option, LEVELS)


def test_the_record_of_a_failure_is_the_last_note_line_of_its_traceback() -> None:
    traceback = (
        "Traceback (most recent call last):\n  ...\nmy.Boom: no\n"
        f'{NOTE}{{"task": "my.tasks.f", "exception": "my.Boom", "args": [1]}}\n'
    )
    info = JobInfo("j", "dead", error=ErrorInfo("Boom", "no", traceback))
    assert _record(info) == {"task": "my.tasks.f", "exception": "my.Boom", "args": [1]}
    for text in ("Traceback ...\nmy.Boom: no\n", f"{NOTE}not json\n", f"{NOTE}[1]\n"):
        assert _record(JobInfo("j", "dead", error=ErrorInfo("Boom", "no", text))) is None
    assert _record(JobInfo("j", "done", result={"task": "t", "value": 1})) == {
        "task": "t", "value": 1
    }  # fmt: skip
    assert _record(JobInfo("j", "done", result=5)) is None
