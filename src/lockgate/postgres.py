"""PostgreSQL as the source of truth for idempotency (psycopg 3).

The documented path of :mod:`lockgate.integrations.postgres`, which holds the code."""

from lockgate.integrations.postgres import (
    INSERT_SQL,
    SCHEMA_SQL,
    SELECT_SQL,
    TABLE,
    UNDEFINED_TABLE,
    claim,
    claim_async,
    init_schema,
    is_claimed,
    masked_dsn,
)

__all__ = [
    "INSERT_SQL",
    "SCHEMA_SQL",
    "SELECT_SQL",
    "TABLE",
    "UNDEFINED_TABLE",
    "claim",
    "claim_async",
    "init_schema",
    "is_claimed",
    "masked_dsn",
]
