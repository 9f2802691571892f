"""The example's tables; in a real project, a migration (``RunSQL``, and ``RunPython``
calling ``init_schema(schema_editor.connection)`` for the claims table)."""

from __future__ import annotations

from django.conf import settings
from django.db import connection

from lockgate.postgres import init_schema


def create_tables() -> None:
    """Create the payments, charges and claims tables if they do not exist."""
    payments, charges = settings.PAYMENTS_TABLE, settings.CHARGES_TABLE
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {payments} (id bigserial PRIMARY KEY,"
            " order_id text NOT NULL, amount int NOT NULL CHECK (amount > 0))"
        )
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {charges} (order_id text NOT NULL,"
            " amount int NOT NULL, charged_at timestamptz NOT NULL DEFAULT now())"
        )
    init_schema(connection, table=settings.CLAIMS_TABLE)


def count(table: str, order_id: str) -> int:
    """Rows of ``table`` for an order."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table} WHERE order_id = %s", [order_id])
        (rows,) = cursor.fetchone()
    return int(rows)
