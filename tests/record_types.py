"""Record types that tests pass as task arguments and results: a Pydantic model with a nested
model, a dataclass, a msgspec Struct and an attrs class holding them (module level, so that a
task's annotations resolve)."""

from __future__ import annotations

import dataclasses
from datetime import date
from decimal import Decimal

import attrs
import msgspec
from pydantic import BaseModel, ConfigDict, Field, computed_field

DAY = date(2024, 2, 29)


class Line(BaseModel):
    sku: str
    price: Decimal


class Order(BaseModel):
    id: int
    placed: date
    lines: list[Line] = []
    note: str | None = None


class Signup(BaseModel):
    """A FastAPI-style model: camelCase aliases, no extra inputs, a computed field."""

    model_config = ConfigDict(extra="forbid", populate_by_name=False)
    user_id: int = Field(alias="userId")
    display_name: str = Field(alias="displayName")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def greeting(self) -> str:
        return f"Hello {self.display_name}"


class Receipt(BaseModel):
    order_id: int
    paid: Decimal


@dataclasses.dataclass
class Parcel:
    order: Order
    weight: float


class Crate(msgspec.Struct):
    label: str
    order: Order | None = None


@attrs.define
class Pallet:
    crates: list[Crate]
    day: date


class Opaque:
    """A value with no JSON form."""


class Holder(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    thing: Opaque


ORDER = Order(id=7, placed=DAY, lines=[Line(sku="A-1", price=Decimal("19.90"))])
