"""The options several commands take: ``--log-level`` (on the group and on every command
alike) and ``--url``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import click

from lockgate.core.config import REDIS_URL_ENV

F = TypeVar("F", bound=Callable[..., Any])
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_LEVEL_KEY = "lockgate.log_level"  # in ctx.meta, which every nested context shares


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


def log_level_given(ctx: click.Context) -> bool:
    """Whether the command line gave a ``--log-level`` (anywhere)."""
    return LOG_LEVEL_KEY in ctx.meta


url_option = click.option(
    "--url", default=None, help=f"Redis URL (overrides the app's and ${REDIS_URL_ENV})."
)
