"""View counter: an increment guarded by the request id, so a retry does not count twice.

Run: ``python -m examples.view_counter``.
"""

from __future__ import annotations

import asyncio

from lockgate import App, RetryableError, Worker, WorkerConfig, current_job
from lockgate.embedded import redis_url_or_embedded

app = App(namespace="example-views")


@app.task(priority="low", retries=2, backoff=0.05)
def track_view(article_id: str, request_id: str) -> None:
    app.incr_once(f"views:{article_id}", request_id)
    if current_job().attempt == 1 and request_id.endswith("flaky"):
        raise RetryableError("analytics sink timed out after counting")  # retried: no +2


def main(redis_url: str | None = None) -> int:
    """Four distinct requests, one sent twice, one retried; return the count."""
    requests = ["r1", "r2", "r2", "r3-flaky", "r4"]
    with redis_url_or_embedded(redis_url) as url:
        app.redis_url = url
        app.client().delete(app.keys.counter("views:A1"))
        app.enqueue_many([track_view.message("A1", request) for request in requests])
        asyncio.run(Worker(app, WorkerConfig(concurrency=2)).run(burst=True))
        views = app.counter("views:A1")
        app.close()
    print(f"article A1: {views} views")
    return views


if __name__ == "__main__":
    main()
