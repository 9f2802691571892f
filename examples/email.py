"""Confirmation e-mail: a Redis claim around the send, released if the send fails.

The first attempt's SMTP call fails, the claim is released, the retry sends; a duplicate
job for the same order finds the done marker and is acknowledged without sending.
Run: ``python -m examples.email``.
"""

from __future__ import annotations

import asyncio

from lockgate import App, RetryableError, Worker, WorkerConfig, current_job
from lockgate.embedded import redis_url_or_embedded

app = App(namespace="example-email")
OUTBOX = "example-email:outbox"


@app.task(retries=3, backoff=0.05)
def send_confirmation(order_id: str) -> None:
    with app.idempotent(f"email:{order_id}", ttl=86_400):
        if current_job().attempt == 1:
            raise RetryableError("SMTP timeout")  # the claim is released: a retry may send
        app.client().rpush(OUTBOX, f"order {order_id} confirmed")


def main(redis_url: str | None = None, order_id: str = "A1") -> list[str]:
    """Send one confirmation three times over; return the outbox."""
    with redis_url_or_embedded(redis_url) as url:
        app.redis_url = url
        app.client().delete(OUTBOX)
        for _ in range(3):
            send_confirmation.enqueue(order_id)
        asyncio.run(Worker(app, WorkerConfig(concurrency=3)).run(burst=True))
        outbox = [item.decode() for item in app.client().lrange(OUTBOX, 0, -1)]
        app.close()
    print(f"outbox: {outbox}")
    return outbox


if __name__ == "__main__":
    main()
