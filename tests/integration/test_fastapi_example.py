"""The example FastAPI app (examples/fastapi_app.py) through FastAPI's TestClient, against
real PostgreSQL and Redis: the lifespan sets up and cleans up, the endpoint enqueues in
its own transaction and returns the job's id, and a real worker runs the job.

The example reads its namespace and table at import, so both are this module's own: the
namespace is deleted and the table dropped at the end, with the claim rows it left.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import psycopg
import pytest
import redis
from fastapi.testclient import TestClient
from psycopg import sql

from conftest import WAIT_TIMEOUT, delete_namespace, worker_for
from lockgate import App
from lockgate.integrations.postgres import TABLE as CLAIMS
from lockgate.integrations.transactions import drain

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def example(redis_url: str) -> Iterator[ModuleType]:
    """The example module, imported with this module's namespace and table."""
    namespace, table = uuid.uuid4().hex, f"ex_fastapi_payments_{uuid.uuid4().hex[:12]}"
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(ROOT))
        patch.setenv("LOCKGATE_TEST_NAMESPACE", namespace)
        patch.setenv("EXAMPLE_FASTAPI_TABLE", table)
        import examples.fastapi_app as example
    assert (example.app.namespace, example.PAYMENTS) == (namespace, table), "imported before"
    example.app.redis_url = redis_url
    yield example
    example.app.close()
    delete_namespace(redis_url, namespace)
    with psycopg.connect(example.DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE key LIKE %s").format(sql.Identifier(CLAIMS)),
            (f"fastapi-charge:{table}:%",),
        )


def stored(rclient: redis.Redis, app: App) -> int:
    """Jobs stored in the example's queue, whatever their level."""
    return sum(rclient.xlen(app.keys.stream("default", level)) for level in app.levels.names)


def payment(example: ModuleType, column: str, where: str, value: object) -> int:
    query = sql.SQL("SELECT {} FROM {} WHERE {} = %s").format(
        sql.SQL(column), sql.Identifier(example.PAYMENTS), sql.Identifier(where)
    )
    with psycopg.connect(example.DSN) as conn:
        rows = conn.execute(query, (value,)).fetchall()
    return int(rows[0][0]) if rows else 0


def test_the_lifespan_opens_and_closes_the_pool(example: ModuleType) -> None:
    with TestClient(example.api) as client:
        pool = client.app_state["pool"]
        assert not pool.closed
        assert payment(example, "count(*)", "order_id", "none") == 0  # the table exists
    assert pool.closed


def test_the_endpoint_enqueues_and_a_worker_runs_the_job_once(
    example: ModuleType, rclient: redis.Redis
) -> None:
    app: App = example.app
    order = f"A-{uuid.uuid4().hex[:8]}"
    with TestClient(example.api) as client:
        response = client.post(f"/orders/{order}/payments", params={"amount": 100})
        assert response.status_code == 202
        body = response.json()
        # Sent by the commit watcher a few ms after the request's transaction committed.
        assert drain(WAIT_TIMEOUT)
        assert rclient.exists(app.keys.job(body["job_id"]))
        assert stored(rclient, app) == 1
    worker = worker_for(app)
    asyncio.run(worker.run(burst=True))  # its startup hook opens the worker's own pool
    assert worker.processed == 1
    assert payment(example, "charged", "id", body["payment_id"]) == 1
    assert stored(rclient, app) == 0


def test_a_refused_payment_leaves_no_row_and_no_job(
    example: ModuleType, rclient: redis.Redis
) -> None:
    order = f"B-{uuid.uuid4().hex[:8]}"
    with TestClient(example.api) as client:
        response = client.post(f"/orders/{order}/payments", params={"amount": 50_000})
    assert response.status_code == 402
    assert drain(WAIT_TIMEOUT)  # the watcher saw the rollback
    assert stored(rclient, example.app) == 0
    assert payment(example, "count(*)", "order_id", order) == 0
