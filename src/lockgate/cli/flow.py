"""``lockgate flow MODULE:APP FLOW_ID``: a workflow's state and its jobs."""

from __future__ import annotations

import json
import sys
from datetime import UTC

import click

from lockgate.cli.common import EXIT_USAGE, load_app, reported_errors, terminal_width
from lockgate.cli.options import log_level_option, url_option
from lockgate.cli.tables import Column, fit, render
from lockgate.ops.flows import FlowView, flow_view

# The ids and the task say which job it is, the state what became of it; what it waits
# on (a chord's callback waits on every member) gives way first, then a long id or task.
# A dead letter's id is never cut: it is there to be given to ``lockgate dlq ... show``.
FLOW_COLUMNS = (
    Column("id", shrink="truncate", min_width=12, priority=1),
    Column("task", shrink="truncate", min_width=8, priority=1),
    Column("state"),
    Column("waits on", shrink="truncate", min_width=12),
)
LETTER_COLUMN = Column("dead letter")


def flow_table(view: FlowView, width: int | None) -> list[str]:
    """The table of ``lockgate flow`` (pure): one row per job, in declaration order; a
    dead letter column when a job is dead.

    Args:
        view: the flow.
        width: the terminal's width (the columns cut to fit); None: nothing cut.

    Returns:
        The header line and the rows' lines.
    """
    dead = any(row.job.state == "dead" for row in view.jobs)
    columns = (*FLOW_COLUMNS, LETTER_COLUMN) if dead else FLOW_COLUMNS
    rows = []
    for row in view.jobs:
        job = row.job
        cells = [job.id, job.task or "-", job.state, ", ".join(job.waits_on) or "-"]
        if dead:
            cells.append(row.letter or ("?" if job.state == "dead" else ""))
        rows.append(cells)
    return render(columns, rows, width)


def _notes(view: FlowView) -> list[str]:
    if not view.missing_letters:
        return []
    where = (
        "gone (replayed or removed)" if view.letters_complete
        else f"not among the oldest {view.letters_searched} dead letters"
    )  # fmt: skip
    return [f"?: the dead letter is {where}"]


@click.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.argument("flow_id", metavar="FLOW_ID")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@url_option
@log_level_option
def flow(app_spec: str, flow_id: str, as_json: bool, url: str | None) -> None:
    """Show flow FLOW_ID of MODULE:APP: its state, when it was created, and its jobs
    (id, task, state, which jobs each waits on, and a dead job's dead letter).

    Exits 2 when the flow is unknown (never enqueued, or ended longer ago than the app
    keeps flows, ``flow_ttl``).
    """
    app = load_app(app_spec, url)
    with reported_errors():
        view = flow_view(app, flow_id)
    if view.info.state == "unknown":
        click.echo(
            f"error: no flow with id {flow_id!r} (never enqueued, or it ended longer ago "
            "than the app keeps flows: flow_ttl)",
            err=True,
        )
        sys.exit(EXIT_USAGE)
    if as_json:
        click.echo(json.dumps(view.as_dict(), indent=2))
        return
    width = terminal_width()
    created = view.info.created_at
    when = created.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if created else "-"
    header = [
        fit(f"flow {flow_id} of {app.namespace}: {view.info.state}", width),
        fit(f"created {when}; {len(view.jobs)} jobs", width),
    ]
    notes = [fit(note, width) for note in _notes(view)]
    click.echo("\n".join([*header, *flow_table(view, width), *notes]))
