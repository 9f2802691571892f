"""Quickstart: declare tasks, enqueue jobs, run a worker until nothing is left.

Needs a Redis at ``$LOCKGATE_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``).
Run: ``python -m examples.quickstart`` (or ``python quickstart.py``).
"""

import asyncio

from lockgate import App, Worker, WorkerConfig

# Levels, highest first, with their weights (this mapping is also the default).
app = App(namespace="quickstart", levels={"critical": 10, "normal": 5, "low": 1})


@app.task(priority="critical")
def charge(order_id: str, amount: int) -> None:
    """A sync task: the worker runs it in a thread pool."""
    print(f"charged {order_id}: {amount}")


@app.task(priority="low")
async def rollup(day: str) -> None:
    """An async task: the worker runs it on its event loop."""
    await asyncio.sleep(0.01)  # stands in for a query or an HTTP call
    print(f"rolled up {day}")


def main() -> None:
    # Producers (a Django view, a Flask handler, a script) call the sync API.
    rollup.enqueue("2024-01-31")
    first = charge.enqueue("A1", 100, job_id="pay:A1")
    again = charge.enqueue("A1", 100, job_id="pay:A1")  # same id, still queued: a no-op
    print(f"pay:A1 created: {first.created}, again: {again.created}")
    app.enqueue_many([charge.message("A2", 5), charge.message("A3", 7)])  # one round trip

    # A worker in this process, until nothing is queued, delayed or running (burst).
    # One job at a time, so the order shows the priorities: the payments run before
    # the roll-up that was enqueued first.
    asyncio.run(Worker(app, WorkerConfig(concurrency=1)).run(burst=True))
    app.close()


if __name__ == "__main__":
    main()
