"""Every one of 1,000 jobs sent three times across 2 worker processes runs its effect once.

Each job is sent as itself, again as a duplicate enqueue under a fresh job id, and again as
a forced redelivery: its stored entry added to the stream a second time by hand, bypassing
the enqueue dedup, as a reclaim after a lost ack would. The PostgreSQL side-effect table
must hold each job exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from lockgate import App, codec
from lockgate.embedded import EmbeddedServer
from lockgate.postgres import init_schema

pytestmark = pytest.mark.chaos

DSN = os.environ.get("LOCKGATE_PG_DSN", "host=127.0.0.1 dbname=test user=postgres")
JOBS = 1_000
HERE = Path(__file__).parent


def counts(run: str) -> tuple[int, int]:
    with psycopg.connect(DSN) as conn:
        row = conn.execute(
            "SELECT count(DISTINCT n), count(*) FROM chaos_effects WHERE run = %s", (run,)
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.mark.timeout(180)
def test_thousand_jobs_three_times_each_effect_once(tmp_path: Path) -> None:
    init_schema(DSN)
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS chaos_effects (run text, n int)")
    run, namespace = uuid.uuid4().hex, f"once-{uuid.uuid4().hex[:8]}"
    with EmbeddedServer() as server:
        app = App(redis_url=server.url, namespace=namespace)

        @app.task(priority="critical")
        def pay(n: int) -> None: ...

        originals = [pay.message(n, job_id=f"pay-{n}") for n in range(JOBS)]
        first = app.enqueue_many(originals)
        duplicates = app.enqueue_many([pay.message(n) for n in range(JOBS)])
        client = app.client()
        stream = app.keys.stream("default", "critical")
        with client.pipeline(transaction=False) as pipe:
            for message in originals:
                pipe.xadd(stream, {"job": codec.encode(message.job)})
            pipe.execute()
        sent = sum(r.created for r in first) + sum(r.created for r in duplicates) + JOBS

        env = dict(os.environ, LOCKGATE_REDIS_URL=server.url, CHAOS_NAMESPACE=namespace,
                   CHAOS_RUN=run, CHAOS_DSN=DSN)  # fmt: skip
        command = [sys.executable, "-m", "lockgate", "--log-level", "WARNING", "worker",
                   "chaos_app:app", "--concurrency", "8"]  # fmt: skip
        workers = []
        for i in range(2):
            with (tmp_path / f"worker-{i}.log").open("wb") as log:
                workers.append(subprocess.Popen(command, cwd=HERE, env=env, stdout=log, stderr=log))
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                remaining = client.xlen(stream) + sum(
                    client.zcard(app.keys.delayed("default", level)) for level in app.levels.names
                )
                if remaining == 0:
                    break
                time.sleep(0.1)
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            for worker in workers:
                worker.wait(timeout=30)
        left = client.xlen(stream)
        app.close()

    distinct, recorded = counts(run)
    print(f"\nexactly once: {sent} deliveries sent for {JOBS} jobs; effects {recorded}, "
          f"distinct {distinct}, left in stream {left}")  # fmt: skip
    assert sent == 3 * JOBS
    assert left == 0
    assert (distinct, recorded) == (JOBS, JOBS)
