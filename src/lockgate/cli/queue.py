"""``lockgate queue MODULE:APP pause | resume | purge QUEUE``: the ``queue`` command group."""

from __future__ import annotations

import functools
from collections.abc import Callable

import click

from lockgate.api.app import App
from lockgate.cli.common import consent, load_app, reported_errors, run_closing
from lockgate.cli.options import log_level_option, url_option
from lockgate.ops import queues


@click.group("queue")
@click.argument("app_spec", metavar="MODULE:APP")
@url_option
@log_level_option
@click.pass_context
def queue(ctx: click.Context, app_spec: str, url: str | None) -> None:
    """Pause, resume or purge a queue of MODULE:APP."""
    # Each subcommand imports the app when it runs, as the dlq group's do: click runs this
    # callback before it parses the subcommand's --help, which must not need the app.
    ctx.obj = functools.partial(load_app, app_spec, url)


@queue.command("pause")
@click.argument("queue_name", metavar="QUEUE")
@log_level_option
@click.pass_obj
def queue_pause(load: Callable[[], App], queue_name: str) -> None:
    """Pause QUEUE: it keeps accepting jobs, and workers take none from it."""
    app = load()
    with reported_errors():
        run_closing(app, lambda: queues.pause(app, queue_name))
    click.echo(f"paused queue {queue_name} of {app.namespace}")


@queue.command("resume")
@click.argument("queue_name", metavar="QUEUE")
@log_level_option
@click.pass_obj
def queue_resume(load: Callable[[], App], queue_name: str) -> None:
    """Resume QUEUE: workers take its jobs again."""
    app = load()
    with reported_errors():
        run_closing(app, lambda: queues.resume(app, queue_name))
    click.echo(f"resumed queue {queue_name} of {app.namespace}")


@queue.command("purge")
@click.argument("queue_name", metavar="QUEUE")
@click.option("--level", default=None, help="Only the jobs of this level.")
@click.option("--task", "task_name", default=None, help="Only the jobs of this task.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@log_level_option
@click.pass_obj
def queue_purge(
    load: Callable[[], App], queue_name: str, level: str | None, task_name: str | None, yes: bool
) -> None:
    """Delete the waiting jobs of QUEUE and free their job ids.

    Running and delayed jobs stay. Asks first (--yes: do not ask; without a terminal,
    --yes is required). Deletes at most 1,000 jobs per atomic step, so Redis is never
    blocked for long.
    """
    consent(yes, "purging waiting jobs")
    app = load()
    with reported_errors():
        queues.check(app, queue_name, level)  # before the question, not after it
        if not yes:
            which = "".join(
                f" {what} {name!r}" for what, name in (("of level", level), ("of task", task_name))
                if name is not None
            )  # fmt: skip
            click.confirm(
                f"delete the waiting jobs{which} of queue {queue_name!r} of {app.namespace}?",
                abort=True, err=True,
            )  # fmt: skip
        deleted = run_closing(
            app, lambda: queues.purge(app, queue_name, level=level, task=task_name)
        )
    click.echo(f"purged {deleted} waiting jobs of queue {queue_name}")
