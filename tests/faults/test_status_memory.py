"""Redis memory per finished job with its status kept: under 100 bytes (a final record
under a key of its own cost about 200 more than the job itself left).

100,000 plain no-op jobs are enqueued and drained by a real worker, on a private server
that nothing else writes to, with the default ``status_ttl`` (10 minutes); ``used_memory``
is compared before the enqueue and after the drain, once it stops moving (client buffers
are not jobs). Every job's status is still readable. ``pytest -s`` prints the bytes per
job.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from conftest import worker_for
from faults.support import PrivateRedis
from lockgate import App

JOBS = 100_000
MAX_BYTES_PER_JOB = 100


def settled_memory(server: PrivateRedis) -> int:
    """``used_memory`` once two readings 0.2 s apart agree within 1 KiB (at most 5 s)."""
    last, deadline = server.used_memory(), time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = server.used_memory()
        if abs(now - last) < 1024:
            return now
        last = now
    return last


# Serial: its 100,000 jobs must drain within one status window (75 s) for the count of
# hashes below; alone they take ~40 s, beside the parallel run over 100 s.
@pytest.mark.serial
@pytest.mark.timeout(180)
async def test_a_finished_job_with_its_status_kept_costs_under_100_bytes(
    private_redis: Callable[..., PrivateRedis], make_app: Callable[..., App]
) -> None:
    server = private_redis()
    app = make_app(redis_url=server.url, namespace=uuid.uuid4().hex)

    @app.task
    def noop() -> None:
        pass

    # The stream, its group and the scripts exist before the measure, as on a live server.
    app.enqueue_many([noop.message() for _ in range(100)])
    await worker_for(app, concurrency=100).run(burst=True)
    before = settled_memory(server)
    ids = [r.job_id for r in app.enqueue_many([noop.message() for _ in range(JOBS)])]
    await worker_for(app, concurrency=100).run(burst=True)
    used = settled_memory(server) - before
    per_job = used / JOBS
    print(f"\n{per_job:.1f} bytes of Redis memory per finished job, status kept "
          f"({JOBS:,} jobs, {used:,} bytes)")  # fmt: skip
    assert per_job < MAX_BYTES_PER_JOB
    assert {app.job(job_id).status for job_id in ids[:: JOBS // 200]} == {"done"}
    buckets = list(server.client.scan_iter(match=app.keys.statuses() + ":*", count=10_000))
    # One hash per window and shard: a window's 4,096, for each window the run spanned
    # (one or two, or more on a machine slow enough that the run outlasts a window).
    windows = int(server.client.zcard(app.keys.statuses()))
    assert 1 <= windows and len(buckets) <= windows * 16**3
    assert {server.client.object("encoding", b) for b in buckets[:200]} == {b"listpack"}
