"""``lockgate stats``: per queue and level, what waits, runs and ended lately."""

from __future__ import annotations

import json

import click

from lockgate.backend.addresses import masked
from lockgate.cli.common import load_app, reported_errors, run_closing, terminal_width
from lockgate.cli.options import log_level_option, url_option
from lockgate.cli.tables import Column, fit, render
from lockgate.ops.inspect import KeyStats, LevelStats, StatsReport, stats_report

STATS_COLUMNS = (
    Column("queue", shrink="truncate", min_width=5),
    Column("level", shrink="truncate", min_width=5),
    *(Column(header, align="right") for header in
      ("waiting", "pending", "delayed", "workers", "done", "retried", "dead")),
    # The first to give up width, over two or three header lines, before a name is cut.
    Column("oldest wait ms", align="right", shrink="wrap", min_width=6, priority=-1),
)  # fmt: skip
KEY_COLUMNS = (
    Column("queue", shrink="truncate", min_width=5),
    Column("level", shrink="truncate", min_width=5),
    Column("busiest key", shrink="truncate", min_width=6),
    Column("waiting", align="right"),
    Column("running (limit) per task", shrink="truncate", min_width=8),
)


@click.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@url_option
@log_level_option
def stats(app_spec: str, as_json: bool, url: str | None) -> None:
    """Per queue and level: waiting, pending, delayed, live workers, done, retried and
    dead-lettered in the last 15 minutes, oldest wait; and the paused queues."""
    app = load_app(app_spec, url)
    with reported_errors():
        result = run_closing(app, lambda: stats_report(app))
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
        return
    width = terminal_width()
    rows = [_stats_row(result, row) for row in result.stats.levels]
    title = f"lockgate {app.namespace} @ {masked(app.redis_url)}"
    note = (f"workers: live workers serving the queue; done, retried, dead: the last "
            f"{result.activity.minutes} min")  # fmt: skip
    caption = [f"dead letters: {result.stats.dead_letters}"]
    if result.paused:  # workers take none of their jobs: the first thing to know of a queue
        caption.append(fit(f"paused queues: {', '.join(sorted(result.paused))}", width))
    table = render(STATS_COLUMNS, rows, width)
    click.echo("\n".join([fit(title, width), *table, fit(note, width), *caption]))
    if result.keys:
        keys = [_key_row(row) for row in result.keys]
        click.echo("\n".join(["", *render(KEY_COLUMNS, keys, width)]))


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _stats_row(report: StatsReport, row: LevelStats) -> tuple[str, ...]:
    recent = report.recent(row)
    counts = (row.waiting, row.pending, row.delayed, report.serving(row.queue), recent.done,
              recent.retried, recent.dead)  # fmt: skip
    return (row.queue, row.level, *map(str, counts), _dash(row.oldest_wait_ms))


def _key_row(row: KeyStats) -> tuple[str, ...]:
    running = ", ".join(
        f"{task} {count}" + (f" ({row.limits[task]})" if task in row.limits else "")
        for task, count in sorted(row.running.items())
    )
    return (row.queue, row.level, row.key, str(row.waiting), running or "-")
