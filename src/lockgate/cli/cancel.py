"""``lockgate cancel MODULE:APP JOB_ID``: cancel one job (``App.cancel``)."""

from __future__ import annotations

import sys

import click

from lockgate.cli.common import EXIT_USAGE, load_app, reported_errors, run_closing
from lockgate.cli.options import log_level_option, url_option
from lockgate.core.status import CancelOutcome

SAID = {
    CancelOutcome.CANCELLED: "cancelled: it had not started and will not run",
    CancelOutcome.CANCELLING: "cancelling: it is running; its worker was told to stop it",
    CancelOutcome.ENDED: "ended already: nothing to cancel",
    CancelOutcome.UNKNOWN: "unknown: never enqueued, or it ended longer ago than the app "
    "keeps statuses (status_ttl)",
}


@click.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.argument("job_id", metavar="JOB_ID")
@url_option
@log_level_option
def cancel(app_spec: str, job_id: str, url: str | None) -> None:
    """Cancel job JOB_ID of MODULE:APP and print what was done: cancelled (it had not
    started), cancelling (its worker was told to stop it), ended (nothing to do) or
    unknown.

    Exits 2 when the job is unknown.
    """
    app = load_app(app_spec, url)
    with reported_errors():
        outcome = run_closing(app, lambda: app.cancel_async(job_id))
    click.echo(f"job {job_id}: {SAID[outcome]}")
    if outcome is CancelOutcome.UNKNOWN:
        sys.exit(EXIT_USAGE)
