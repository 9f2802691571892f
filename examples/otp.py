"""OTP: a cooldown that is one atomic SET NX PX, so two racing requests cannot both send.

Run: ``python -m examples.otp``.
"""

from __future__ import annotations

import asyncio

from lockgate import App, Worker, WorkerConfig
from lockgate.embedded import redis_url_or_embedded

app = App(namespace="example-otp")
SENT = "example-otp:sent"


@app.task(priority="critical")
def send_otp(user_id: str) -> None:
    if app.cooldown(f"otp:{user_id}", 60):  # False while the last code is under 60 s old
        app.client().rpush(SENT, user_id)


def main(redis_url: str | None = None) -> list[str]:
    """Five OTP requests from two users arrive together; return who got a code."""
    with redis_url_or_embedded(redis_url) as url:
        app.redis_url = url
        app.client().delete(SENT)
        app.enqueue_many([send_otp.message(user) for user in ("u1", "u1", "u2", "u1", "u2")])
        asyncio.run(Worker(app, WorkerConfig(concurrency=5)).run(burst=True))
        sent = sorted(item.decode() for item in app.client().lrange(SENT, 0, -1))
        app.close()
    print(f"codes sent to: {sent}")
    return sent


if __name__ == "__main__":
    main()
