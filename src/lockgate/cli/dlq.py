"""``lockgate dlq MODULE:APP list | show | replay | trim | purge``: the dead-letter queue."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime

import click

from lockgate.api.app import App
from lockgate.cli.common import EXIT_USAGE, consent, load_app, reported_errors, terminal_width
from lockgate.cli.options import log_level_option, url_option
from lockgate.cli.tables import Column, fit, render
from lockgate.ops import deadletter


@click.group()
@click.argument("app_spec", metavar="MODULE:APP")
@url_option
@log_level_option
@click.pass_context
def dlq(ctx: click.Context, app_spec: str, url: str | None) -> None:
    """Inspect, replay, trim and purge the dead-letter queue of MODULE:APP."""
    # Each subcommand imports the app when it runs: click runs this callback before it
    # parses the subcommand's --help, which must not need an importable app.
    ctx.obj = functools.partial(load_app, app_spec, url)


def _letter(app: App, entry_id: str) -> deadletter.DeadLetter:
    letter = deadletter.show_dead(app, entry_id)
    if letter is None:
        click.echo(f"error: no dead letter with id {entry_id!r}", err=True)
        sys.exit(EXIT_USAGE)
    return letter


# Every field, in full (--wide); and what fits a terminal: the id (to show or replay),
# whose job it was, and why it died, cut to the width; a long job id (a generated one)
# gives way before the task and the error, which say more.
DLQ_WIDE = tuple(
    Column(header, align="right" if header in ("attempt", "deliveries") else "left")
    for header in ("id", "job id", "task", "queue/level", "reason", "error", "attempt",
                   "deliveries", "failed at")
)  # fmt: skip
DLQ_NARROW = (
    Column("id"),
    Column("job id", shrink="truncate", min_width=12),
    Column("task", shrink="truncate", min_width=8, priority=1),
    Column("error", shrink="truncate", min_width=16, priority=1),
)


def _error(letter: deadletter.DeadLetter) -> str:
    return f"{letter.error_type}: {letter.error}" if letter.error_type else letter.error


def _when(moment: float | None) -> str:
    if moment is None:
        return "-"
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%d %H:%M:%S")


def dlq_table(letters: list[deadletter.DeadLetter], width: int | None) -> list[str]:
    """The table of ``dlq list`` (pure).

    Args:
        letters: the dead letters, one row each.
        width: the terminal's width: the narrow columns, cut to fit; None: every column,
            nothing cut (``--wide``).

    Returns:
        The header line and the rows' lines.
    """
    if width is None:
        rows = [
            (letter.id, letter.job_id, letter.task, f"{letter.queue}/{letter.level}",
             letter.reason, _error(letter), str(letter.attempt), str(letter.deliveries),
             _when(letter.failed_at))
            for letter in letters
        ]  # fmt: skip
        return render(DLQ_WIDE, rows, None)
    # A letter that died without an error (too many deliveries, ...) shows its reason.
    narrow = [(lt.id, lt.job_id, lt.task, _error(lt) or lt.reason) for lt in letters]
    return render(DLQ_NARROW, narrow, width)


@dlq.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--wide", is_flag=True, help="Every column, the full error text, whatever the width.")
@click.option("--limit", type=click.IntRange(min=1), default=1000, show_default=True,
              help="List at most this many, oldest first.")  # fmt: skip
@log_level_option
@click.pass_obj
def dlq_list(load: Callable[[], App], as_json: bool, wide: bool, limit: int) -> None:
    """List dead letters, oldest first."""
    app = load()
    with reported_errors():
        letters = deadletter.list_dead(app, limit)
    if as_json:
        click.echo(json.dumps([letter.as_dict() for letter in letters], indent=2))
        return
    width = None if wide else terminal_width()
    title = fit(f"dead letters of {app.namespace} ({len(letters)})", width)
    click.echo("\n".join([title, *dlq_table(letters, width)]))


@dlq.command("show")
@click.argument("entry_id", metavar="ID")
@log_level_option
@click.pass_obj
def dlq_show(load: Callable[[], App], entry_id: str) -> None:
    """Show one dead letter, traceback included."""
    app = load()
    with reported_errors():
        letter = _letter(app, entry_id)
    click.echo(json.dumps(letter.as_dict(), indent=2))


@dlq.command("replay")
@click.argument("entry_id", metavar="[ID]", required=False)
@click.option("--all", "replay_all", is_flag=True, help="Replay every dead letter.")
@click.option("--task", "task_name", default=None, help="Replay the dead letters of a task.")
@click.option("--level", default=None, help="Enqueue on this level instead of the letters' own.")
@click.option("--queue", default=None, help="Enqueue on this queue instead of the letters' own.")
@click.option("--yes", is_flag=True, help="Replay --all or --task without asking.")
@log_level_option
@click.pass_obj
def dlq_replay(
    load: Callable[[], App],
    entry_id: str | None,
    replay_all: bool,
    task_name: str | None,
    level: str | None,
    queue: str | None,
    yes: bool,
) -> None:
    """Enqueue dead letters again under their own job ids.

    One ID replays at once; --all and --task ask first (--yes: do not ask; without a
    terminal, --yes is required). Exits 1 when a letter was not replayed and stays (its
    line says why). A letter gone meanwhile (replayed or removed by someone else) is
    left alone and reported as gone: only what this command enqueued counts as replayed.
    """
    if sum((entry_id is not None, replay_all, task_name is not None)) != 1:
        raise click.UsageError("give exactly one of ID, --all or --task")
    if entry_id is None:
        consent(yes, "replaying dead letters in bulk")
    app = load()
    with reported_errors():
        if entry_id is not None:
            letters = [_letter(app, entry_id)]
        else:
            letters = deadletter.list_dead(app, limit=1_000_000)
            if task_name is not None:
                letters = [letter for letter in letters if letter.task == task_name]
            if letters and not yes:
                which = f" of task {task_name!r}" if task_name is not None else ""
                click.confirm(
                    f"replay {len(letters)} dead letters{which} of {app.namespace}?",
                    abort=True, err=True,
                )  # fmt: skip
        results = deadletter.replay(app, letters, level=level, queue=queue)
    for result in results:
        click.echo(f"{result.id} {result.job_id} {result.outcome} {result.detail}".rstrip())
    replayed = sum(result.outcome == "enqueued" for result in results)
    gone = sum(result.outcome == "gone" for result in results)
    summary = f"replayed {replayed} of {len(results)}"
    click.echo(f"{summary} ({gone} gone: {deadletter.DETAILS['gone']})" if gone else summary)
    if replayed + gone < len(results):
        sys.exit(1)


@dlq.command("trim")
@log_level_option
@click.pass_obj
def dlq_trim(load: Callable[[], App]) -> None:
    """Trim dead letters to the app's max length and age."""
    app = load()
    with reported_errors():
        click.echo(f"trimmed {deadletter.trim(app)} dead letters")


@dlq.command("purge")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@log_level_option
@click.pass_obj
def dlq_purge(load: Callable[[], App], yes: bool) -> None:
    """Delete every dead letter.

    Asks first (--yes: do not ask; without a terminal, --yes is required). Deletes in
    chunks of the oldest 1,000, so Redis is never blocked for long.
    """
    consent(yes, "purging the dead letters")
    app = load()
    with reported_errors():
        if not yes and (count := deadletter.count_dead(app)):
            click.confirm(
                f"delete all {count} dead letters of {app.namespace}?", abort=True, err=True
            )
        click.echo(f"purged {deadletter.purge(app)} dead letters")
