"""The example Django project (examples/django_app), driven by Django's test Client against
real PostgreSQL and Redis: ``enqueue_on_commit`` through ``transaction.on_commit``, and
``lockgate.postgres.claim`` with a Django connection.

Django is set up once for this module: the example's App reads its namespace from the
settings at import, so the namespace is this module's own (deleted at the end); every test
gets its own tables (``override_settings``), dropped at its end. Django's database calls
are sync-only, so these tests are sync and run the worker with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import django
import psycopg
import pytest
import redis
from django.db import connection, connections, transaction
from django.test import Client, override_settings

from conftest import (
    WAIT_TIMEOUT,
    delete_namespace,
    running,
    wait_until,
    wait_until_sync,
    worker_for,
)
from lockgate import App, ConfigError, DatabaseError
from lockgate.integrations.outbox import COUNT_SQL, Outbox
from lockgate.integrations.postgres import claim, init_schema, is_claimed
from lockgate.integrations.transactions import drain

ROOT = Path(__file__).resolve().parents[2]
DSN = "host=127.0.0.1 dbname=test user=postgres"


@pytest.fixture(scope="module")
def app(redis_url: str) -> Iterator[App]:
    """The example's App, on the session's Redis and a namespace of this module's own."""
    namespace = uuid.uuid4().hex
    with pytest.MonkeyPatch.context() as path:
        path.syspath_prepend(str(ROOT))  # `examples` (Django imports its urls later)
        with pytest.MonkeyPatch.context() as env:
            env.setenv("DJANGO_SETTINGS_MODULE", "examples.django_app.settings")
            env.setenv("LOCKGATE_TEST_NAMESPACE", namespace)
            django.setup()
            from examples.django_app.jobs import app
        assert app.namespace == namespace, "the example was imported before this module"
        app.redis_url = redis_url
        yield app
        app.close()
        connections.close_all()
        delete_namespace(redis_url, namespace)


@pytest.fixture
def tables(app: App) -> Iterator[dict[str, str]]:
    """The example's tables, named for this test; dropped at its end."""
    from examples.django_app.schema import create_tables

    suffix = uuid.uuid4().hex[:12]
    names = {
        "PAYMENTS_TABLE": f"ex_django_payments_{suffix}",
        "CHARGES_TABLE": f"ex_django_charges_{suffix}",
        "CLAIMS_TABLE": f"lockgate_claims_{suffix}",
    }
    with override_settings(**names):
        create_tables()
        try:
            yield names
        finally:
            assert drain(WAIT_TIMEOUT)
            with connection.cursor() as cursor:
                for table in names.values():
                    cursor.execute(f"DROP TABLE IF EXISTS {table}")
            connections.close_all()


def stored(rclient: redis.Redis, app: App) -> int:
    """Jobs stored in the example's queue, whatever their level."""
    return sum(rclient.xlen(app.keys.stream("default", level)) for level in app.levels.names)


def rows(table: str, order_id: str) -> int:
    from examples.django_app.schema import count

    return count(table, order_id)


def run_worker(app: App) -> int:
    """Run a real worker until nothing is left; how many jobs it processed."""
    worker = worker_for(app)
    asyncio.run(worker.run(burst=True))
    return worker.processed


def test_a_refused_payment_rolls_back_and_leaves_no_job(
    app: App, tables: dict[str, str], rclient: redis.Redis
) -> None:
    order = f"B-{uuid.uuid4().hex[:8]}"
    response = Client().post(f"/orders/{order}/pay", {"amount": 50_000})
    assert response.status_code == 402
    assert stored(rclient, app) == 0  # the enqueue made inside the block went with it
    assert run_worker(app) == 0
    assert rows(tables["PAYMENTS_TABLE"], order) == 0
    assert rows(tables["CHARGES_TABLE"], order) == 0


def test_a_paid_order_is_charged_once_by_a_real_worker(
    app: App, tables: dict[str, str], rclient: redis.Redis
) -> None:
    """Two payments for one order (a double submit): two jobs, one charge (the claim)."""
    order = f"A-{uuid.uuid4().hex[:8]}"
    client = Client()
    first = client.post(f"/orders/{order}/pay", {"amount": 100})
    assert first.status_code == 202
    job_id = first.json()["job_id"]
    # on_commit ran as the atomic block committed, before the view returned.
    assert rclient.exists(app.keys.job(job_id))
    assert client.post(f"/orders/{order}/pay", {"amount": 100}).status_code == 202
    assert stored(rclient, app) == 2
    assert run_worker(app) == 2
    assert rows(tables["PAYMENTS_TABLE"], order) == 2
    assert rows(tables["CHARGES_TABLE"], order) == 1
    assert stored(rclient, app) == 0


def test_claim_with_a_django_connection(app: App, tables: dict[str, str]) -> None:
    table = tables["CLAIMS_TABLE"]
    key = f"test-{uuid.uuid4().hex}"
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        assert claim(connection, key, table=table)
        raise ZeroDivisionError  # the claim rolls back with the work
    assert not is_claimed(connection, key, table=table)
    with transaction.atomic():
        assert claim(connection, key, table=table)
        assert not claim(connection, key, table=table)  # seen in its own transaction
    with transaction.atomic():
        assert not claim(connection, key, table=table)
        assert is_claimed(connection, key, table=table)
    init_schema(connection, table=table)  # idempotent
    missing = f"lockgate_missing_{uuid.uuid4().hex[:12]}"
    where = "at Django database 'default' (test on 127.0.0.1:5432)"
    with pytest.raises(DatabaseError, match=re.escape(f"table '{missing}' does not exist {where}")):
        with transaction.atomic():
            claim(connection, key, table=missing)
    with pytest.raises(ConfigError):
        claim(connection, "", table=table)  # a bad key, refused before any SQL


def test_claim_refuses_a_django_database_that_is_not_postgresql(app: App) -> None:
    from django.db.backends.sqlite3.base import DatabaseWrapper

    sqlite = DatabaseWrapper({"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}, "lite")
    with pytest.raises(ConfigError, match="needs PostgreSQL; Django database 'lite' is sqlite"):
        claim(sqlite, "k")  # refused before any connection is made


def test_a_job_enqueued_in_a_rolled_back_savepoint_is_dropped(
    app: App, tables: dict[str, str], rclient: redis.Redis
) -> None:
    from examples.django_app.jobs import charge

    with transaction.atomic():
        kept = charge.enqueue_on_commit(connection, "kept", 1)
        with pytest.raises(ZeroDivisionError), transaction.atomic():
            dropped = charge.enqueue_on_commit(connection, "dropped", 1)
            raise ZeroDivisionError
    assert rclient.exists(app.keys.job(kept))
    assert not rclient.exists(app.keys.job(dropped))
    assert run_worker(app) == 1


def test_outside_an_atomic_block_the_job_is_queued_at_once(
    app: App, tables: dict[str, str], rclient: redis.Redis
) -> None:
    from examples.django_app.jobs import charge

    job_id = charge.enqueue_on_commit(connection, "now", 1, job_id=f"now-{uuid.uuid4().hex}")
    assert rclient.exists(app.keys.job(job_id))
    assert run_worker(app) == 1


def test_a_send_that_fails_after_the_commit_is_retried_not_raised(
    app: App,
    tables: dict[str, str],
    rclient: redis.Redis,
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Redis is unreachable as the block commits: the view's commit does not fail; the
    send is retried in the background and arrives once Redis is back."""
    from examples.django_app.jobs import charge

    caplog.set_level(logging.WARNING, logger="lockgate.integrations.transactions")
    app.redis_url = "redis://127.0.0.1:1/0"  # nothing listens there
    try:
        with transaction.atomic():
            job_id = charge.enqueue_on_commit(connection, "later", 1)
        wait_until_sync(
            lambda: any("not enqueued yet" in m and job_id in m for m in caplog.messages),
            message="the failed send logged",
        )
    finally:
        app.redis_url = redis_url
    assert drain(WAIT_TIMEOUT)
    assert rclient.exists(app.keys.job(job_id))
    assert run_worker(app) == 1


def test_with_the_outbox_the_atomic_block_writes_the_job_as_a_row(
    app: App, tables: dict[str, str], rclient: redis.Redis
) -> None:
    """``App(outbox=DSN)``: the view's ``enqueue_on_commit`` inside
    ``transaction.atomic()`` inserts the job into the outbox in that block: a refused
    payment (and a rolled-back savepoint) leave no row, a paid order's row commits with
    its payment, and a worker's relay moves it to Redis, where it is charged once."""
    from examples.django_app.jobs import charge

    outbox = Outbox(DSN, f"lockgate_outbox_{uuid.uuid4().hex[:12]}")
    init_schema(connection, table=tables["CLAIMS_TABLE"], outbox_table=outbox.table)

    def waiting() -> int:
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            return int(conn.execute(outbox.sql(COUNT_SQL), (app.namespace,)).fetchone()[0])

    app.outbox = outbox
    try:
        order = f"O-{uuid.uuid4().hex[:8]}"
        assert Client().post(f"/orders/{order}/pay", {"amount": 50_000}).status_code == 402
        with transaction.atomic():
            with pytest.raises(ZeroDivisionError), transaction.atomic():
                charge.enqueue_on_commit(connection, order, 1)
                raise ZeroDivisionError
        assert waiting() == 0
        assert Client().post(f"/orders/{order}/pay", {"amount": 100}).status_code == 202
        assert waiting() == 1  # committed with the payment...
        assert stored(rclient, app) == 0  # ...and not sent by on_commit

        async def relay_and_run() -> None:
            async with running(worker_for(app)):
                await wait_until(lambda: waiting() == 0, message="the row relayed")
                await wait_until(lambda: stored(rclient, app) == 0, message="the job taken")

        asyncio.run(relay_and_run())
        assert rows(tables["CHARGES_TABLE"], order) == 1
    finally:
        app.outbox = None
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {outbox.table}")
