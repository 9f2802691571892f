"""lockgate on a Sentinel-watched primary: the URL names the Sentinels and the service,
every job runs once, a SIGKILLed primary is followed to the promoted replica, and a
missing service name is one line."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from cluster.ledger import JOBS, build, check, enqueue_jobs, serve_through
from clusters import LocalSentinel, replicated, wait_for
from conftest import worker_for
from lockgate import App, ConfigError


@pytest.fixture(scope="module")
def sentinel() -> Iterator[LocalSentinel]:
    """One primary, one replica, three Sentinels, for the module."""
    with LocalSentinel(replicas=1) as local:
        yield local


async def test_every_job_runs_once_through_the_sentinels(sentinel: LocalSentinel) -> None:
    app = App(sentinel.url, namespace=uuid.uuid4().hex)
    runs: Counter[int] = Counter()

    @app.task(idempotent=True)
    async def job(n: int) -> None:
        runs[n] += 1

    app.enqueue_many([job.message(n) for n in range(50)])
    await job.enqueue_async(50)
    worker = worker_for(app, concurrency=4)
    await asyncio.wait_for(worker.run(burst=True), timeout=60)
    assert runs == Counter(range(51))
    primary = sentinel.primary().client()
    try:  # the jobs went through the primary the Sentinels name
        assert primary.dbsize() > 0
    finally:
        primary.close()
    app.close()
    await app.aclose()


def test_a_sentinel_url_without_a_service_is_one_line(sentinel: LocalSentinel) -> None:
    hosts = sentinel.url.removeprefix("redis+sentinel://").split("/")[0]
    app = App(f"redis+sentinel://:pw@{hosts}", namespace="sentinel-bad")

    @app.task
    def job() -> None: ...

    with pytest.raises(ConfigError) as caught:
        job.enqueue()
    message = str(caught.value)
    assert "names its service" in message and "\n" not in message and "pw@" not in message


@pytest.mark.chaos
async def test_a_sigkilled_primary_is_followed_to_the_promoted_replica(ledger: str) -> None:
    with LocalSentinel(replicas=1) as sentinel:
        app, started = build(sentinel.url, ledger)
        enqueue_jobs(app)
        old = sentinel.primary()
        replica = next(node for node in sentinel.nodes if node is not old)
        wait_for(lambda: replicated(old, replica), "the replica caught up")

        def kill() -> None:
            old.signal(signal.SIGKILL)
            wait_for(lambda: sentinel.primary() is replica, "the Sentinels promoted the replica")

        served = await serve_through(app, ledger, kill, after=JOBS // 4)
    check("Sentinel, SIGKILL of the primary", served, started)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_plain_url_to_a_sentinel_says_to_use_redis_sentinel(
    sentinel: LocalSentinel, kind: str
) -> None:
    """A Sentinel holds no jobs: a redis:// URL to one is a one-line ConfigError naming the
    URL form to use, for producers (sync) and workers (async) alike."""
    url = f"redis://{sentinel.sentinels[0].address}/0?client_name={kind}"
    app = App(url, namespace="sentinel-plain")

    @app.task
    def job() -> None: ...

    with pytest.raises(ConfigError) as caught:
        if kind == "sync":
            job.enqueue()
        else:
            await worker_for(app).run(burst=True)
    message = str(caught.value)
    assert "is a Redis Sentinel" in message and "redis+sentinel://" in message
    assert "\n" not in message
    app.close()
    await app.aclose()
