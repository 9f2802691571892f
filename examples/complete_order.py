"""The lesson's multi-step job: database first, then each external step under its own key.

Step 1 updates the order in PostgreSQL (durable, the source of truth). Steps 2 and 3 are
an e-mail and a partner API call, each with its own idempotency key (``job.step``). The
e-mail fails on the first attempt: the retry skips the finished steps and reruns the rest.
Run: ``python -m examples.complete_order``.
"""

from __future__ import annotations

import asyncio
import os
from contextlib import suppress

import psycopg

from lockgate import AlreadyProcessed, App, RetryableError, Worker, WorkerConfig, current_job
from lockgate.embedded import redis_url_or_embedded

DSN = os.environ.get("LOCKGATE_PG_DSN", "host=127.0.0.1 dbname=test user=postgres")
app = App(namespace="example-orders")
LOG = "example-orders:log"


@app.task(retries=3, backoff=0.05)
def complete_order(order_id: str) -> None:
    job = current_job()
    log = app.client()
    with psycopg.connect(DSN) as conn, conn.transaction():
        # Step 1: the database, idempotent by its own state (WHERE status != 'completed').
        updated = conn.execute(
            "UPDATE example_orders SET status = 'completed' "
            "WHERE id = %s AND status != 'completed' RETURNING id",
            (order_id,),
        ).fetchone()
        if updated:
            log.rpush(LOG, "db")
    with suppress(AlreadyProcessed), job.step("email"):
        if job.attempt == 1:
            raise RetryableError("SMTP timeout")
        log.rpush(LOG, "email")
    with suppress(AlreadyProcessed), job.step("inventory"):
        log.rpush(LOG, "inventory")


def main(redis_url: str | None = None, order_id: str = "O1") -> list[str]:
    """Complete one order (its e-mail fails once); return the side effects in order."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS example_orders (id text PRIMARY KEY, status text)")
        conn.execute(
            "INSERT INTO example_orders VALUES (%s, 'paid') "
            "ON CONFLICT (id) DO UPDATE SET status = 'paid'",
            (order_id,),
        )
    with redis_url_or_embedded(redis_url) as url:
        app.redis_url = url
        app.client().delete(LOG)
        complete_order.enqueue(order_id)
        asyncio.run(Worker(app, WorkerConfig(concurrency=1)).run(burst=True))
        effects = [item.decode() for item in app.client().lrange(LOG, 0, -1)]
        app.close()
    print(f"side effects: {effects}")
    return effects


if __name__ == "__main__":
    main()
