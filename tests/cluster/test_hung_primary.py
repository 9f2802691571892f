"""A primary that hangs (SIGSTOP: its sockets stay open, it answers nothing) under a
running worker, on a Redis Cluster and behind Sentinels: its replica is promoted, and the
worker resumes work within seconds of the promotion, losing and doubling nothing.

Issue 22, defect 3: the worker's client had no socket timeout, so its calls to the
stopped primary waited for it (TCP keepalive never fires against a stopped process): the
worker ran nothing from the promotion until SIGCONT, 36 s in the report. Each test keeps
the old primary stopped until every job's effect is in (or the bound passes), and prints
the stall from the promotion to the next effect.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable

import pytest

from cluster.ledger import JOBS, build, check, effects, enqueue_jobs
from cluster.test_cluster_faults import owner_of, struck
from clusters import LocalCluster, LocalSentinel, Node, replicated, wait_for
from conftest import wait_until
from lockgate import App, Worker, WorkerConfig

pytestmark = pytest.mark.chaos

# A loose bound against a stall that lasts as long as the hang; the figures are printed.
RESUME_BOUND = 30.0


def send(node: Node, signum: signal.Signals) -> None:
    """Send a signal that does not end the process (Node.signal waits for its end)."""
    assert node.process is not None
    node.process.send_signal(signum)


def is_primary(node: Node) -> bool:
    client = node.client()
    try:
        return bool(client.info("replication")["role"] == "master")
    finally:
        client.close()


async def serve_through_hang(
    app: App, run: str, old: Node, promoted: Callable[[], bool]
) -> tuple[int, int, float]:
    """Serve JOBS jobs; SIGSTOP ``old`` once a quarter ran, wait for ``promoted``, and keep
    ``old`` stopped until every effect is in. (jobs with an effect, rows, the stall from
    the promotion to the next effect in s)."""
    worker = Worker(app, WorkerConfig(concurrency=8, visibility_timeout=5.0))
    serving = asyncio.create_task(worker.run())

    def serving_effects() -> int:
        assert not serving.done(), f"the worker exited: {serving}"
        return effects(run)[0]

    try:
        await wait_until(lambda: serving_effects() >= JOBS // 4, message="jobs before the hang")
        send(old, signal.SIGSTOP)
        stopped_at = time.monotonic()
        await asyncio.to_thread(wait_for, promoted, "a promotion of the replica")
        promoted_at = time.monotonic()
        seen = serving_effects()
        await wait_until(
            lambda: serving_effects() > seen, RESUME_BOUND, "an effect after the promotion"
        )
        stall = time.monotonic() - promoted_at
        print(
            f"promoted {promoted_at - stopped_at:.2f} s after SIGSTOP; the worker resumed "
            f"{stall:.2f} s after the promotion"
        )
        await wait_until(lambda: serving_effects() >= JOBS, 120, "every job's effect")
    finally:
        send(old, signal.SIGCONT)
        worker.request_stop()
        await asyncio.wait_for(serving, 60)
        await app.aclose()
        app.close()
    done, rows = effects(run)
    return done, rows, stall


async def test_a_hung_cluster_primary_is_left_for_its_promoted_replica(ledger: str) -> None:
    with LocalCluster(primaries=3, replicas=1) as cluster:
        app, started = build(cluster.seeds, ledger)
        primary, replica = owner_of(cluster, struck(app))
        enqueue_jobs(app)
        wait_for(lambda: replicated(primary, replica), "the replica caught up")
        served = await serve_through_hang(app, ledger, primary, lambda: is_primary(replica))
    check("Cluster, SIGSTOP of the primary", served, started)


async def test_a_hung_sentinel_primary_is_left_for_its_promoted_replica(ledger: str) -> None:
    with LocalSentinel(replicas=1) as sentinel:
        app, started = build(sentinel.url, ledger)
        enqueue_jobs(app)
        old = sentinel.primary()
        replica = next(node for node in sentinel.nodes if node is not old)
        wait_for(lambda: replicated(old, replica), "the replica caught up")
        served = await serve_through_hang(
            app, ledger, old, lambda: is_primary(replica) and sentinel.primary() is replica
        )
    check("Sentinel, SIGSTOP of the primary", served, started)
