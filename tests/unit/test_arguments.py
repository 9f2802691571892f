"""Task arguments: checked at enqueue, rebuilt to their annotated types in the worker.

The rule under test: a task receives exactly what was enqueued (same values, same types).
JSON has no dates, decimals or tuples, so an annotation says how to rebuild them; a value
that its parameter's annotation cannot rebuild is refused at enqueue, not found out in
the task.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Annotated, Any
from uuid import UUID
from zoneinfo import ZoneInfo

import msgspec
import pytest

from lockgate import App, InvalidArguments, SerializationError
from lockgate.api.task import Task
from lockgate.core.codec import MAX_DEPTH, decode, encode

NOWHERE = "redis://127.0.0.1:1/0"
DAY = date(2024, 1, 31)
REF = UUID("12345678-1234-5678-1234-567812345678")


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Item(msgspec.Struct):
    sku: str
    price: Decimal
    added: date


@pytest.fixture
def app() -> App:
    return App(NOWHERE, namespace="unit")


def delivered(task: Task[Any, Any], *args: Any, **kwargs: Any) -> tuple[list[Any], dict[str, Any]]:
    """What the task receives: enqueue checks, the wire, then the worker's prepare()."""
    job = decode(encode(task.message(*args, **kwargs).job))
    return task.prepare(job.args, job.kwargs)


def test_annotated_arguments_arrive_as_their_types(app: App) -> None:
    @app.task
    def book(
        d: date,
        when: datetime,
        amount: Decimal,
        ref: UUID,
        blob: bytes,
        color: Color,
        level: Level,
        at: Point,
        item: Item,
        pair: tuple[int, str],
        days: list[date],
        prices: dict[str, Decimal],
        names: dict[int, str],
        wait: timedelta,
    ) -> None: ...

    values: dict[str, Any] = {
        "d": DAY,
        "when": datetime(2024, 1, 31, 12, 30, 1, 5, tzinfo=UTC),
        "amount": Decimal("10.50"),
        "ref": REF,
        "blob": b"\x00\xff raw",
        "color": Color.BLUE,
        "level": Level.LOW,
        "at": Point(1, 2),
        "item": Item("A-1", Decimal("0.10"), DAY),
        "pair": (1, "one"),
        "days": [DAY, date(2000, 2, 29)],
        "prices": {"a": Decimal("1.5")},
        "names": {1: "one", -2: "minus two"},
        "wait": timedelta(seconds=90),
    }
    ordered = list(values.values())
    args, kwargs = delivered(book, *ordered[:5], **dict(list(values.items())[5:]))
    received = dict(zip(list(values)[:5], args, strict=True)) | kwargs
    assert received == values
    for name, value in values.items():
        assert type(received[name]) is type(value), name
    assert [type(d) for d in received["days"]] == [date, date]
    assert type(received["prices"]["a"]) is Decimal
    assert type(received["item"].added) is date
    assert received["amount"].as_tuple() == Decimal("10.50").as_tuple()  # "10.50" kept


def test_optional_and_variadic_parameters_convert(app: App) -> None:
    @app.task
    def report(first: date | None, *more: date, every: int = 1, **extra: Decimal) -> None: ...

    args, kwargs = delivered(report, DAY, DAY, date(2024, 2, 1), every=2, fee=Decimal("0.5"))
    assert args == [DAY, DAY, date(2024, 2, 1)]
    assert all(type(a) is date for a in args)
    assert kwargs == {"every": 2, "fee": Decimal("0.5")}
    assert type(kwargs["fee"]) is Decimal
    assert delivered(report, None) == ([None], {})


def test_json_native_arguments_pass_unchanged(app: App) -> None:
    @app.task
    def loose(a, b: Any, c: object = None, *rest, **more) -> None:  # type: ignore[no-untyped-def]
        ...

    payload = {"k": [1, 2.5, None, True, "s", {"n": [[]]}], "big": 2**80, "neg": -0.0}
    args, kwargs = delivered(loose, payload, [1, "x"], "c", 4, 5, z={"y": False})
    assert args == [payload, [1, "x"], "c", 4, 5]
    assert kwargs == {"z": {"y": False}}
    assert math.copysign(1, args[0]["neg"]) == -1


def test_an_int_for_a_float_arrives_as_a_float(app: App) -> None:
    @app.task
    def scale(factor: float) -> None: ...

    args, _ = delivered(scale, 2)
    assert args == [2.0] and type(args[0]) is float


@pytest.mark.parametrize(
    ("value", "arrives"),
    [
        (DAY, "'2024-01-31'"),
        (Decimal("1.5"), "'1.5'"),
        (REF, f"'{REF}'"),
        (b"ab", "'YWI='"),
        ((1, 2), r"\[1, 2\]"),
        ({1: "a"}, r"\{'1': 'a'\}"),
        (Level.LOW, "1"),
        (Color.RED, "'red'"),
        (Point(1, 2), r"\{'x': 1, 'y': 2\}"),
        ({1, 2}, r"\[1, 2\]"),
        ([1, [DAY]], r"\[1, \['2024-01-31'\]\]"),
        (float("nan"), "None"),
        (float("inf"), "None"),
    ],
)
def test_a_value_that_would_change_is_refused_for_an_unannotated_parameter(
    app: App, value: Any, arrives: str
) -> None:
    @app.task
    def loose(x, y: Any = None) -> None:  # type: ignore[no-untyped-def]
        ...

    with pytest.raises(SerializationError, match=f"task 'loose', parameter 'x'.*{arrives}"):
        loose.message(value)
    with pytest.raises(SerializationError, match=f"task 'loose', parameter 'y'.*{arrives}"):
        loose.message(1, y=value)


@pytest.mark.parametrize("value", [object(), len, 1 + 2j])
def test_a_value_without_a_json_form_is_refused(app: App, value: Any) -> None:
    @app.task
    def loose(x: Any) -> None: ...

    with pytest.raises(SerializationError, match="task 'loose', parameter 'x'"):
        loose.message(value)


@pytest.mark.parametrize(
    ("annotation", "value"),
    [
        (int, "5"),
        (int, True),
        (int, 1.5),
        (date, "2024-01-31"),
        (date, datetime(2024, 1, 31, tzinfo=UTC)),
        (UUID, str(REF)),
        (list[int], (1, 2)),
        (list[int], [1, "a"]),
        (Color, "red"),
        (Point, {"x": 1, "y": 2}),
        (Annotated[int, msgspec.Meta(ge=0)], -1),
        (int, object()),
    ],
)
def test_a_value_that_does_not_fit_its_annotation_is_refused(
    app: App, annotation: Any, value: Any
) -> None:
    def typed(x: int) -> None: ...

    typed.__annotations__["x"] = annotation
    task = app.task(typed)
    with pytest.raises(InvalidArguments, match="task 'typed', parameter 'x'"):
        task.message(value)


@pytest.mark.parametrize(
    ("annotation", "value", "arrives"),
    [
        (float, float("nan"), "None"),
        (list[Any], [DAY], r"\['2024-01-31'\]"),
        (
            datetime,
            datetime(2024, 1, 31, tzinfo=ZoneInfo("Europe/Paris")),
            r"datetime\(2024, 1, 31",
        ),
    ],
)
def test_a_fitting_value_that_cannot_round_trip_is_refused(
    app: App, annotation: Any, value: Any, arrives: str
) -> None:
    def typed(x: int) -> None: ...

    typed.__annotations__["x"] = annotation
    task = app.task(typed)
    with pytest.raises(SerializationError, match=f"task 'typed', parameter 'x'.*{arrives}"):
        task.message(value)


def test_aware_datetimes_with_a_fixed_offset_round_trip(app: App) -> None:
    @app.task
    def at(when: datetime) -> None: ...

    plus_two = datetime(2024, 1, 31, 8, tzinfo=timezone(timedelta(hours=2)))
    for when in (plus_two, datetime(2024, 1, 31), datetime(2024, 1, 31, tzinfo=UTC)):
        args, _ = delivered(at, when)
        assert args == [when] and args[0].utcoffset() == when.utcoffset()


def test_variadic_values_are_named_in_errors(app: App) -> None:
    @app.task
    def many(*days: date, **fees: Decimal) -> None: ...

    with pytest.raises(InvalidArguments, match=r"parameter 'days' \(item 1\)"):
        many.message(DAY, "2024-01-31")
    with pytest.raises(InvalidArguments, match=r"parameter 'fees' \(key 'fee'\)"):
        many.message(fee="0.5")


def test_arguments_nested_over_the_limit_are_refused_at_enqueue(app: App) -> None:
    @app.task
    def tree(node, typed: list[Any] | None = None) -> None:  # type: ignore[no-untyped-def]
        ...

    deep: list[Any] = []
    for _ in range(1_000):
        deep = [deep]
    fine: list[Any] = []
    for _ in range(MAX_DEPTH - 1):
        fine = [fine]
    assert tree.message(fine, typed=fine).job.args == [fine]
    for kwargs in ({"node": deep}, {"node": 1, "typed": deep}, {"node": [fine]}):
        with pytest.raises(SerializationError, match=f"task 'tree'.*limit of {MAX_DEPTH}"):
            tree.message(**kwargs)


def test_prepare_binds_and_converts(app: App) -> None:
    @app.task
    def pay(amount: Decimal, *, ref: UUID) -> None: ...

    assert pay.prepare(["1.25"], {"ref": str(REF)}) == ([Decimal("1.25")], {"ref": REF})
    with pytest.raises(InvalidArguments, match="task 'pay'"):
        pay.prepare([], {})
    with pytest.raises(InvalidArguments, match="task 'pay', parameter 'ref'"):
        pay.prepare(["1"], {"ref": "not a uuid"})
    with pytest.raises(InvalidArguments, match="task 'pay', parameter 'amount'"):
        pay.prepare([[1]], {"ref": str(REF)})


def test_prepare_leaves_unannotated_tasks_alone(app: App) -> None:
    @app.task
    def loose(a, b=None) -> None:  # type: ignore[no-untyped-def]
        ...

    args, kwargs = ["2024-01-31"], {"b": {"k": [1]}}
    assert loose.prepare(args, kwargs) == (args, kwargs)
    with pytest.raises(InvalidArguments, match="task 'loose'"):
        loose.prepare([1, 2, 3], {})


def test_unresolvable_annotations_fall_back_to_no_conversion(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task
    def later(d: NotDefinedAnywhere) -> None:  # type: ignore[name-defined]  # noqa: F821
        ...

    assert any("later" in r.getMessage() for r in caplog.records)
    assert later.prepare(["2024-01-31"], {}) == (["2024-01-31"], {})
    assert later.message("2024-01-31").job.args == ["2024-01-31"]
    with pytest.raises(SerializationError, match="task 'later', parameter 'd'"):
        later.message(DAY)


def test_check_arguments_still_binds_only(app: App) -> None:
    @app.task
    def add(a: int, b: int = 0) -> None: ...

    add.check_arguments(["not checked for type"], {})
    with pytest.raises(InvalidArguments, match="task 'add'"):
        add.check_arguments([], {"c": 1})
