"""PostgreSQL as the source of truth for idempotency (psycopg 3).

``claim(conn, key)`` inserts the key with ``INSERT ... ON CONFLICT DO NOTHING RETURNING``
in the caller's own transaction: the business write and the idempotency record commit or
roll back together, and the unique constraint decides, even against a racing transaction
(the second insert waits on the first's row lock, then conflicts or proceeds). Unlike a
Redis key it never expires and survives a Redis flush or restart.

``init_schema`` also creates the table of the durable outbox
(:mod:`lockgate.integrations.outbox`). ``claim``, ``is_claimed`` and ``init_schema`` also
take a Django connection to PostgreSQL (``django.db.connection``, with psycopg 3 or
psycopg2 under it): the statement runs in
Django's own cursor, so in the current ``transaction.atomic()`` block, with the same
``DatabaseError`` translations. Django is never imported unless such a connection is given.
This module itself needs psycopg 3 (the ``postgres`` extra) either way.
"""

from __future__ import annotations

import importlib
from typing import Any, cast

from lockgate.errors import ConfigError, DatabaseError, MissingExtra

try:
    import psycopg
    from psycopg import sql
except ImportError as e:  # a core install: psycopg comes with the postgres extra
    raise MissingExtra("lockgate.postgres", "postgres", "psycopg") from e
from lockgate.backend.keys import check_key
from lockgate.integrations.outbox import SCHEMA_SQL as OUTBOX_SCHEMA_SQL
from lockgate.integrations.outbox import TABLE as OUTBOX_TABLE
from lockgate.integrations.outbox import UNDEFINED_TABLE as UNDEFINED_TABLE
from lockgate.integrations.transactions import DjangoConnection, django_connection

TABLE = "lockgate_claims"
# {} is the quoted table name (sql.Identifier for psycopg, ops.quote_name for Django).
SCHEMA_SQL = (
    "CREATE TABLE IF NOT EXISTS {} ("
    " key text PRIMARY KEY CHECK (octet_length(key) BETWEEN 1 AND 512),"
    " claimed_at timestamptz NOT NULL DEFAULT now())"
)
INSERT_SQL = "INSERT INTO {} (key) VALUES (%s) ON CONFLICT (key) DO NOTHING RETURNING key"
SELECT_SQL = "SELECT 1 FROM {} WHERE key = %s"


def _insert(table: str) -> sql.Composed:
    return sql.SQL(INSERT_SQL).format(sql.Identifier(table))


def _where(conn: Any) -> str:
    try:
        return str(conn.info.dsn) or "the default PostgreSQL"
    except Exception:
        return "PostgreSQL"


def _translate(error: psycopg.Error, conn: Any, key: str, table: str) -> DatabaseError:
    undefined = isinstance(error, psycopg.errors.UndefinedTable)
    return _failed(error, undefined, _where(conn), key, table)


def _failed(
    error: BaseException, undefined_table: bool, where: str, key: str, table: str
) -> DatabaseError:
    if undefined_table:
        return DatabaseError(
            f"table {table!r} does not exist at {where}; create it with: lockgate pg init --dsn DSN"
        )
    return DatabaseError(f"claim of {key!r} failed at {where}: {_one_line(error)}")


def _django_where(conn: DjangoConnection) -> str:
    settings = conn.settings_dict
    host, port = settings.get("HOST") or "localhost", settings.get("PORT") or 5432
    return f"Django database {conn.alias!r} ({settings.get('NAME')} on {host}:{port})"


def _django_run(conn: DjangoConnection, template: str, table: str, key: str | None) -> bool:
    """Run one statement in Django's cursor (the current atomic block, if any).

    Returns:
        Whether it returned a row.

    Raises:
        ConfigError: the database is not PostgreSQL.
        DatabaseError: what Django raised, translated as for psycopg.
    """
    if conn.vendor != "postgresql":
        raise ConfigError(
            f"lockgate.postgres needs PostgreSQL; Django database {conn.alias!r} is {conn.vendor}"
        )
    db: Any = importlib.import_module("django.db")
    try:
        with conn.cursor() as cursor:
            params = None if key is None else [key]
            cursor.execute(template.format(conn.ops.quote_name(table)), params)
            return cursor.description is not None and cursor.fetchone() is not None
    except db.DatabaseError as e:  # Django's, wrapping the driver's error as __cause__
        cause = e.__cause__
        code = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
        if key is None:
            raise DatabaseError(
                f"cannot create {table!r} at {_django_where(conn)}: {_one_line(e)}"
            ) from e
        raise _failed(e, code == UNDEFINED_TABLE, _django_where(conn), key, table) from e


def claim(
    conn: psycopg.Connection[Any] | DjangoConnection, key: str, *, table: str = TABLE
) -> bool:
    """Claim ``key`` in the connection's current transaction.

    Args:
        conn: a psycopg 3 connection, or a Django connection to PostgreSQL
            (``django.db.connection``; claim inside ``transaction.atomic()``, else the
            claim commits at once).
        key: what is done once, at most 512 bytes.
        table: the claims table.

    Returns:
        True only the first time the key is ever claimed (once that transaction commits).

    Raises:
        ConfigError: bad key, or a Django database that is not PostgreSQL.
        DatabaseError: the table is missing or PostgreSQL failed.
    """
    check_key(key)
    django = django_connection(conn)
    if django is not None:
        return _django_run(django, INSERT_SQL, table, key)
    conn = cast("psycopg.Connection[Any]", conn)
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


def is_claimed(
    conn: psycopg.Connection[Any] | DjangoConnection, key: str, *, table: str = TABLE
) -> bool:
    """Whether ``key`` has been claimed (and committed, as this transaction sees it).

    ``conn`` is a psycopg 3 connection or a Django connection to PostgreSQL.
    """
    django = django_connection(conn)
    if django is not None:
        return _django_run(django, SELECT_SQL, table, key)
    conn = cast("psycopg.Connection[Any]", conn)
    query = sql.SQL(SELECT_SQL).format(sql.Identifier(table))
    try:
        return conn.execute(query, (key,)).fetchone() is not None
    except psycopg.Error as e:
        raise _translate(e, conn, key, table) from e


def init_schema(
    dsn: str | DjangoConnection, *, table: str = TABLE, outbox_table: str | None = OUTBOX_TABLE
) -> None:
    """Create the claims table and the durable outbox's table if they do not exist
    (idempotent).

    Args:
        dsn: where: a DSN, or a Django connection to PostgreSQL (the tables are created in
            its current transaction, e.g. from a migration's ``RunPython``).
        table: the claims table.
        outbox_table: the outbox table (see :mod:`lockgate.integrations.outbox`); None:
            none.

    Raises:
        ConfigError: a Django database that is not PostgreSQL.
        DatabaseError: PostgreSQL at ``dsn`` could not be reached or refused.
    """
    schemas = [(SCHEMA_SQL, table)]
    if outbox_table is not None:
        schemas.append((OUTBOX_SCHEMA_SQL, outbox_table))
    django = django_connection(dsn)
    if django is not None:
        for template, name in schemas:
            _django_run(django, template, name, None)
        return
    dsn = cast(str, dsn)
    created = table
    try:
        with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
            for template, created in schemas:
                conn.execute(sql.SQL(template).format(sql.Identifier(created)))
    except psycopg.Error as e:
        raise DatabaseError(
            f"cannot create {created!r} at {masked_dsn(dsn)}: {_one_line(e)}"
        ) from e


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
