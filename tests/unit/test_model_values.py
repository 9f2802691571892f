"""Records as task arguments and kept results: Pydantic models, dataclasses, msgspec
Structs and attrs classes go out as their JSON form and come back as the annotated type.

Pydantic stays optional: lockgate never imports it, and finds models only once the
user's own code has imported it.
"""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal
from typing import Any, Optional

import msgspec
import pytest
from test_arguments import app as app  # the fixture, re-exported
from test_arguments import delivered

from lockgate import App, InvalidArguments, SerializationError
from lockgate.core.codec import encode
from lockgate.core.records import decode_as
from lockgate.core.status import encode_result
from record_types import (
    DAY,
    ORDER,
    Crate,
    Holder,
    Line,
    Opaque,
    Order,
    Pallet,
    Parcel,
    Signup,
)


def test_a_pydantic_model_arrives_as_its_model(app: App) -> None:
    @app.task
    def place(order: Order) -> None: ...

    (received,), _ = delivered(place, ORDER)
    assert type(received) is Order
    assert received == ORDER
    assert type(received.lines[0]) is Line
    assert received.lines[0].price.as_tuple() == Decimal("19.90").as_tuple()
    # On the wire it is its JSON form, readable by producers in other languages.
    wire = msgspec.json.decode(encode(place.message(ORDER).job))
    assert wire["args"] == [
        {"id": 7, "placed": "2024-02-29", "lines": [{"sku": "A-1", "price": "19.90"}],
         "note": None}
    ]  # fmt: skip


def test_a_model_with_aliases_and_a_computed_field_round_trips(app: App) -> None:
    """A FastAPI-style model (camelCase aliases, extra inputs forbidden, a computed field)
    goes out by alias and without what model_validate would refuse, as argument and
    as result."""
    signup = Signup(userId=7, displayName="Ann")

    @app.task
    def welcome(s: Signup) -> None: ...

    (received,), _ = delivered(welcome, signup)
    assert type(received) is Signup
    assert received == signup
    back = decode_as(encode_result(signup), Signup)
    assert back == signup and type(back) is Signup


def test_nested_and_optional_models_arrive_as_their_types(app: App) -> None:
    @app.task
    def ship(
        orders: list[Order], maybe: Optional[Order], parcel: Parcel, crate: Crate,  # noqa: UP045
        pallet: Pallet, by_id: dict[str, Order] | None = None,
    ) -> None: ...  # fmt: skip

    crate = Crate("c1", ORDER)
    pallet = Pallet([crate, Crate("c2")], DAY)
    values = [[ORDER, Order(id=8, placed=DAY)], None, Parcel(ORDER, 1.5), crate, pallet]
    args, kwargs = delivered(ship, *values, by_id={"7": ORDER})
    assert args == values and kwargs == {"by_id": {"7": ORDER}}
    assert [type(o) for o in args[0]] == [Order, Order]
    assert type(args[2]) is Parcel and type(args[2].order) is Order
    assert type(args[3]) is Crate and type(args[3].order) is Order
    assert type(args[4]) is Pallet and type(args[4].crates[0].order) is Order
    assert type(kwargs["by_id"]["7"]) is Order
    args, _ = delivered(ship, [], ORDER, *values[2:])
    assert type(args[1]) is Order


def test_a_producer_may_send_the_json_form(app: App) -> None:
    """A producer in another language sends the model's JSON: the worker validates it into
    the model (leniently, as pydantic's lax mode: "7" for an int)."""

    @app.task
    def place(order: Order) -> None: ...

    received, _ = place.prepare([{"id": "7", "placed": "2024-02-29"}], {})
    assert received == [Order(id=7, placed=DAY)]
    with pytest.raises(InvalidArguments, match=r"(?s)parameter 'order' \(Order\).*placed"):
        place.prepare([{"id": 7, "placed": "soon"}], {})


def test_a_dict_for_a_model_parameter_is_refused_with_a_hint(app: App) -> None:
    @app.task
    def place(order: Order) -> None: ...

    with pytest.raises(InvalidArguments, match=r"does not fit Order.*pass an instance of Order"):
        place.message(ORDER.model_dump())


def test_an_unannotated_model_is_refused_naming_the_annotation(app: App) -> None:
    """Without an annotation the worker would hand the task a dict, not the model."""

    @app.task
    def place(order) -> None:  # type: ignore[no-untyped-def]
        ...

    with pytest.raises(SerializationError, match=r"would arrive as .*dict.*annotate the param"):
        place.message(ORDER)


def test_what_cannot_round_trip_is_refused_at_enqueue(app: App) -> None:
    class Special(Order):
        extra: int = 0

    @app.task
    def place(order: Order) -> None: ...

    @app.task
    def hold(holder: Holder) -> None: ...

    # A subclass would arrive as the annotated class, losing its fields.
    with pytest.raises(SerializationError, match=r"would arrive as .*\(Order\)"):
        place.message(Special(id=1, placed=DAY, extra=5))
    with pytest.raises(SerializationError, match=r"parameter 'holder'.*has no JSON form"):
        hold.message(Holder(thing=Opaque()))


def test_kept_results_come_back_as_the_return_annotation() -> None:
    pallet = Pallet([Crate("c1", ORDER)], DAY)
    cases: list[tuple[Any, Any]] = [
        (ORDER, Order), ([ORDER], list[Order]), (None, Optional[Order]),  # noqa: UP045
        (Parcel(ORDER, 2.0), Parcel), (pallet, Pallet), (Crate("c"), Crate),
    ]  # fmt: skip
    for value, returns in cases:
        back = decode_as(encode_result(value), returns)
        assert back == value
        assert type(back) is type(value)
    assert decode_as(encode_result(ORDER), Any) == ORDER.model_dump(mode="json")
    with pytest.raises(SerializationError, match="no JSON form"):
        encode_result(Holder(thing=Opaque()))


def test_importing_lockgate_does_not_import_pydantic() -> None:
    code = (
        "import sys, lockgate, lockgate.worker.runner, lockgate.core.records\n"
        "assert 'pydantic' not in sys.modules, 'pydantic imported'\n"
        "assert 'attrs' not in sys.modules, 'attrs imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
