"""PostgreSQL as the source of truth: claim(), its transactions and races, ``pg init``, and
the combined mode ``app.idempotent(key, conn=conn)`` (Redis first, PostgreSQL decides).

Every test uses its own keys; tests of ``claim()`` use their own table, dropped at
teardown. The combined mode uses the library's default table, where only this test's rows
are deleted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import redis
from click.testing import CliRunner
from psycopg import sql

from conftest import wait_until_sync
from lockgate import AlreadyProcessed, App, ClaimBusy, ConfigError, DatabaseError
from lockgate.cli import main
from lockgate.integrations.postgres import TABLE, claim, claim_async, init_schema, is_claimed

DSN = os.environ.get("LOCKGATE_PG_DSN", "host=127.0.0.1 dbname=test user=postgres")
UNREACHABLE_DSN = "host=127.0.0.1 port=1 dbname=test user=postgres connect_timeout=5"


def drop(table: str) -> None:
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))


def table_exists(table: str) -> bool:
    with psycopg.connect(DSN, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f'"{table}"',)).fetchone()
    return bool(row and row[0])


@pytest.fixture
def table() -> Iterator[str]:
    """A claims table of this test's own."""
    name = f"lockgate_claims_{uuid.uuid4().hex[:12]}"
    init_schema(DSN, table=name)
    yield name
    drop(name)


@pytest.fixture
def connect() -> Iterator[Callable[..., psycopg.Connection[Any]]]:
    """Open connections to the test database; all are closed at teardown."""
    conns: list[psycopg.Connection[Any]] = []

    def factory(**kwargs: Any) -> psycopg.Connection[Any]:
        conn = psycopg.connect(DSN, **kwargs)
        conns.append(conn)
        return conn

    yield factory
    for conn in conns:
        conn.close()


@pytest.fixture
def prefix() -> Iterator[str]:
    """A unique key prefix; its rows in the default table are deleted at teardown."""
    value = f"test-{uuid.uuid4().hex}:"
    init_schema(DSN)
    yield value
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE key LIKE %s").format(sql.Identifier(TABLE)),
            (value + "%",),
        )


def namespace_keys(rclient: redis.Redis, namespace: str) -> list[bytes]:
    """The namespace's keys but its partition record and queue names (written at the
    first call)."""
    found = rclient.scan_iter(match=f"lockgate:{{{namespace}}}:*", count=10_000)
    return [key for key in found if not key.endswith((b":partitions", b":queues"))]


def lock_waiting(monitor: psycopg.Connection[Any], pid: int) -> bool:
    row = monitor.execute(
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
    ).fetchone()
    return bool(row and row[0] == "Lock")


class Background:
    """Run a function in a thread; keep its result or exception."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,))
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.result = fn()
        except BaseException as e:
            self.error = e

    def join(self, timeout: float = 30) -> Any:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the background call hangs"
        return self.result

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()


# --- claim() -----------------------------------------------------------------------------


def test_claim_is_true_only_the_first_time_ever(
    table: str, connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    first, second = connect(), connect()
    with first.transaction():
        assert claim(first, "pay:1", table=table) is True
        assert claim(first, "pay:1", table=table) is False  # same transaction
    with first.transaction():
        assert claim(first, "pay:1", table=table) is False
    with second.transaction():
        assert claim(second, "pay:1", table=table) is False
        assert is_claimed(second, "pay:1", table=table)
        assert claim(second, "pay:2", table=table) is True


def test_a_rolled_back_claim_leaves_the_key_claimable(
    table: str, connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    conn = connect()
    with pytest.raises(RuntimeError), conn.transaction():
        assert claim(conn, "pay:rollback", table=table) is True
        raise RuntimeError("the business write failed")
    with conn.transaction():
        assert not is_claimed(conn, "pay:rollback", table=table)
        assert claim(conn, "pay:rollback", table=table) is True
    with conn.transaction():
        assert claim(conn, "pay:rollback", table=table) is False


@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
def test_a_racing_transaction_waits_for_the_first_then_follows_its_fate(
    table: str, connect: Callable[..., psycopg.Connection[Any]], first_ends: str
) -> None:
    first, second = connect(), connect()
    monitor = connect(autocommit=True)
    tx = first.transaction()
    tx.__enter__()
    assert claim(first, "pay:race", table=table) is True

    def racer() -> bool:
        with second.transaction():
            return claim(second, "pay:race", table=table)

    background = Background(racer)
    wait_until_sync(
        lambda: lock_waiting(monitor, second.info.backend_pid) or background.done,
        message="the second insert waits on the first's row lock",
    )
    assert not background.done, "the second claim did not wait for the first transaction"
    if first_ends == "commit":
        tx.__exit__(None, None, None)
        assert background.join() is False
    else:
        tx.__exit__(RuntimeError, RuntimeError("rolled back"), None)
        assert background.join() is True
    assert background.error is None


async def test_claim_async(table: str) -> None:
    async with await psycopg.AsyncConnection.connect(DSN) as conn:
        async with conn.transaction():
            assert await claim_async(conn, "pay:async", table=table) is True
        async with conn.transaction():
            assert await claim_async(conn, "pay:async", table=table) is False


def test_claim_of_a_missing_table_tells_how_to_create_it(
    connect: Callable[..., psycopg.Connection[Any]],
) -> None:
    conn = connect()
    with pytest.raises(DatabaseError, match="lockgate pg init") as caught:
        claim(conn, "pay:1", table=f"missing_{uuid.uuid4().hex[:8]}")
    assert "dbname=test" in str(caught.value)


@pytest.mark.parametrize("key", ["", "k" * 513])
def test_claim_rejects_bad_keys_before_touching_the_database(
    table: str, connect: Callable[..., psycopg.Connection[Any]], key: str
) -> None:
    conn = connect()
    with pytest.raises(ConfigError, match="idempotency key"):
        claim(conn, key, table=table)
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_init_schema_is_idempotent_and_hides_passwords() -> None:
    name = f"lockgate_claims_{uuid.uuid4().hex[:12]}"
    try:
        init_schema(DSN, table=name)
        init_schema(DSN, table=name)
        assert table_exists(name)
    finally:
        drop(name)
    with pytest.raises(DatabaseError) as caught:
        init_schema(UNREACHABLE_DSN + " password=hunter2", table=name)
    assert "hunter2" not in str(caught.value) and "port=1" in str(caught.value)


# --- lockgate pg init ------------------------------------------------------------------


def test_pg_init_creates_the_table_and_is_safe_to_run_again() -> None:
    name = f"lockgate_claims_{uuid.uuid4().hex[:12]}"
    runner = CliRunner()
    try:
        for _ in range(2):
            result = runner.invoke(
                main, ["pg", "init", "--dsn", DSN, "--table", name], catch_exceptions=False
            )
            assert result.exit_code == 0, result.output
            assert f"table {name} ready" in result.stdout
        assert table_exists(name)
    finally:
        drop(name)


def test_pg_init_with_a_bad_dsn_prints_one_error_line_and_exits_2() -> None:
    result = CliRunner().invoke(
        main, ["pg", "init", "--dsn", UNREACHABLE_DSN], catch_exceptions=False
    )
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "port=1" in lines[0]


def test_pg_init_with_a_malformed_dsn_exits_2_from_the_real_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lockgate", "pg", "init", "--dsn", "not a dsn"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr


# --- combined mode: app.idempotent(key, conn=conn) --------------------------------------


def test_combined_mode_runs_once_and_refills_the_done_marker_after_a_flush(
    make_app: Callable[..., App],
    rclient: redis.Redis,
    connect: Callable[..., psycopg.Connection[Any]],
    prefix: str,
) -> None:
    app = make_app()
    key = prefix + "pay:A1"
    redis_key = app.keys.claim(key)
    conn = connect()
    effects: list[str] = []
    with conn.transaction(), app.idempotent(key, ttl=600, conn=conn):
        effects.append("charged")
    with conn.transaction():
        assert is_claimed(conn, key)

    for round_ in range(2):
        # The claim row is committed; Redis has no marker (just flushed, or never
        # written: the marker is only written once the database has said so).
        rclient.delete(redis_key)
        rclient.zrem(*app.keys.done_marker(redis_key))
        with pytest.raises(AlreadyProcessed), conn.transaction():
            with app.idempotent(key, ttl=600, conn=conn):
                effects.append(f"charged again in round {round_}")
        expiry = rclient.zscore(*app.keys.done_marker(redis_key))
        assert expiry is not None, "the marker was not refilled"
        seconds, _ = rclient.time()
        assert 590 < expiry - seconds <= 601
        # Refilled: Redis alone now stops a duplicate, even without a connection.
        with pytest.raises(AlreadyProcessed), app.idempotent(key):
            effects.append("charged without the database")
    assert effects == ["charged"]


def test_combined_mode_a_failed_block_rolls_back_and_the_retry_runs(
    make_app: Callable[..., App],
    rclient: redis.Redis,
    connect: Callable[..., psycopg.Connection[Any]],
    prefix: str,
) -> None:
    app = make_app()
    key = prefix + "pay:A2"
    conn = connect()
    with pytest.raises(RuntimeError), conn.transaction():
        with app.idempotent(key, conn=conn):
            raise RuntimeError("card declined")
    assert not rclient.exists(app.keys.claim(key))
    with conn.transaction():
        assert not is_claimed(conn, key)
    runs: list[int] = []
    with conn.transaction(), app.idempotent(key, conn=conn):
        runs.append(1)
    assert runs == [1]


def test_combined_mode_a_duplicate_during_the_first_transaction_waits_then_is_stopped(
    make_app: Callable[..., App],
    rclient: redis.Redis,
    connect: Callable[..., psycopg.Connection[Any]],
    prefix: str,
) -> None:
    first_app, second_app = make_app(), make_app()
    key = prefix + "pay:A3"
    first, second = connect(), connect()
    monitor = connect(autocommit=True)
    effects: list[str] = []

    def duplicate() -> None:
        with second.transaction(), second_app.idempotent(key, conn=second):
            effects.append("duplicate")

    with first.transaction():
        with first_app.idempotent(key, conn=first):
            effects.append("first")
            # The Redis claim is live: a duplicate backs off without touching PostgreSQL.
            with pytest.raises(ClaimBusy), second_app.idempotent(key, conn=second):
                effects.append("busy duplicate")
            second.rollback()
        # Between the block and the commit: Redis is free, the row is not committed.
        background = Background(duplicate)
        wait_until_sync(
            lambda: lock_waiting(monitor, second.info.backend_pid) or background.done,
            message="the duplicate waits on the first transaction",
        )
        assert not background.done
    background.join()
    assert isinstance(background.error, AlreadyProcessed)
    assert effects == ["first"]
    assert rclient.zscore(*first_app.keys.done_marker(first_app.keys.claim(key))) is not None


async def test_combined_mode_with_async_connections(
    make_app: Callable[..., App], rclient: redis.Redis, prefix: str
) -> None:
    app = make_app()
    key = prefix + "pay:async"
    effects: list[str] = []
    async with await psycopg.AsyncConnection.connect(DSN) as conn:
        async with conn.transaction(), app.idempotent(key, conn=conn):
            effects.append("charged")
        rclient.delete(app.keys.claim(key))
        with pytest.raises(AlreadyProcessed):
            async with conn.transaction(), app.idempotent(key, conn=conn):
                effects.append("charged again")
    assert effects == ["charged"]
    assert rclient.zscore(*app.keys.done_marker(app.keys.claim(key))) is not None


def test_a_broken_connection_is_a_database_error_naming_the_dsn_and_claims_nothing(
    make_app: Callable[..., App],
    rclient: redis.Redis,
    namespace: str,
    connect: Callable[..., psycopg.Connection[Any]],
    prefix: str,
) -> None:
    app = make_app()
    key = prefix + "pay:broken"
    conn = connect()
    with connect(autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
    ran: list[int] = []
    with pytest.raises(DatabaseError) as caught, app.idempotent(key, conn=conn):
        ran.append(1)
    assert ran == []
    assert "dbname=test" in str(caught.value) and "127.0.0.1" in str(caught.value)
    assert key in str(caught.value)
    assert not rclient.exists(app.keys.claim(key))
    assert namespace_keys(rclient, namespace) == []


async def test_a_closed_connection_is_a_database_error_and_claims_nothing(
    make_app: Callable[..., App],
    rclient: redis.Redis,
    namespace: str,
    connect: Callable[..., psycopg.Connection[Any]],
    prefix: str,
) -> None:
    app = make_app()
    key = prefix + "pay:closed"
    conn = connect()
    conn.close()
    with pytest.raises(DatabaseError, match="closed"), app.idempotent(key, conn=conn):
        pytest.fail("ran without the database")
    aconn = await psycopg.AsyncConnection.connect(DSN)
    await aconn.close()
    with pytest.raises(DatabaseError, match="closed"):
        async with app.idempotent(key, conn=aconn):
            pytest.fail("ran without the database")
    assert namespace_keys(rclient, namespace) == []
