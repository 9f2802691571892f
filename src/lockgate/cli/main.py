"""The ``lockgate`` command group, and the one place its commands are added to it.

Each command lives in a module of its own (:mod:`~lockgate.cli.worker`,
:mod:`~lockgate.cli.enqueue`, :mod:`~lockgate.cli.stats`, :mod:`~lockgate.cli.dlq`,
:mod:`~lockgate.cli.pg`, :mod:`~lockgate.cli.demo`, :mod:`~lockgate.cli.dashboard`,
:mod:`~lockgate.cli.queue`, :mod:`~lockgate.cli.flow`, :mod:`~lockgate.cli.job`,
:mod:`~lockgate.cli.cancel`) and takes what it shares with the others from
:mod:`~lockgate.cli.common` and :mod:`~lockgate.cli.options`; none imports this module,
which imports them all.
"""

from __future__ import annotations

import logging

import click

from lockgate.cli.cancel import cancel
from lockgate.cli.dashboard import dashboard
from lockgate.cli.demo.command import demo
from lockgate.cli.dlq import dlq
from lockgate.cli.enqueue import enqueue
from lockgate.cli.flow import flow
from lockgate.cli.job import job
from lockgate.cli.options import effective_log_level, log_level_option
from lockgate.cli.pg import pg
from lockgate.cli.queue import queue
from lockgate.cli.stats import stats
from lockgate.cli.worker import worker

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@click.group()
@click.version_option(package_name="lockgate", prog_name="lockgate")
@log_level_option
def main() -> None:
    """lockgate: background jobs on Redis Streams with priorities and idempotency."""
    logging.basicConfig(level=effective_log_level(), format=LOG_FORMAT)


for command in (worker, enqueue, stats, dlq, pg, demo, dashboard, queue, flow, job, cancel):
    main.add_command(command)
