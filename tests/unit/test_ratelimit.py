"""``rate_limit="N/s"``: parsing, the GCRA parameters, and the declaration's ConfigError
(no Redis: every check fails before a connection is attempted)."""

from __future__ import annotations

import pytest

from lockgate import App, ConfigError
from lockgate.core.ratelimit import BURST, Rate, parse_rate

NOWHERE = "redis://127.0.0.1:1/0"


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("100/s", Rate(100, 1)),
        ("5/m", Rate(5, 60)),
        ("1000/h", Rate(1000, 3600)),
        ("1/s", Rate(1, 1)),
        (" 20 / s ", Rate(20, 1)),
        ("\t7/h\n", Rate(7, 3600)),
        ("007/m", Rate(7, 60)),
    ],
)
def test_rates_parse(text: str, rate: Rate) -> None:
    assert parse_rate(text, "t") == rate


@pytest.mark.parametrize(
    "text",
    ["x", "", "0/s", "00/m", "-5/s", "+5/s", "1.5/s", "5/d", "5/sec", "5/S", "5", "/s",
     "5/", "5//s", "5 s", "\u0661\u0660/s", "1e3/s"],
)  # fmt: skip
def test_bad_rates_are_refused_naming_the_task(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_rate(text, "charge")
    assert str(caught.value).startswith(
        f'task \'charge\': rate_limit must look like "100/s", "5/m" or "1000/h", got {text!r}'
    )


@pytest.mark.parametrize("value", [100, 1.5, b"5/s", ["5/s"]])
def test_a_rate_that_is_not_text_is_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="'charge': rate_limit must look like"):
        parse_rate(value, "charge")


def test_a_zero_count_says_why() -> None:
    with pytest.raises(ConfigError, match="at least 1"):
        parse_rate("0/s", "charge")


@pytest.mark.parametrize(
    ("rate", "interval_us"),
    [
        (Rate(100, 1), 10_000),
        (Rate(20, 1), 50_000),
        (Rate(5, 60), 12_000_000),
        (Rate(1000, 3600), 3_600_000),
        (Rate(3, 1), 333_334),  # rounded up: never more than 3 in a second
        (Rate(10_000_000, 1), 1),
    ],
)
def test_starts_are_spaced_evenly_rounded_up(rate: Rate, interval_us: int) -> None:
    assert rate.interval_us == interval_us
    assert rate.interval_us * rate.count >= rate.period * 1_000_000
    assert rate.burst == BURST == 1


def test_a_rate_reads_as_written() -> None:
    assert [str(parse_rate(t, "t")) for t in (" 100 /s", "5/m", "1000/h")] == [
        "100/s",
        "5/m",
        "1000/h",
    ]


def test_the_task_keeps_its_parsed_rate() -> None:
    app = App(NOWHERE, namespace="unit")

    @app.task(rate_limit="100/s")
    def charge(order: str) -> None: ...

    @app.task
    def refund(order: str) -> None: ...

    assert charge.rate_limit == Rate(100, 1)
    assert refund.rate_limit is None


@pytest.mark.parametrize("text", ["x", "0/s", "2.5/m", "10/d"])
def test_a_bad_rate_is_refused_at_declaration_naming_the_task(text: str) -> None:
    app = App(NOWHERE, namespace="unit")
    with pytest.raises(ConfigError, match=r"^task 'charge': rate_limit must look like"):

        @app.task(rate_limit=text)
        def charge(order: str) -> None: ...

    with pytest.raises(ConfigError, match=r"^task 'pay.v2': rate_limit must look like"):
        app.task(name="pay.v2", rate_limit=text)(lambda: None)
    assert app.tasks == {}  # nothing was registered
