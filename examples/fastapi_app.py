"""FastAPI: a payment endpoint that enqueues its charge in the request's own transaction.

The lifespan opens a psycopg pool and creates the table, and at shutdown waits for the
enqueues that follow a commit, then closes what it opened. The endpoint inserts a payment
and calls ``charge.enqueue_on_commit(conn, ...)`` in one transaction: a refused payment
rolls back, and no job is left behind.

Serve it with ``uvicorn examples.fastapi_app:api`` and run a worker with ``lockgate worker
examples.fastapi_app:app``. ``python -m examples.fastapi_app`` does both in one process
(FastAPI's TestClient sends the requests) and prints how often the payment was charged.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from psycopg_pool import ConnectionPool

from lockgate import App, Worker, WorkerConfig
from lockgate.embedded import redis_url_or_embedded
from lockgate.postgres import claim, init_schema
from lockgate.transactions import drain

DSN = os.environ.get("LOCKGATE_PG_DSN", "host=127.0.0.1 dbname=test user=postgres")
# Names from here, never from a request. The tests set their own namespace and table.
PAYMENTS = os.environ.get("EXAMPLE_FASTAPI_TABLE", "example_fastapi_payments")
LIMIT = 10_000  # a larger payment is refused after its charge was enqueued

app = App(namespace=os.environ.get("LOCKGATE_TEST_NAMESPACE", "example-fastapi"))


@app.on_startup
def open_worker_pool(app: App) -> None:
    app.state.pool = ConnectionPool(DSN, min_size=1, max_size=4, open=True)


@app.on_shutdown
def close_worker_pool(app: App) -> None:
    app.state.pool.close()


@app.task(priority="critical")
def charge(payment_id: int) -> None:
    """Charge a payment once, however often the job runs."""
    with app.state.pool.connection() as conn:  # one transaction: the claim and the charge
        if claim(conn, f"fastapi-charge:{PAYMENTS}:{payment_id}"):
            conn.execute(
                f"UPDATE {PAYMENTS} SET charged = charged + 1 WHERE id = %s", (payment_id,)
            )


def create_tables() -> None:
    """The payments table and lockgate's claims table (in a real project, a migration)."""
    init_schema(DSN)
    with ConnectionPool(DSN, min_size=1, open=True) as pool, pool.connection() as conn:
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {PAYMENTS} (id bigserial PRIMARY KEY,"
            " order_id text NOT NULL, amount int NOT NULL, charged int NOT NULL DEFAULT 0)"
        )


@asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[dict[str, Any]]:
    await asyncio.to_thread(create_tables)
    pool = ConnectionPool(DSN, min_size=1, max_size=8, open=False)
    await asyncio.to_thread(pool.open, wait=True)
    try:
        yield {"pool": pool}  # request.state.pool
    finally:
        # Jobs whose transaction committed are sent a few ms later: let them go first.
        await asyncio.to_thread(drain, 10.0)
        await asyncio.to_thread(pool.close)
        app.close()


api = FastAPI(lifespan=lifespan)


@api.post("/orders/{order_id}/payments", status_code=202)
def pay(order_id: str, amount: int, request: Request) -> dict[str, Any]:
    """Record a payment and enqueue its charge (a sync endpoint: FastAPI runs it in a
    thread, so the blocking database calls do not stall the event loop)."""
    pool: ConnectionPool = request.state.pool
    with pool.connection() as conn:  # commits on a normal exit, rolls back on an exception
        row = conn.execute(
            f"INSERT INTO {PAYMENTS} (order_id, amount) VALUES (%s, %s) RETURNING id",
            (order_id, amount),
        ).fetchone()
        assert row is not None
        job_id = charge.enqueue_on_commit(conn, row[0])
        if amount > LIMIT:  # a check after the enqueue: the rollback drops the job too
            raise HTTPException(402, f"{amount} is over the limit of {LIMIT}")
    return {"payment_id": row[0], "job_id": job_id}


def main(redis_url: str | None = None) -> int:
    """Pay once, have one payment refused, run a worker; return how often the paid one
    was charged."""
    from fastapi.testclient import TestClient

    with redis_url_or_embedded(redis_url) as url:
        app.redis_url = url
        with TestClient(api) as client:  # runs the lifespan
            paid = client.post("/orders/A1/payments", params={"amount": 100})
            print(f"A1: {paid.status_code} {paid.json()}")
            refused = client.post("/orders/B2/payments", params={"amount": 50_000})
            print(f"B2: {refused.status_code} {refused.json()}")
        asyncio.run(Worker(app, WorkerConfig(concurrency=2)).run(burst=True))
        with ConnectionPool(DSN, min_size=1, open=True) as pool, pool.connection() as conn:
            row = conn.execute(
                f"SELECT charged FROM {PAYMENTS} WHERE id = %s", (paid.json()["payment_id"],)
            ).fetchone()
            refused_rows = conn.execute(
                f"SELECT count(*) FROM {PAYMENTS} WHERE order_id = 'B2'"
            ).fetchone()
        app.close()
    charged = int(row[0]) if row else 0
    print(f"payment charged {charged} time(s); refused payments stored: {refused_rows[0]}")
    return charged


if __name__ == "__main__":
    main()
