"""Records through a real worker: a Pydantic model, a dataclass, a msgspec Struct and an attrs
class (alone, in a list, optional) reach the task as their types, and a kept result comes
back from ``result()`` as the task's return annotation."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Optional

from conftest import drain
from lockgate import App
from lockgate.ops.deadletter import list_dead
from record_types import DAY, ORDER, Crate, Order, Pallet, Parcel, Receipt

ORDERS = [ORDER, Order(id=8, placed=DAY)]


async def test_records_round_trip_through_a_worker(make_app: Callable[..., App]) -> None:
    app = make_app()
    seen: dict[str, list[object]] = {}

    @app.task(keep_result=60)
    def pay(order: Order) -> Receipt:
        seen["pay"] = [order]
        return Receipt(order_id=order.id, paid=sum((x.price for x in order.lines), Decimal()))

    @app.task(keep_result=60)
    async def batch(orders: list[Order], gift: Optional[Order]) -> list[Order]:  # noqa: UP045
        seen.setdefault("batch", []).extend(orders)
        return [*orders, gift] if gift is not None else orders

    @app.task(keep_result=60)
    def pack(parcel: Parcel, crate: Crate, pallet: Pallet) -> Pallet:
        seen["pack"] = [parcel, crate, pallet]
        return Pallet([*pallet.crates, crate], parcel.order.placed)

    @app.task(keep_result=60)
    def maybe(order: Order | None) -> Order | None:
        return order

    crate = Crate("c1", ORDER)
    pallet = Pallet([Crate("c0")], DAY)
    paid = pay.enqueue(ORDER)
    batched = batch.enqueue(ORDERS, None)
    gifted = await batch.enqueue_async(ORDERS[:1], gift=ORDERS[1])
    packed = pack.enqueue(Parcel(ORDERS[1], 2.5), crate, pallet)
    nothing = maybe.enqueue(None)
    await drain(app, concurrency=2)
    assert list_dead(app) == []

    assert seen["pay"] == [ORDER] and type(seen["pay"][0]) is Order
    assert [type(o) for o in seen["batch"]] == [Order] * 3
    receipt = paid.result(timeout=10)
    assert receipt == Receipt(order_id=7, paid=Decimal("19.90"))
    assert type(receipt) is Receipt
    assert batched.result(timeout=10) == ORDERS
    assert [type(o) for o in batched.result(timeout=10)] == [Order, Order]
    assert await gifted.result_async(timeout=10) == ORDERS
    assert app.wait_result(packed.job_id, "pack", timeout=10) == Pallet([Crate("c0"), crate], DAY)
    back = packed.result(timeout=10)
    assert type(back) is Pallet and type(back.crates[1]) is Crate
    assert type(back.crates[1].order) is Order
    assert nothing.result(timeout=10) is None
    parcel, crate_seen, pallet_seen = seen["pack"]
    assert type(parcel) is Parcel and type(parcel.order) is Order
    assert type(crate_seen) is Crate and crate_seen == crate
    assert type(pallet_seen) is Pallet and pallet_seen == pallet
    # The status shows the same result, as the task's type.
    assert app.job(paid.job_id).result == receipt
