"""Every one of 1,000 jobs sent three times across 2 worker processes runs its effect once.

Each job is sent as itself, again as a duplicate enqueue under a fresh job id, and again as
a forced redelivery: its stored entry added to the stream a second time by hand, bypassing
the enqueue dedup, as a reclaim after a lost ack would. The PostgreSQL side-effect table
must hold each job exactly once.

It runs twice: on one embedded server with one partition, and on a local Redis Cluster of
3 primaries with ``partitions=4`` (the workers learn the count from
``LOCKGATE_TEST_PARTITIONS``), where the jobs, their forced redeliveries and their claims
are spread over the three primaries.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from clusters import LocalCluster
from lockgate import App
from lockgate.core import codec
from lockgate.integrations.embedded import EmbeddedServer
from lockgate.integrations.postgres import init_schema

pytestmark = pytest.mark.chaos

DSN = os.environ.get("LOCKGATE_PG_DSN", "host=127.0.0.1 dbname=test user=postgres")
JOBS = 1_000
HERE = Path(__file__).parent
PARTITIONS_ENV = "LOCKGATE_TEST_PARTITIONS"  # read by chaos_app
# (where, partitions): one embedded server, and a 3-primary cluster (no replicas: no
# failover happens here, and the partitions' slots spread over the primaries either way).
WHERE = [
    pytest.param("single", 1, id="single-p1"),
    pytest.param("cluster", 4, id="cluster-p4"),
]


def counts(run: str) -> tuple[int, int]:
    with psycopg.connect(DSN) as conn:
        row = conn.execute(
            "SELECT count(DISTINCT n), count(*) FROM chaos_effects WHERE run = %s", (run,)
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@contextlib.contextmanager
def redis_at(where: str) -> Iterator[str]:
    """The URL of a private Redis for the test: an embedded server or a cluster's seeds."""
    if where == "cluster":
        with LocalCluster(primaries=3, replicas=0) as cluster:
            yield cluster.seeds
    else:
        with EmbeddedServer() as server:
            yield server.url


@pytest.mark.parametrize(("where", "partitions"), WHERE)
@pytest.mark.timeout(180)
def test_thousand_jobs_three_times_each_effect_once(
    tmp_path: Path, where: str, partitions: int
) -> None:
    init_schema(DSN)
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS chaos_effects (run text, n int)")
    run, namespace = uuid.uuid4().hex, f"once-{uuid.uuid4().hex[:8]}"
    with redis_at(where) as url:
        app = App(redis_url=url, namespace=namespace, partitions=partitions)

        @app.task(priority="critical")
        def pay(n: int) -> None: ...

        originals = [pay.message(n, job_id=f"pay-{n}") for n in range(JOBS)]
        first = app.enqueue_many(originals)
        duplicates = app.enqueue_many([pay.message(n) for n in range(JOBS)])
        client = app.client()
        layout = app.store.layout
        redelivered = [layout.for_job(m.job.id).stream("default", "critical") for m in originals]
        assert len(set(redelivered)) == partitions  # every partition gets its share
        with client.pipeline(transaction=False) as pipe:
            for message, stream in zip(originals, redelivered, strict=True):
                pipe.xadd(stream, {"job": codec.encode(message.job)})  # the job's partition
            pipe.execute()
        sent = sum(r.created for r in first) + sum(r.created for r in duplicates) + JOBS
        streams = [keys.stream("default", "critical") for keys in layout.parts]
        delayed = [
            keys.delayed("default", level) for keys in layout.parts for level in app.levels.names
        ]

        def left() -> tuple[int, int]:
            """(entries in the streams, jobs in the delayed sets) over every partition."""
            return sum(map(client.xlen, streams)), sum(map(client.zcard, delayed))

        env = dict(os.environ, LOCKGATE_REDIS_URL=url, CHAOS_NAMESPACE=namespace,
                   CHAOS_RUN=run, CHAOS_DSN=DSN, **{PARTITIONS_ENV: str(partitions)})  # fmt: skip
        command = [sys.executable, "-m", "lockgate", "--log-level", "WARNING", "worker",
                   "chaos_app:app", "--concurrency", "8"]  # fmt: skip
        workers = []
        started = time.monotonic()
        for i in range(2):
            with (tmp_path / f"worker-{i}.log").open("wb") as log:
                workers.append(subprocess.Popen(command, cwd=HERE, env=env, stdout=log, stderr=log))
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and sum(left()) > 0:
                time.sleep(0.1)
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            for worker in workers:
                worker.wait(timeout=30)
        elapsed = time.monotonic() - started
        in_streams, in_delayed = left()
        app.close()

    distinct, recorded = counts(run)
    print(f"\nexactly once ({where}, partitions={partitions}): {sent} deliveries sent for "
          f"{JOBS} jobs, drained in {elapsed:.1f}s; effects {recorded}, distinct {distinct}, "
          f"left in streams {in_streams}, delayed {in_delayed}")  # fmt: skip
    assert sent == 3 * JOBS
    assert (in_streams, in_delayed) == (0, 0)
    assert (distinct, recorded) == (JOBS, JOBS)
