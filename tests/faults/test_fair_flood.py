"""A key with 100,000 jobs waiting beside keys with a few (issue 25's flood, at full
size): the few start within the first rounds, the flood's jobs are all there, and the
worker's reads stay short; on both backends, on a private server that nothing else
writes to.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from conftest import running, wait_until, worker_for
from faults.support import PrivateRedis
from lockgate import App
from lockgate.ops.inspect import queue_stats

FLOOD = 100_000
FEW = 5


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_a_key_with_100000_jobs_does_not_hold_back_keys_with_a_few(
    private_redis: Callable[..., PrivateRedis], make_app: Callable[..., App], backend: str
) -> None:
    server = private_redis()
    app = make_app(redis_url=server.url, namespace=uuid.uuid4().hex, backend=backend)
    started: list[str] = []

    @app.task(priority="low", key_by="tenant")
    async def report(tenant: str, n: int) -> None:
        started.append(tenant)

    for first in range(0, FLOOD, 5_000):
        app.enqueue_many([report.message("big", n) for n in range(first, first + 5_000)])
    app.enqueue_many([report.message(f"t{k}", n) for k in range(4) for n in range(FEW)])
    worker = worker_for(app, concurrency=8)
    async with running(worker):
        await wait_until(lambda: sum(t != "big" for t in started) == 4 * FEW, timeout=60,
                         message="the few keys' jobs started")  # fmt: skip
    few_at = max(i for i, tenant in enumerate(started) if tenant != "big")
    print(f"\nthe 4 small keys' {4 * FEW} jobs had all started after {few_at + 1} starts")
    # Five keys share the turns: the 20 jobs start within about 5 rounds of 5 (a read's
    # batch blurs a round), not after the flood's 100,000.
    assert few_at < 100, few_at
    # Nothing of the flood went missing: started, or still queued (waiting, or handed out
    # and not acked: the worker stopped with jobs it had read but not started).
    stats = await queue_stats(app)
    queued = sum(row.length for row in stats.levels)
    assert queued + started.count("big") >= FLOOD
