"""Payment: PostgreSQL's unique constraint decides, in the same transaction as the charge.

The same order is enqueued three times under different job ids (a double-clicking user,
a retried HTTP request); the claim row and the payment row commit together, so exactly
one payment exists whatever happens. Run: ``python -m examples.payment``.
"""

from __future__ import annotations

import asyncio
import os

import psycopg
from psycopg_pool import ConnectionPool

from lockgate import App, Worker, WorkerConfig
from lockgate.embedded import redis_url_or_embedded
from lockgate.postgres import claim, init_schema

DSN = os.environ.get("LOCKGATE_PG_DSN", "host=127.0.0.1 dbname=test user=postgres")
app = App(namespace="example-payment")
pool: ConnectionPool[psycopg.Connection[tuple[object, ...]]] | None = None


@app.task(priority="critical")
def charge(order_id: str, amount: int) -> None:
    assert pool is not None
    with pool.connection() as conn, conn.transaction():
        if claim(conn, f"pay:{order_id}"):  # True only the first time, ever
            conn.execute(
                "INSERT INTO example_payments (order_id, amount) VALUES (%s, %s)",
                (order_id, amount),
            )


def main(redis_url: str | None = None, order_id: str = "A1") -> int:
    """Charge one order three times over; return how many payments it has."""
    global pool
    init_schema(DSN)
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS example_payments (order_id text, amount int)")
    with redis_url_or_embedded(redis_url) as url, ConnectionPool(DSN, min_size=1) as opened:
        pool = opened
        app.redis_url = url
        for _ in range(3):
            charge.enqueue(order_id, 100)
        asyncio.run(Worker(app, WorkerConfig(concurrency=3)).run(burst=True))
        with opened.connection() as conn:
            row = conn.execute(
                "SELECT count(*) FROM example_payments WHERE order_id = %s", (order_id,)
            ).fetchone()
    app.close()
    count = int(row[0]) if row else 0
    print(f"order {order_id}: {count} payment(s)")
    return count


if __name__ == "__main__":
    main()
