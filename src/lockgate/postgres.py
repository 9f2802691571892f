"""PostgreSQL as the source of truth for idempotency (psycopg 3).

``claim(conn, key)`` inserts the key with ``INSERT ... ON CONFLICT DO NOTHING RETURNING``
in the caller's own transaction: the business write and the idempotency record commit or
roll back together, and the unique constraint decides, even against a racing transaction
(the second insert waits on the first's row lock, then conflicts or proceeds). Unlike a
Redis key it never expires and survives a Redis flush or restart.
"""

from __future__ import annotations

from typing import Any

from lockgate.errors import DatabaseError, MissingExtra

try:
    import psycopg
    from psycopg import sql
except ImportError as e:  # a core install: psycopg comes with the postgres extra
    raise MissingExtra("lockgate.postgres", "postgres", "psycopg") from e
from lockgate.idempotency import check_key

TABLE = "lockgate_claims"


def _schema(table: str) -> sql.Composed:
    return sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} ("
        " key text PRIMARY KEY CHECK (octet_length(key) BETWEEN 1 AND 512),"
        " claimed_at timestamptz NOT NULL DEFAULT now())"
    ).format(sql.Identifier(table))


def _insert(table: str) -> sql.Composed:
    return sql.SQL(
        "INSERT INTO {} (key) VALUES (%s) ON CONFLICT (key) DO NOTHING RETURNING key"
    ).format(sql.Identifier(table))


def _where(conn: Any) -> str:
    try:
        return str(conn.info.dsn) or "the default PostgreSQL"
    except Exception:
        return "PostgreSQL"


def _translate(error: psycopg.Error, conn: Any, key: str, table: str) -> DatabaseError:
    if isinstance(error, psycopg.errors.UndefinedTable):
        return DatabaseError(
            f"table {table!r} does not exist at {_where(conn)}; "
            "create it with: lockgate pg init --dsn DSN"
        )
    return DatabaseError(f"claim of {key!r} failed at {_where(conn)}: {_one_line(error)}")


def claim(conn: psycopg.Connection[Any], key: str, *, table: str = TABLE) -> bool:
    """Claim ``key`` in the connection's current transaction.

    Returns:
        True only the first time the key is ever claimed (once that transaction commits).

    Raises:
        ConfigError: bad key.
        DatabaseError: the table is missing or PostgreSQL failed.
    """
    check_key(key)
    try:
        return conn.execute(_insert(table), (key,)).fetchone() is not None
    except psycopg.Error as e:
        raise _translate(e, conn, key, table) from e


async def claim_async(conn: psycopg.AsyncConnection[Any], key: str, *, table: str = TABLE) -> bool:
    """Async [claim][lockgate.postgres.claim]."""
    check_key(key)
    try:
        return (await (await conn.execute(_insert(table), (key,))).fetchone()) is not None
    except psycopg.Error as e:
        raise _translate(e, conn, key, table) from e


def is_claimed(conn: psycopg.Connection[Any], key: str, *, table: str = TABLE) -> bool:
    """Whether ``key`` has been claimed (and committed, as this transaction sees it)."""
    query = sql.SQL("SELECT 1 FROM {} WHERE key = %s").format(sql.Identifier(table))
    try:
        return conn.execute(query, (key,)).fetchone() is not None
    except psycopg.Error as e:
        raise _translate(e, conn, key, table) from e


def init_schema(dsn: str, *, table: str = TABLE) -> None:
    """Create the claims table if it does not exist (idempotent).

    Raises:
        DatabaseError: PostgreSQL at ``dsn`` could not be reached or refused.
    """
    try:
        with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
            conn.execute(_schema(table))
    except psycopg.Error as e:
        raise DatabaseError(f"cannot create {table!r} at {masked_dsn(dsn)}: {_one_line(e)}") from e


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def masked_dsn(dsn: str) -> str:
    """The DSN with any password hidden."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return dsn
    if "password" in params:
        params["password"] = "***"
    return psycopg.conninfo.make_conninfo(**params)  # type: ignore[arg-type]
