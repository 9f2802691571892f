"""``lockgate dashboard``: serve the web dashboard of an App (the ``dashboard`` extra).

It binds to 127.0.0.1 unless told otherwise, and on any other address it refuses to
start without a token (one line, exit 2). The token is never printed or logged: the
access log's request lines are scrubbed of any ``token=`` query value, and the dashboard
only takes the token as a bearer header or from its login form.
"""

from __future__ import annotations

import logging
import sys

import click

from lockgate.cli.common import EXIT_USAGE, load_app, reported_errors
from lockgate.cli.options import effective_log_level, log_level_option, url_option

TOKEN_ENV = "LOCKGATE_DASHBOARD_TOKEN"
ACCESS_LOGGER = "uvicorn.access"


class ScrubTokens(logging.Filter):
    """Replaces the value of any ``token=`` query parameter in a log record's arguments
    (uvicorn's access log prints each request's path with its query)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from lockgate.dashboard.security import scrub

        if isinstance(record.args, tuple):
            record.args = tuple(scrub(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str):
            record.msg = scrub(record.msg)
        return True


@click.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind; any but a loopback one needs a token.",
)
@click.option("--port", type=click.IntRange(0, 65535), default=8700, show_default=True)
@click.option(
    "--token",
    envvar=TOKEN_ENV,
    default=None,
    show_envvar=True,
    help="Access token every request must carry (prefer the environment "
    "variable: a command line is visible to other users).",
)
@click.option("--read-only", is_flag=True, help="No buttons; every POST is refused (403).")
@url_option
@log_level_option
def dashboard(
    app_spec: str, host: str, port: int, token: str | None, read_only: bool, url: str | None
) -> None:
    """Serve the web dashboard of MODULE:APP (needs the dashboard extra).

    Queues, workers, throughput, wait times, delayed jobs, dead letters (replay, purge),
    job lookup, pause and resume. Binds to 127.0.0.1; on any other address a token is
    required. With a token, log in once in the browser or send
    "Authorization: Bearer TOKEN".
    """
    with reported_errors():
        from lockgate.dashboard.security import bind_refusal

        refusal = bind_refusal(host, token or None)
        if refusal is not None:
            click.echo(f"error: {refusal}", err=True)
            sys.exit(EXIT_USAGE)
        from lockgate.dashboard import create_app

        try:
            import uvicorn
        except ImportError as e:
            from lockgate.errors import MissingExtra

            raise MissingExtra("lockgate dashboard", "dashboard", "uvicorn") from e
        app = load_app(app_spec, url)
        asgi = create_app(app, token=token or None, read_only=read_only)
        config = uvicorn.Config(
            asgi, host=host, port=port, log_level=effective_log_level().lower(),
            server_header=False,
        )  # fmt: skip
        logging.getLogger(ACCESS_LOGGER).addFilter(ScrubTokens())
        shown = f"[{host}]" if ":" in host else host
        mode = ", read-only" if read_only else ""
        guard = "token required" if token else "no token"
        click.echo(
            f"lockgate dashboard of {app.namespace} at http://{shown}:{port}/ ({guard}{mode})"
        )
        uvicorn.Server(config).run()
