"""``lockgate pg init``: PostgreSQL as the source of truth for idempotency, and the
durable outbox's table."""

from __future__ import annotations

import click

from lockgate.cli.common import reported_errors
from lockgate.cli.options import log_level_option
from lockgate.errors import DatabaseError


@click.group()
@log_level_option
def pg() -> None:
    """PostgreSQL as the source of truth for idempotency, and the durable outbox."""


@pg.command("init")
@click.option("--dsn", required=True, help="PostgreSQL connection string.")
@click.option("--table", default="lockgate_claims", show_default=True)
@click.option("--outbox-table", default="lockgate_outbox", show_default=True,
              help="The durable outbox's table (App(outbox=DSN)).")  # fmt: skip
@log_level_option
def pg_init(dsn: str, table: str, outbox_table: str) -> None:
    """Create the claims and outbox tables (safe to run again)."""
    # The import is inside: without psycopg it raises MissingExtra, one line naming the
    # extra; a DSN that is wrong or unreachable is the user's to fix too (exit 2).
    with reported_errors(DatabaseError):
        from lockgate.integrations.postgres import init_schema, masked_dsn

        init_schema(dsn, table=table, outbox_table=outbox_table)
    for name in (table, outbox_table):
        click.echo(f"table {name} ready at {masked_dsn(dsn)}")
