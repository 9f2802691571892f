"""``lockgate pg init``: PostgreSQL as the source of truth for idempotency."""

from __future__ import annotations

import click

from lockgate.cli.common import reported_errors
from lockgate.cli.options import log_level_option
from lockgate.errors import DatabaseError


@click.group()
@log_level_option
def pg() -> None:
    """PostgreSQL as the source of truth for idempotency."""


@pg.command("init")
@click.option("--dsn", required=True, help="PostgreSQL connection string.")
@click.option("--table", default="lockgate_claims", show_default=True)
@log_level_option
def pg_init(dsn: str, table: str) -> None:
    """Create the claims table (safe to run again)."""
    # The import is inside: without psycopg it raises MissingExtra, one line naming the
    # extra; a DSN that is wrong or unreachable is the user's to fix too (exit 2).
    with reported_errors(DatabaseError):
        from lockgate.integrations.postgres import init_schema, masked_dsn

        init_schema(dsn, table=table)
    click.echo(f"table {table} ready at {masked_dsn(dsn)}")
