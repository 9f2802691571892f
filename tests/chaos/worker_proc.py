"""A worker process for the chaos tests, killed or stopped by them.

Usage: python worker_proc.py URL NAMESPACE BACKEND CONCURRENCY VISIBILITY_TIMEOUT GRACE

Tasks record what they did in Redis under the namespace's ``test`` prefix (see
:func:`record_key`), so the test process can watch them and the namespace cleanup
removes them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time

from lockgate import App, Worker, WorkerConfig, current_job
from lockgate.backend.connections import sync_client


def record_key(namespace: str, name: str) -> str:
    """Where tasks record their progress (inside the namespace's hash tag)."""
    return f"lockgate:{{{namespace}}}:test:{name}"


def build(url: str, namespace: str, backend: str) -> App:
    """The app with the chaos tasks; the test process declares the same names."""
    app = App(redis_url=url, namespace=namespace, backend=backend)  # type: ignore[arg-type]
    results = sync_client(url)  # a cluster client on the cluster run
    # The worker's pid, also in a child it forks to run a job (which dies with it).
    worker = os.getpid()

    @app.task
    def block_once(tag: str) -> None:
        """First run: say it started, then block until killed. Later runs: complete."""
        job_id = current_job().job_id
        runs = results.incr(record_key(namespace, f"runs:{job_id}"))
        if runs == 1:
            results.set(record_key(namespace, f"started:{job_id}"), os.getpid())
            threading.Event().wait()
        results.rpush(record_key(namespace, "completed"), job_id)

    @app.task
    def work(ms: int) -> None:
        """Take ``ms`` milliseconds, then record the job as done."""
        time.sleep(ms / 1000)
        job_id = current_job().job_id
        results.hincrby(record_key(namespace, "runs"), job_id, 1)
        results.sadd(record_key(namespace, "done"), job_id)

    @app.task(debounce=0.05)
    def debounced(n: int) -> None:
        """The job's first run says it started and blocks until killed; each later
        run records its argument."""
        job_id = current_job().job_id
        if results.incr(record_key(namespace, f"runs:{job_id}")) == 1:
            results.set(record_key(namespace, f"started:{job_id}"), os.getpid())
            threading.Event().wait()
        results.rpush(record_key(namespace, "completed"), n)

    @app.task(key_by="tenant", key_concurrency=2)
    def limited(tenant: str, ms: int) -> None:
        """Take ``ms`` milliseconds with a slot of ``tenant``; the ledger says when,
        and in which worker."""
        job_id = current_job().job_id
        ledger, pid = record_key(namespace, "ledger"), worker
        results.rpush(ledger, f"start {tenant} {job_id} {time.time()} {pid}")
        time.sleep(ms / 1000)
        results.rpush(ledger, f"end {tenant} {job_id} {time.time()} {pid}")
        results.hincrby(record_key(namespace, "runs"), job_id, 1)

    return app


async def main(argv: list[str]) -> None:
    url, namespace, backend, concurrency, visibility, grace = argv
    app = build(url, namespace, backend)
    config = WorkerConfig(
        concurrency=int(concurrency),
        visibility_timeout=float(visibility),
        grace_period=float(grace),
        idle_wait=1.0,
    )
    await Worker(app, config).run(install_signal_handlers=True)
    app.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(main(sys.argv[1:]))
