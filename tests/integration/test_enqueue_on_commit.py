"""``Task.enqueue_on_commit`` with psycopg 3: a job is queued only once its transaction
commits, by the commit watcher, against real PostgreSQL and Redis.

``drain()`` waits until the watcher has decided every pending job (sent or dropped), so
"no job" is asserted after a decision, never after a sleep.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import redis
from psycopg.rows import dict_row

from conftest import WAIT_TIMEOUT, wait_until_sync, worker_for
from lockgate import App, ConfigError, DatabaseError, InvalidArguments, Task
from lockgate.integrations.transactions import APPLICATION_NAME, drain

DSN = os.environ.get("LOCKGATE_PG_DSN", "host=127.0.0.1 dbname=test user=postgres")


def stored(rclient: redis.Redis, app: App, queue: str = "default") -> int:
    """How many jobs of a queue are stored (streams backend), whatever their level."""
    return sum(rclient.xlen(app.keys.stream(queue, level)) for level in app.levels.names)


@pytest.fixture
def connect() -> Iterator[Callable[..., psycopg.Connection[Any]]]:
    """Open connections to the test database; all are closed at teardown (an open
    transaction among them rolls back, so the watcher drops its jobs)."""
    conns: list[psycopg.Connection[Any]] = []

    def factory(**kwargs: Any) -> psycopg.Connection[Any]:
        conn = psycopg.connect(DSN, **kwargs)
        conns.append(conn)
        return conn

    yield factory
    for conn in conns:
        conn.close()
    assert drain(WAIT_TIMEOUT), "the commit watcher kept jobs pending after the test"


@pytest.fixture
def charges(make_app: Callable[..., App]) -> tuple[App, Task[Any, None], list[str]]:
    """An App with a ``charge`` task that records its runs."""
    app = make_app()
    ran: list[str] = []

    @app.task
    def charge(order_id: str, amount: int) -> None:
        ran.append(order_id)

    return app, charge, ran


async def test_a_committed_transaction_queues_its_job_once_and_a_worker_runs_it(
    charges: tuple[App, Task[Any, None], list[str]],
    connect: Callable[..., psycopg.Connection[Any]],
    rclient: redis.Redis,
) -> None:
    app, charge, ran = charges
    conn = connect()
    conn.execute("SELECT 1")  # in a transaction now (psycopg's default)
    job_id = charge.enqueue_on_commit(conn, "A1", 100)
    assert stored(rclient, app) == 0  # not before the commit
    conn.commit()
    assert drain(WAIT_TIMEOUT)
    assert stored(rclient, app) == 1
    assert rclient.exists(app.keys.job(job_id))
    worker = worker_for(app)
    await worker.run(burst=True)
    assert ran == ["A1"]
    assert worker.processed == 1


def test_a_rolled_back_transaction_leaves_no_job(
    charges: tuple[App, Task[Any, None], list[str]],
    connect: Callable[..., psycopg.Connection[Any]],
    rclient: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, charge, _ = charges
    caplog.set_level(logging.DEBUG, logger="lockgate.integrations.transactions")
    conn = connect()
    with pytest.raises(ZeroDivisionError), conn.transaction():
        job_id = charge.enqueue_on_commit(conn, "A1", 100)
        raise ZeroDivisionError  # the payment failed after the enqueue
    assert drain(WAIT_TIMEOUT)
    assert stored(rclient, app) == 0
    assert not rclient.exists(app.keys.job(job_id))
    assert f"job {job_id} of task charge not enqueued: its transaction rolled back" in (
        caplog.messages
    )


def test_a_closed_connection_rolls_back_and_its_job_is_dropped(
    charges: tuple[App, Task[Any, None], list[str]],
    connect: Callable[..., psycopg.Connection[Any]],
    rclient: redis.Redis,
) -> None:
    app, charge, _ = charges
    conn = connect()
    conn.execute("SELECT 1")
    charge.enqueue_on_commit(conn, "A1", 100)
    conn.close()  # never committed
    assert drain(WAIT_TIMEOUT)
    assert stored(rclient, app) == 0


@pytest.mark.parametrize("autocommit", [True, False], ids=["autocommit", "idle"])
def test_outside_a_transaction_the_job_is_queued_at_once(
    charges: tuple[App, Task[Any, None], list[str]],
    connect: Callable[..., psycopg.Connection[Any]],
    rclient: redis.Redis,
    autocommit: bool,
) -> None:
    app, charge, _ = charges
    conn = connect(autocommit=autocommit)
    job_id = charge.enqueue_on_commit(conn, "A1", 100, job_id="pay:A1")
    assert job_id == "pay:A1"
    assert stored(rclient, app) == 1  # already: no watcher involved
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_many_transactions_on_many_connections_queue_exactly_the_committed_jobs(
    charges: tuple[App, Task[Any, None], list[str]],
    connect: Callable[..., psycopg.Connection[Any]],
    rclient: redis.Redis,
) -> None:
    """8 threads, 6 transactions each, on their own connections; every third one rolls
    back; one transaction in each thread enqueues twice. Some use autocommit with an
    explicit transaction block, some a dict row factory."""
    app, charge, _ = charges
    committed: list[str] = []
    rolled_back: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)
    failures: list[BaseException] = []

    def producer(n: int) -> None:
        try:
            conn = connect(autocommit=n % 2 == 0, row_factory=dict_row if n % 3 else None)
            barrier.wait()
            for i in range(6):
                with conn.transaction():
                    ids = [charge.enqueue_on_commit(conn, f"{n}-{i}", i)]
                    if i == 2:
                        ids.append(charge.enqueue_on_commit(conn, f"{n}-{i}b", i))
                    if i % 3 == 1:
                        conn.execute("SELECT 1")
                        with lock:
                            rolled_back.extend(ids)
                        raise psycopg.Rollback  # swallowed by conn.transaction()
                if i % 3 != 1:
                    with lock:
                        committed.extend(ids)
        except BaseException as e:
            failures.append(e)

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_TIMEOUT)
    assert not failures, failures
    assert len(committed) == 8 * 5 and len(rolled_back) == 8 * 2
    assert drain(WAIT_TIMEOUT)
    assert stored(rclient, app) == len(committed)
    assert all(rclient.exists(app.keys.job(job_id)) for job_id in committed)
    assert not any(rclient.exists(app.keys.job(job_id)) for job_id in rolled_back)


def test_the_watcher_survives_losing_its_connection(
    charges: tuple[App, Task[Any, None], list[str]],
    connect: Callable[..., psycopg.Connection[Any]],
    rclient: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its PostgreSQL session is terminated while a transaction is open: it logs, makes
    a new one, and still queues the job once the transaction commits."""
    app, charge, _ = charges
    caplog.set_level(logging.INFO, logger="lockgate.integrations.transactions")
    name = f"{APPLICATION_NAME} (pid {os.getpid()})"
    admin = connect(autocommit=True)

    def watcher_pids() -> list[int]:
        query = "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
        return [row[0] for row in admin.execute(query, (name,)).fetchall()]

    conn = connect()
    conn.execute("SELECT 1")
    job_id = charge.enqueue_on_commit(conn, "A1", 100)
    (old,) = wait_until_sync(watcher_pids, message="the watcher's session")
    admin.execute("SELECT pg_terminate_backend(%s)", (old,))
    wait_until_sync(
        lambda: any("lost PostgreSQL" in m for m in caplog.messages), message="loss logged"
    )
    conn.commit()
    assert drain(WAIT_TIMEOUT)
    assert rclient.exists(app.keys.job(job_id))
    assert stored(rclient, app) == 1
    assert watcher_pids() not in ([], [old])  # a new session
    assert any("reached" in m and "again" in m for m in caplog.messages)


def test_a_send_that_fails_after_the_commit_is_retried(
    charges: tuple[App, Task[Any, None], list[str]],
    connect: Callable[..., psycopg.Connection[Any]],
    rclient: redis.Redis,
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Redis is unreachable when the transaction commits: the send is logged and retried
    in the background, never raised into the caller, and arrives once Redis is back."""
    app, charge, _ = charges
    caplog.set_level(logging.WARNING, logger="lockgate.integrations.transactions")
    conn = connect()
    conn.execute("SELECT 1")
    job_id = charge.enqueue_on_commit(conn, "A1", 100)
    app.redis_url = "redis://127.0.0.1:1/0"  # nothing listens there
    conn.commit()
    wait_until_sync(
        lambda: any("not enqueued yet" in m and job_id in m for m in caplog.messages),
        message="the failed send logged",
    )
    app.redis_url = redis_url
    assert drain(WAIT_TIMEOUT)
    assert rclient.exists(app.keys.job(job_id))
    assert stored(rclient, app) == 1


def test_bad_arguments_and_connections_raise_in_the_caller(
    charges: tuple[App, Task[Any, None], list[str]],
    connect: Callable[..., psycopg.Connection[Any]],
    rclient: redis.Redis,
) -> None:
    app, charge, _ = charges
    conn = connect()
    conn.execute("SELECT 1")
    with pytest.raises(InvalidArguments):
        charge.enqueue_on_commit(conn, "A1")  # amount missing
    with pytest.raises(ConfigError, match=r"psycopg 3 Connection .* or a Django connection"):
        charge.enqueue_on_commit(conn.cursor(), "A1", 100)
    with pytest.raises(ConfigError, match="got str"):
        charge.enqueue_on_commit(DSN, "A1", 100)
    with pytest.raises(psycopg.errors.DivisionByZero):
        conn.execute("SELECT 1 / 0")
    with pytest.raises(DatabaseError, match="current transaction is aborted"):
        charge.enqueue_on_commit(conn, "A1", 100)  # it can only roll back
    conn.rollback()
    assert drain(WAIT_TIMEOUT)
    assert stored(rclient, app) == 0


async def test_an_async_connection_is_refused(
    charges: tuple[App, Task[Any, None], list[str]],
) -> None:
    _, charge, _ = charges
    async with await psycopg.AsyncConnection.connect(DSN) as aconn:
        with pytest.raises(ConfigError, match="not an AsyncConnection"):
            charge.enqueue_on_commit(aconn, "A1", 100)
