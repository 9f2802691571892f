"""The ``lockgate demo`` command; its body is :func:`lockgate.cli.demo.scenario.run_demo`."""

from __future__ import annotations

from pathlib import Path

import click

from lockgate.cli.common import reported_errors
from lockgate.cli.demo.scenario import run_demo
from lockgate.cli.options import log_level_given, log_level_option
from lockgate.core.config import REDIS_URL_ENV


@click.command()
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
        # lockgate's own INFO lines would bury the progress, unless a level was asked for.
        run_demo(url, quiet=not log_level_given(ctx), plot=plot)
