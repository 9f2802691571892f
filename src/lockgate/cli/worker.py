"""``lockgate worker``: run a worker, or several under a supervisor (``--processes``)."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
from collections.abc import Callable

import click

from lockgate.api.app import App
from lockgate.cli.common import load_app, reported_errors, run_async
from lockgate.cli.options import effective_log_level, log_level_option, url_option
from lockgate.core.config import WorkerConfig
from lockgate.core.logs import get_logger
from lockgate.integrations.outbox import TABLE as OUTBOX_TABLE
from lockgate.integrations.outbox import outbox_of
from lockgate.worker.joblog import JobLog, use_json
from lockgate.worker.loop import Worker

log = get_logger(__name__)


@click.command()
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
@click.option("--wait", "redis_wait", type=click.FloatRange(min=0), default=30.0,
              show_default=True, metavar="SECONDS",
              help="How long to wait for Redis at start (then exit 2).")  # fmt: skip
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
@click.option("--outbox", default=None, metavar="DSN",
              help="Relay the durable outbox at this PostgreSQL DSN to Redis (sets the "
              "app's App(outbox=...)).")  # fmt: skip
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
    redis_wait: float,
    processes: int,
    burst: bool,
    no_scheduler: bool,
    metrics_port: int | None,
    metrics_dir: str | None,
    log_format: str,
    log_jobs: bool,
    outbox: str | None,
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
    app = load_app(app_spec, url)
    with reported_errors(), contextlib.ExitStack() as stack:
        if outbox is not None:  # the App's own table, if it names one
            app.outbox = outbox_of(outbox, getattr(app.outbox, "table", OUTBOX_TABLE))
        if embedded:
            from lockgate.integrations.embedded import EmbeddedServer

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
            redis_wait=redis_wait,
        )
        _warn_unknown_queues(app, config.queues)
        running = Worker(app, config)
        if log_jobs:
            running.watchers.add(JobLog(app).enable())
        metrics = None
        if metrics_port is not None or metrics_dir is not None:
            from lockgate.ops.metrics import WorkerMetrics  # without the extra: one line naming it

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
    :class:`lockgate.ops.metrics.SupervisorMetrics`).
    """
    from lockgate.process.supervisor import Supervisor

    ctx = click.get_current_context()
    with reported_errors(), contextlib.ExitStack() as stack:
        on_exit: Callable[[int], None] | None = None
        to_metrics: list[str] = []  # where the workers write what the endpoint serves
        if metrics_port is not None:
            from lockgate.ops.metrics import SupervisorMetrics  # without the extra: one line

            endpoint = stack.enter_context(SupervisorMetrics(metrics_port))
            on_exit, to_metrics = endpoint.process_exited, ["--metrics-dir", endpoint.directory]
        if embedded:
            from lockgate.integrations.embedded import EmbeddedServer

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
