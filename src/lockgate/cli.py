"""The ``lockgate`` command: worker, enqueue, stats, dlq, pg init, demo."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import importlib
import json
import logging
import os
import shutil
import sys
from collections.abc import Callable, Coroutine, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from lockgate import deadletter
from lockgate.addresses import masked
from lockgate.app import App
from lockgate.config import REDIS_URL_ENV, WorkerConfig
from lockgate.errors import (
    ConfigError,
    ConnectionFailed,
    DatabaseError,
    InvalidArguments,
    LockgateError,
)
from lockgate.inspect import LevelStats, StatsReport, stats_report
from lockgate.joblog import JobLog, use_json
from lockgate.logs import get_logger
from lockgate.tables import Column, fit, render
from lockgate.worker import Worker

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
log = get_logger(__name__)
EXIT_USAGE = 2
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_LEVEL_KEY = "lockgate.log_level"  # in ctx.meta, which every nested context shares


def load_app(spec: str) -> App:
    """Import ``MODULE:ATTRIBUTE`` and return the App it names.

    Raises:
        click.BadParameter: the module or attribute is missing, or is not an App.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(f"expected MODULE:APP, got {spec!r}", param_hint="APP")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise click.BadParameter(f"cannot import {module_name!r}: {e}", param_hint="APP") from e
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise click.BadParameter(f"{spec!r} is not a lockgate App", param_hint="APP")
    return app


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop when it is installed, else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


@contextlib.contextmanager
def reported_errors(*usage: type[LockgateError]) -> Iterator[None]:
    """Turn lockgate's errors into one line on stderr and an exit code, not a traceback.

    Exit code 2 for what the user can fix (unreachable server, bad configuration, a
    missing extra, bad arguments, and the ``usage`` errors), 1 for the others.

    Args:
        usage: more error classes that count as the user's to fix here.
    """
    fixable: tuple[type[Exception], ...] = (
        ConnectionFailed, ConfigError, InvalidArguments, *usage,
    )  # fmt: skip
    try:
        yield
    except fixable as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_USAGE)
    except LockgateError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)


def _loaded(spec: str, url: str | None) -> App:
    """The app ``spec`` names, on ``url`` when one is given (see :func:`load_app`)."""
    app = load_app(spec)
    if url:
        app.redis_url = url
    return app


def terminal_width() -> int:
    """Columns of the terminal; $COLUMNS when set, 80 when unknown (not a terminal)."""
    return shutil.get_terminal_size((80, 24)).columns


def _take_log_level(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    # Click parses a subcommand's options after the group's callback ran, so a level given
    # after the subcommand lands last and wins, as the reader of the command line expects.
    if value is None:
        return
    ctx.meta[LOG_LEVEL_KEY] = value.upper()
    logging.getLogger().setLevel(value.upper())


def log_level_option(command: F) -> F:
    """``--log-level LEVEL``, accepted by the group and by every subcommand alike."""
    option = click.option(
        "--log-level",
        type=click.Choice(LOG_LEVELS, case_sensitive=False),
        metavar="LEVEL",
        default=None,
        expose_value=False,
        callback=_take_log_level,
        help=f"Logging level: {', '.join(LOG_LEVELS)} (default: INFO).",
    )
    return option(command)


def effective_log_level() -> str:
    """The last ``--log-level`` the command line gave, else INFO."""
    return str(click.get_current_context().meta.get(LOG_LEVEL_KEY, "INFO"))


@click.group()
@click.version_option(package_name="lockgate", prog_name="lockgate")
@log_level_option
def main() -> None:
    """lockgate: background jobs on Redis Streams with priorities and idempotency."""
    logging.basicConfig(level=effective_log_level(), format=LOG_FORMAT)


url_option = click.option(
    "--url", default=None, help=f"Redis URL (overrides the app's and ${REDIS_URL_ENV})."
)


@main.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option("--policy", type=click.Choice(["weighted", "strict"]), default="weighted",
              show_default=True, help="How levels share the worker.")  # fmt: skip
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--queues", default="", help="Comma-separated queues (default: all the app's).")
@click.option("--grace-period", type=float, default=30.0, show_default=True,
              help="Seconds running jobs get to finish on SIGTERM/SIGINT.")  # fmt: skip
@click.option("--visibility-timeout", type=click.FloatRange(min=0.1), default=30.0,
              show_default=True,
              help="Seconds before a dead worker's jobs are taken over.")  # fmt: skip
@click.option("--max-deliveries", type=click.IntRange(min=1), default=5, show_default=True,
              help="Times a job may kill its process before it is dead-lettered.")  # fmt: skip
@click.option("--claim-lease", type=click.FloatRange(min=0.1), default=30.0,
              show_default=True,
              help="Seconds an idempotent job's claim outlives a worker that died.")  # fmt: skip
@click.option("--embedded", is_flag=True, help="Run a private Redis-compatible server.")
@url_option
@click.option("--processes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes, under a supervisor that restarts them.")  # fmt: skip
@click.option("--burst", is_flag=True,
              help="Exit 0 once nothing is queued, delayed or running.")  # fmt: skip
@click.option("--no-scheduler", is_flag=True,
              help="Do not enqueue the ticks of @app.cron tasks (other workers do).")  # fmt: skip
@click.option("--metrics-port", type=click.IntRange(min=0, max=65535), default=None,
              metavar="PORT", help="Serve Prometheus /metrics, /healthz and /readyz on "
              "this port (one endpoint for all --processes; needs lockgate[metrics]).")  # fmt: skip
@click.option("--metrics-dir", default=None, hidden=True,
              help="Internal: where a supervisor's worker process writes its metrics.")  # fmt: skip
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="json: one JSON object per log line.")  # fmt: skip
@click.option("--log-jobs", is_flag=True,
              help="Log a line per finished job (logger lockgate.jobs, at INFO whatever "
              "--log-level says).")  # fmt: skip
@log_level_option
def worker(
    app_spec: str,
    policy: str,
    concurrency: int,
    queues: str,
    grace_period: float,
    visibility_timeout: float,
    max_deliveries: int,
    claim_lease: float,
    embedded: bool,
    url: str | None,
    processes: int,
    burst: bool,
    no_scheduler: bool,
    metrics_port: int | None,
    metrics_dir: str | None,
    log_format: str,
    log_jobs: bool,
) -> None:
    """Run a worker for MODULE:APP until SIGTERM or SIGINT (twice: at once)."""
    if burst and processes > 1:
        # A supervisor restarts a child that exits; one that is done would be restarted.
        raise click.UsageError("--burst runs one worker process: leave out --processes")
    if log_format == "json":
        use_json()
    if processes > 1:
        _supervise(app_spec, processes, embedded=embedded, url=url, metrics_port=metrics_port)
        return
    app = _loaded(app_spec, url)
    with reported_errors(), contextlib.ExitStack() as stack:
        if embedded:
            from lockgate.embedded import EmbeddedServer

            server = stack.enter_context(EmbeddedServer())
            app.redis_url = server.url
            click.echo(f"embedded server at {server.url}", err=True)
        config = WorkerConfig(
            concurrency=concurrency,
            policy="strict" if policy == "strict" else "weighted",
            queues=tuple(q.strip() for q in queues.split(",") if q.strip()),
            grace_period=grace_period,
            visibility_timeout=visibility_timeout,
            max_deliveries=max_deliveries,
            claim_lease=claim_lease,
            scheduler=not no_scheduler,
        )
        _warn_unknown_queues(app, config.queues)
        running = Worker(app, config)
        if log_jobs:
            running.watchers.add(JobLog(app).enable())
        metrics = None
        if metrics_port is not None or metrics_dir is not None:
            from lockgate.metrics import WorkerMetrics  # without the extra: one line naming it

            metrics = WorkerMetrics(running, port=metrics_port, directory=metrics_dir)
        # What start-up made (modules, the app and its tasks) lives as long as the process:
        # frozen out of the collector's sight, a full collection no longer walks it. It did
        # pause the event loop 11-16 ms at a time, and a critical job waited behind that.
        gc.collect()
        gc.freeze()
        work = running.run(install_signal_handlers=True, burst=burst)
        run_async(metrics.serving(work) if metrics is not None else work)
        if running.busy_threads:
            # Sync runs or child processes still going (a forced stop, a run past its
            # timeout) would hold the process open: the interpreter joins its pool's
            # threads at exit. Their claims lapse with the process (children die with
            # it) and their jobs are redelivered.
            log.warning("exiting with %d runs still going", running.busy_threads)
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)


def _warn_unknown_queues(app: App, queues: tuple[str, ...]) -> None:
    """One warning when ``--queues`` names a queue no task of the app uses.

    Not an error: another release of the app (deployed next, or still draining) may use
    it, and serving an empty queue costs one read.
    """
    unknown = [queue for queue in queues if queue not in app.queues]
    if unknown:
        log.warning(
            "--queues names %s, which no task of the app uses (its queues: %s); serving it anyway",
            ", ".join(unknown), ", ".join(app.queues),
        )  # fmt: skip


def _supervise(
    app_spec: str, processes: int, *, embedded: bool, url: str | None, metrics_port: int | None
) -> None:
    """Run ``processes`` single workers with this command's options under a supervisor.

    With ``--embedded`` the supervisor runs the one server and gives the children its URL;
    with ``--metrics-port`` it serves the one metrics endpoint of all of them (see
    :class:`lockgate.metrics.SupervisorMetrics`).
    """
    from lockgate.supervisor import Supervisor

    ctx = click.get_current_context()
    with reported_errors(), contextlib.ExitStack() as stack:
        on_exit: Callable[[int], None] | None = None
        to_metrics: list[str] = []  # where the workers write what the endpoint serves
        if metrics_port is not None:
            from lockgate.metrics import SupervisorMetrics  # without the extra: one line

            endpoint = stack.enter_context(SupervisorMetrics(metrics_port))
            on_exit, to_metrics = endpoint.process_exited, ["--metrics-dir", endpoint.directory]
        if embedded:
            from lockgate.embedded import EmbeddedServer

            server = stack.enter_context(EmbeddedServer())
            url = server.url
            click.echo(f"embedded server at {server.url}", err=True)
        command = [
            sys.executable, "-m", "lockgate", "worker", app_spec,
            "--log-level", effective_log_level(),
            *_given_options(
                ctx, skip={"embedded", "url", "processes", "metrics_port", "metrics_dir"}
            ),
            *(["--url", url] if url else []), "--processes", "1", *to_metrics,
        ]  # fmt: skip
        Supervisor(command, processes, on_exit=on_exit).run()


def _given_options(ctx: click.Context, skip: set[str]) -> list[str]:
    """The command's options again as arguments, with the values they were parsed to."""
    argv: list[str] = []
    for param in ctx.command.params:
        if (
            not isinstance(param, click.Option)
            or not param.expose_value  # --log-level: the caller passes the effective one
            or param.name is None
            or param.name in skip
        ):
            continue
        value = ctx.params[param.name]
        if param.is_flag:
            flag = param.opts[0] if value else next(iter(param.secondary_opts), None)
            argv += [flag] if flag else []
        elif value is not None:
            for one in value if param.multiple else (value,):
                argv += [param.opts[0], str(one)]
    return argv


@main.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.argument("task_name", metavar="TASK")
@click.option("--args", "args_json", default="[]", help="Positional arguments, a JSON list.")
@click.option("--kwargs", "kwargs_json", default="{}", help="Keyword arguments, a JSON object.")
@click.option("--priority", default=None, help="Level for this job (default: the task's).")
@click.option("--job-id", default=None, help="Stable job id (a duplicate is not enqueued).")
@url_option
@log_level_option
def enqueue(
    app_spec: str,
    task_name: str,
    args_json: str,
    kwargs_json: str,
    priority: str | None,
    job_id: str | None,
    url: str | None,
) -> None:
    """Enqueue one run of TASK."""
    app = _loaded(app_spec, url)
    task = app.tasks.get(task_name)
    if task is None:
        known = ", ".join(sorted(app.tasks)) or "none"
        raise click.BadParameter(f"unknown task {task_name!r} (known: {known})", param_hint="TASK")
    args = _json_arg(args_json, list, "--args")
    kwargs = _json_arg(kwargs_json, dict, "--kwargs")
    with reported_errors():
        args, kwargs = task.prepare(args, kwargs)  # JSON text to the annotated types
        result = task.enqueue(*args, job_id=job_id, priority=priority, **kwargs)
    state = "enqueued" if result.created else "already queued or running (not enqueued)"
    click.echo(f"{result.job_id} {state}")


def _json_arg(value: str, kind: type, option: str) -> Any:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f"not JSON: {e}", param_hint=option) from e
    if not isinstance(parsed, kind):
        raise click.BadParameter(f"must be a JSON {kind.__name__}", param_hint=option)
    return parsed


STATS_COLUMNS = (
    Column("queue", shrink="truncate", min_width=5),
    Column("level", shrink="truncate", min_width=5),
    *(Column(header, align="right") for header in
      ("waiting", "pending", "delayed", "workers", "done", "retried", "dead")),
    # The first to give up width, over two or three header lines, before a name is cut.
    Column("oldest wait ms", align="right", shrink="wrap", min_width=6, priority=-1),
)  # fmt: skip


@main.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@url_option
@log_level_option
def stats(app_spec: str, as_json: bool, url: str | None) -> None:
    """Per queue and level: waiting, pending, delayed, live workers, done, retried and
    dead-lettered in the last 15 minutes, oldest wait."""
    app = _loaded(app_spec, url)

    async def collect() -> StatsReport:
        try:
            return await stats_report(app)
        finally:
            await app.aclose()

    with reported_errors():
        result = run_async(collect())
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
        return
    width = terminal_width()
    rows = [_stats_row(result, row) for row in result.stats.levels]
    title = f"lockgate {app.namespace} @ {masked(app.redis_url)}"
    note = (f"workers: live workers serving the queue; done, retried, dead: the last "
            f"{result.activity.minutes} min")  # fmt: skip
    caption = f"dead letters: {result.stats.dead_letters}"
    table = render(STATS_COLUMNS, rows, width)
    click.echo("\n".join([fit(title, width), *table, fit(note, width), caption]))


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _stats_row(report: StatsReport, row: LevelStats) -> tuple[str, ...]:
    recent = report.recent(row)
    counts = (row.waiting, row.pending, row.delayed, report.serving(row.queue), recent.done,
              recent.retried, recent.dead)  # fmt: skip
    return (row.queue, row.level, *map(str, counts), _dash(row.oldest_wait_ms))


@main.group()
@click.argument("app_spec", metavar="MODULE:APP")
@url_option
@log_level_option
@click.pass_context
def dlq(ctx: click.Context, app_spec: str, url: str | None) -> None:
    """Inspect, replay, trim and purge the dead-letter queue of MODULE:APP."""
    # Each subcommand imports the app when it runs: click runs this callback before it
    # parses the subcommand's --help, which must not need an importable app.
    ctx.obj = functools.partial(_loaded, app_spec, url)


def _letter(app: App, entry_id: str) -> deadletter.DeadLetter:
    letter = deadletter.show_dead(app, entry_id)
    if letter is None:
        click.echo(f"error: no dead letter with id {entry_id!r}", err=True)
        sys.exit(EXIT_USAGE)
    return letter


def _consent(yes: bool, action: str) -> None:
    """Refuse ``action`` (one line, exit 2) when nobody is at a terminal to confirm it and
    ``--yes`` was not given: a script must say it means it, not get it by default."""
    if not yes and not sys.stdin.isatty():
        click.echo(
            f"error: not {action} without confirmation (stdin is not a terminal); pass --yes",
            err=True,
        )
        sys.exit(EXIT_USAGE)


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
        _consent(yes, "replaying dead letters in bulk")
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
    _consent(yes, "purging the dead letters")
    app = load()
    with reported_errors():
        if not yes and (count := deadletter.count_dead(app)):
            click.confirm(
                f"delete all {count} dead letters of {app.namespace}?", abort=True, err=True
            )
        click.echo(f"purged {deadletter.purge(app)} dead letters")


@main.group()
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
        from lockgate.postgres import init_schema, masked_dsn

        init_schema(dsn, table=table)
    click.echo(f"table {table} ready at {masked_dsn(dsn)}")


@main.command()
@click.option("--url", default=None,
              help=f"Redis URL (default: ${REDIS_URL_ENV}, else an embedded server).")  # fmt: skip
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also draw each policy's waits and shares into this PNG "
                   "(needs lockgate[plot]).")  # fmt: skip
@log_level_option
@click.pass_context
def demo(ctx: click.Context, url: str | None, plot: Path | None) -> None:
    """The lesson's scenario: a low-priority flood with e-mails and payments arriving."""
    with reported_errors():
        from lockgate.demo import run_demo

        # lockgate's own INFO lines would bury the progress, unless a level was asked for.
        run_demo(url, quiet=LOG_LEVEL_KEY not in ctx.meta, plot=plot)


# The dashboard command adds itself to main when imported (so importing it first works too).
import lockgate.cli_dashboard  # noqa: E402

# The queue group adds itself to main when imported (so importing it first works too).
import lockgate.cli_queue  # noqa: E402, F401
