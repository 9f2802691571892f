"""Reads claim the jobs of idempotent tasks as they hand them out (no claim round trip).

Both backends' read scripts, through the real consumers: a job of an idempotent task is
claimed with the read's token, one already done or held by another worker says so, a job
of a plain task is not claimed, and a job id with escapes in its JSON is claimed under the
same key the worker would use.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import redis

from lockgate import App
from lockgate.api.idempotency import Claim
from lockgate.backend.broker import Consumer
from lockgate.backend.connections import async_client
from lockgate.backend.keys import Keys
from lockgate.core.config import WorkerConfig
from lockgate.ops.deadletter import list_dead
from lockgate.worker.loop import Worker

LEVELS = {"critical": 10, "normal": 5, "low": 1}
ESCAPED = 'pay "A\\1" \u00e9'  # a quote, a backslash and a non-ASCII letter


def consumer_for(app: App, client: Any) -> Consumer:
    return app.store.consumer(
        client, queues=["default"], name="reader", lease_seconds=30.0,
        claims=app.store.read_claims(["charge"], 30.0, legacy_markers=False),
    )  # fmt: skip


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_a_read_claims_idempotent_jobs_and_reports_done_and_busy_ones(
    make_app: Callable[..., App], rclient: redis.Redis, backend: str
) -> None:
    app = make_app(levels=LEVELS, backend=backend)

    @app.task(idempotent=True)
    def charge() -> None: ...

    @app.task()
    def plain() -> None: ...

    for job_id in ("fresh", "done", "busy", ESCAPED):
        charge.enqueue(job_id=job_id)
    plain.enqueue(job_id="plain")
    with Claim(app, Keys.job_claim_name("charge", "done")):
        pass  # its done marker, as a finished run leaves it
    busy_key = app.keys.claim(Keys.job_claim_name("charge", "busy"))
    rclient.set(busy_key, "c:another-worker", px=20_000)

    client = async_client(app.redis_url)
    try:
        result = await consumer_for(app, client).read(10, [10, 0, 0])
    finally:
        await client.aclose()
    by_id = {d.job_id: d for d in result.deliveries}
    assert set(by_id) == {"fresh", "done", "busy", ESCAPED, "plain"}
    assert by_id["plain"].claim is None
    done, busy = by_id["done"].claim, by_id["busy"].claim
    assert done is not None and done.state == 0
    assert busy is not None and busy.state == -1 and 10 < busy.wait <= 20
    for job_id in ("fresh", ESCAPED):
        claim = by_id[job_id].claim
        assert claim is not None and claim.state == 1
        key = app.keys.claim(Keys.job_claim_name("charge", job_id))
        assert rclient.get(key) == f"c:{claim.token}".encode()
        assert 0 < rclient.pttl(key) <= 30_000
        assert claim.token.endswith(f":{by_id[job_id].ref}")


async def test_a_read_claim_is_let_go_when_the_job_is_dead_lettered_unrun(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    """A sorted job taken once too often is dead-lettered without running: the claim its
    take made goes with it, instead of blocking a replay for the lease."""
    app = make_app(levels=LEVELS, backend="sorted")
    ran: list[str] = []

    @app.task(idempotent=True)
    def charge() -> None:
        ran.append("charge")

    charge.enqueue(job_id="worn")
    rclient.hset(app.keys.sorted_keys("default").deliveries, "worn", 1_000)
    worker = Worker(app, WorkerConfig(concurrency=2, idle_wait=1.0))
    await asyncio.wait_for(worker.run(burst=True), 60)
    assert ran == []
    assert [d.job_id for d in list_dead(app)] == ["worn"]
    assert not rclient.exists(app.keys.claim(Keys.job_claim_name("charge", "worn")))
