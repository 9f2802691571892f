"""The durable outbox (``App(outbox=DSN)``) against real PostgreSQL and Redis: the job is
a row of the caller's transaction, and a worker's relay moves it to Redis once.

Each test has an outbox table of its own (dropped at its end), so tests never see each
other's rows; relays wait for rows with ``wait_until``, never with sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import redis
from click.testing import CliRunner
from psycopg import sql

import conftest
from conftest import WAIT_TIMEOUT, running, wait_until, worker_for
from lockgate import App, ConfigError, DatabaseError, Task
from lockgate.cli.main import main
from lockgate.integrations.embedded import EmbeddedServer
from lockgate.integrations.outbox import COUNT_SQL, Outbox
from lockgate.integrations.postgres import init_schema
from lockgate.integrations.transactions import drain
from lockgate.worker.relay import Relay

DSN = "host=127.0.0.1 dbname=test user=postgres"


def execute(query: Any, params: Any = None) -> list[Any]:
    """Run one statement on a connection of its own (autocommit); its rows, if any."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description is not None else []


def rows(outbox: Outbox, namespace: str) -> int:
    """Committed rows of a namespace in the outbox (as another connection sees them)."""
    return int(execute(outbox.sql(COUNT_SQL), (namespace,))[0][0])


def table_exists(name: str) -> bool:
    return bool(execute("SELECT to_regclass(%s) IS NOT NULL", (name,))[0][0])


@pytest.fixture
def outbox() -> Iterator[Outbox]:
    """An outbox table of this test's own, made by ``init_schema``; dropped at the end."""
    box = Outbox(DSN, table=f"lockgate_outbox_{uuid.uuid4().hex[:12]}")
    init_schema(DSN, outbox_table=box.table)
    yield box
    execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(box.table)))


@pytest.fixture
def charges(make_app: Callable[..., App], outbox: Outbox) -> tuple[App, Task[Any, None], list[str]]:
    """An App with the outbox and a ``charge`` task that records its runs."""
    app = make_app(outbox=outbox)
    ran: list[str] = []

    @app.task
    async def charge(order_id: str) -> None:
        ran.append(order_id)

    return app, charge, ran


def stored(rclient: redis.Redis, app: App) -> int:
    """Jobs stored in the default queue (streams backend), whatever their level."""
    return sum(rclient.xlen(app.keys.stream("default", level)) for level in app.levels.names)


def test_pg_init_creates_the_outbox_table_and_is_safe_to_run_again() -> None:
    name = f"lockgate_outbox_{uuid.uuid4().hex[:12]}"
    try:
        for _ in range(2):
            result = CliRunner().invoke(
                main, ["pg", "init", "--dsn", DSN, "--outbox-table", name], catch_exceptions=False
            )
            assert result.exit_code == 0, result.output
            assert f"table {name} ready" in result.stdout
        assert table_exists(name)
    finally:
        execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))


def test_a_rollback_leaves_no_row_and_no_job(
    charges: tuple[App, Task[Any, None], list[str]], outbox: Outbox, rclient: redis.Redis
) -> None:
    app, charge, _ = charges
    with psycopg.connect(DSN) as conn:
        conn.execute("SELECT 1")  # in a transaction
        charge.enqueue_on_commit(conn, "A1")
        assert rows(outbox, app.namespace) == 0  # not visible before the commit
        conn.rollback()
    assert rows(outbox, app.namespace) == 0
    assert drain(WAIT_TIMEOUT)  # the commit watcher was not involved either
    assert stored(rclient, app) == 0


async def test_a_commit_writes_the_row_in_the_transaction_and_a_worker_relays_it_once(
    charges: tuple[App, Task[Any, None], list[str]], outbox: Outbox, rclient: redis.Redis
) -> None:
    app, charge, ran = charges
    with psycopg.connect(DSN) as conn:
        conn.execute("SELECT 1")
        job_id = charge.enqueue_on_commit(conn, "A1")
        assert rows(outbox, app.namespace) == 0
        conn.commit()
    assert rows(outbox, app.namespace) == 1
    assert stored(rclient, app) == 0  # in PostgreSQL, not yet in Redis
    async with running(worker_for(app)):
        await wait_until(lambda: ran == ["A1"], message="the relayed job ran")
        await wait_until(lambda: rows(outbox, app.namespace) == 0, message="its row deleted")
    assert ran == ["A1"]
    assert app.job(job_id).status == "done"
    assert not rclient.keys(f"*relayed:{job_id}*")  # the once-only key went with the row


def test_outside_a_transaction_the_row_is_committed_at_once(
    charges: tuple[App, Task[Any, None], list[str]], outbox: Outbox
) -> None:
    app, charge, _ = charges
    with psycopg.connect(DSN, autocommit=True) as conn:
        charge.enqueue_on_commit(conn, "auto")
    with psycopg.connect(DSN) as conn:  # idle, not autocommit: its own short transaction
        charge.enqueue_on_commit(conn, "idle")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert rows(outbox, app.namespace) == 2


async def test_an_async_connection_writes_in_its_transaction(
    charges: tuple[App, Task[Any, None], list[str]], outbox: Outbox
) -> None:
    app, charge, ran = charges
    async with await psycopg.AsyncConnection.connect(DSN) as conn:
        await conn.execute("SELECT 1")
        await charge.enqueue_on_commit_async(conn, "rolled back")
        await conn.rollback()
        assert rows(outbox, app.namespace) == 0
        async with conn.transaction():
            await charge.enqueue_on_commit_async(conn, "committed")
            assert rows(outbox, app.namespace) == 0
        assert rows(outbox, app.namespace) == 1
        with pytest.raises(ConfigError, match="enqueue_on_commit_async"):
            charge.enqueue_on_commit(conn, "sync call")
    async with running(worker_for(app)):
        await wait_until(lambda: ran == ["committed"], message="the relayed job ran")


async def test_an_async_connection_without_an_outbox_is_refused(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    @app.task
    def charge(order_id: str) -> None: ...

    async with await psycopg.AsyncConnection.connect(DSN) as conn:
        with pytest.raises(ConfigError, match=r"App\(outbox=DSN\)"):
            await charge.enqueue_on_commit_async(conn, "A1")


def test_without_an_outbox_nothing_needs_the_table(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    """Opt-in: an App without ``outbox=`` never touches an outbox table (none exists for
    its namespace here), and sends after the commit as before."""
    app = make_app()

    @app.task
    def charge(order_id: str) -> None: ...

    with psycopg.connect(DSN) as conn:
        conn.execute("SELECT 1")
        charge.enqueue_on_commit(conn, "A1")
        conn.commit()
    assert drain(WAIT_TIMEOUT)
    assert stored(rclient, app) == 1


def test_a_missing_outbox_table_is_one_clear_error(make_app: Callable[..., App]) -> None:
    app = make_app(outbox=Outbox(DSN, table=f"missing_{uuid.uuid4().hex[:12]}"))

    @app.task
    def charge(order_id: str) -> None: ...

    with psycopg.connect(DSN) as conn, pytest.raises(DatabaseError) as caught:
        charge.enqueue_on_commit(conn, "A1")
    assert "does not exist" in str(caught.value)
    assert "lockgate pg init" in str(caught.value)


def test_a_bad_outbox_option_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="outbox"):
        App(outbox="")
    with pytest.raises(ConfigError, match="not a PostgreSQL DSN"):
        App(outbox="host=127.0.0.1 nonsense")


async def test_two_relays_racing_make_one_job_per_row(
    charges: tuple[App, Task[Any, None], list[str]], outbox: Outbox, rclient: redis.Redis
) -> None:
    app, charge, _ = charges
    with psycopg.connect(DSN) as conn:
        for n in range(300):
            charge.enqueue_on_commit(conn, f"order-{n}")
        conn.commit()
    first, second = (Relay(app, outbox, batch=7) for _ in range(2))

    async def relay(one: Relay) -> None:
        while await one.relay_once():
            pass

    try:
        await asyncio.gather(relay(first), relay(second))
    finally:
        for one in (first, second):
            await one._close()
    assert rows(outbox, app.namespace) == 0
    assert first.relayed > 0 and second.relayed > 0  # both took rows
    assert first.relayed + second.relayed == 300
    assert stored(rclient, app) == 300


async def test_a_relay_whose_delete_rolled_back_makes_no_second_job(
    charges: tuple[App, Task[Any, None], list[str]], outbox: Outbox, rclient: redis.Redis
) -> None:
    """The relay enqueued, then its DELETE failed (PostgreSQL refused it: a trigger) and the
    transaction rolled back: the rows stay. The jobs even ran and ended before the next
    pass (their ids are free again): only the once-only keys stop a second job."""
    app, charge, ran = charges
    with deletes_refused(outbox) as allow_deletes:
        with psycopg.connect(DSN) as conn:
            for n in range(5):
                charge.enqueue_on_commit(conn, f"order-{n}")
            conn.commit()
        relay = Relay(app, outbox)
        with pytest.raises(psycopg.Error, match="delete refused"):
            await relay.relay_once()
        await relay._close()
        assert rows(outbox, app.namespace) == 5  # rolled back
        assert stored(rclient, app) == 5  # ...after the enqueue
        app.outbox = None  # a worker without a relay: the rows' delete still fails
        async with running(worker_for(app)):
            await wait_until(lambda: len(ran) == 5, message="the first jobs ran")
        app.outbox = outbox
        allow_deletes()
        assert relay.relayed == 5
        assert await relay.relay_once() == 5  # the same rows, taken again...
        await relay._close()
        assert relay.relayed == 5  # ...and no job made
        assert rows(outbox, app.namespace) == 0
        assert stored(rclient, app) == 0
    assert sorted(ran) == [f"order-{n}" for n in range(5)]


@contextlib.contextmanager
def deletes_refused(outbox: Outbox) -> Iterator[Callable[[], None]]:
    """PostgreSQL refuses every DELETE from the outbox (a trigger) until the function
    yielded is called: a relay's DELETE fails after its enqueue, and its rows stay."""
    table = sql.Identifier(outbox.table)
    function = sql.Identifier(f"{outbox.table}_refuse")
    execute(sql.SQL(
        "CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'delete refused'; END $$"
    ).format(function))  # fmt: skip
    execute(sql.SQL("CREATE TRIGGER refuse BEFORE DELETE ON {} EXECUTE FUNCTION {}()").format(
        table, function
    ))  # fmt: skip
    try:
        yield lambda: execute(sql.SQL("DROP TRIGGER refuse ON {}").format(table))
    finally:
        execute(sql.SQL("DROP FUNCTION IF EXISTS {}() CASCADE").format(function))


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_a_debounced_job_relayed_again_runs_once(
    make_app: Callable[..., App], outbox: Outbox, backend: str
) -> None:
    """A debounced task's enqueue goes its own way in the enqueue scripts: a row relayed
    again (its DELETE rolled back after the enqueue) still meets its once-only key, so
    neither a job still waiting nor one that ended gets a second run."""
    app = make_app(outbox=outbox, backend=backend)
    ran: list[str] = []

    @app.task(debounce=0.05)
    async def reindex(shop: str) -> None:
        ran.append(shop)

    with deletes_refused(outbox) as allow_deletes:
        with psycopg.connect(DSN) as conn:
            reindex.using(job_id="reindex-s1").enqueue_on_commit(conn, "s1")
            conn.commit()
        relay = Relay(app, outbox)
        with pytest.raises(psycopg.Error, match="delete refused"):
            await relay.relay_once()
        await relay._close()
        app.outbox = None
        async with running(worker_for(app)):
            await wait_until(lambda: ran == ["s1"], message="the first run")
        app.outbox = outbox
        allow_deletes()
        assert await relay.relay_once() == 1  # the row, taken again...
        await relay._close()
    assert rows(outbox, app.namespace) == 0
    app.outbox = None
    await conftest.drain(app)  # a burst worker: whatever is queued runs
    assert ran == ["s1"]  # ...and no second run


async def test_the_relay_waits_out_a_redis_outage_and_logs_it_once(
    make_app: Callable[..., App], outbox: Outbox, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="lockgate.worker.relay")
    with EmbeddedServer() as server:
        app = make_app(redis_url=server.url, outbox=outbox)
        ran: list[int] = []

        @app.task
        async def work(n: int) -> None:
            ran.append(n)

        server.kill()
        relay = Relay(app, outbox, poll=0.05)
        relaying = asyncio.create_task(relay.run())
        try:
            with psycopg.connect(DSN, autocommit=True) as conn:
                for n in range(3):
                    work.enqueue_on_commit(conn, n)
            await wait_until(lambda: relay._failures >= 3, message="three failed passes")
            assert rows(outbox, app.namespace) == 3  # waiting in PostgreSQL
            server.start()
            await wait_until(lambda: rows(outbox, app.namespace) == 0, message="relayed after")
        finally:
            relay.stop.set()
            await asyncio.wait_for(relaying, WAIT_TIMEOUT)
        async with running(worker_for(app)):
            await wait_until(lambda: sorted(ran) == [0, 1, 2], message="the jobs ran")
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "Redis failed" in warned[0].getMessage()
    assert sum("works again" in r.getMessage() for r in caplog.records) == 1


async def test_the_relay_logs_an_unreachable_postgresql_or_a_missing_table_once(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="lockgate.worker.relay")
    for outbox, says in (
        (Outbox("host=127.0.0.1 port=1 dbname=test user=postgres"), "PostgreSQL failed"),
        (Outbox(DSN, table=f"missing_{uuid.uuid4().hex[:12]}"), "lockgate pg init"),
    ):
        caplog.clear()
        relay = Relay(make_app(outbox=outbox), outbox)
        relaying = asyncio.create_task(relay.run())
        await wait_until(lambda r=relay: r._failures >= 3, message="three failed tries")
        relay.stop.set()
        await asyncio.wait_for(relaying, WAIT_TIMEOUT)
        assert len(caplog.records) == 1, caplog.messages
        assert says in caplog.messages[0]


async def test_a_delay_counts_from_the_insert_and_a_row_that_is_no_job_is_dropped(
    charges: tuple[App, Task[Any, None], list[str]],
    outbox: Outbox,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, charge, _ = charges
    with psycopg.connect(DSN, autocommit=True) as conn:
        later = charge.enqueue_on_commit(conn, "later", delay=3600)
        conn.execute(
            outbox.sql("INSERT INTO {} (namespace, queue, job) VALUES (%s, 'default', %s)"),
            (app.namespace, b"not a job"),
        )
        now = charge.enqueue_on_commit(conn, "now")
    relay = Relay(app, outbox)
    try:
        assert await relay.relay_once() == 3
    finally:
        await relay._close()
    assert relay.relayed == 2
    assert rows(outbox, app.namespace) == 0
    assert app.job(later).status == "delayed"
    assert app.job(now).status == "waiting"
    assert any("is no job: deleted" in m for m in caplog.messages)


def test_inside_eager_the_job_runs_inline_not_through_the_outbox(
    charges: tuple[App, Task[Any, None], list[str]], outbox: Outbox
) -> None:
    app, charge, ran = charges
    with app.eager(), psycopg.connect(DSN, autocommit=True) as conn:
        charge.enqueue_on_commit(conn, "inline")
    assert ran == ["inline"]
    assert rows(outbox, app.namespace) == 0


@pytest.mark.parametrize("options", [{"backend": "sorted"}, {"partitions": 4}])
async def test_the_relay_enqueues_on_every_backend_and_layout(
    make_app: Callable[..., App], outbox: Outbox, options: dict[str, Any]
) -> None:
    app = make_app(outbox=outbox, **options)
    ran: list[int] = []

    @app.task
    async def work(n: int) -> None:
        ran.append(n)

    with psycopg.connect(DSN, autocommit=True) as conn:
        for n in range(20):
            work.enqueue_on_commit(conn, n)
    async with running(worker_for(app)):
        await wait_until(lambda: sorted(ran) == list(range(20)), message="the relayed jobs ran")
    assert rows(outbox, app.namespace) == 0
