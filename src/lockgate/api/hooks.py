"""A worker's lifecycle hooks: what runs before its first job and after its last.

``@app.on_startup`` functions run in declaration order once a worker has reached Redis
and before it takes a job; ``@app.on_shutdown`` ones in reverse order after its last job
settled, so what a later hook built on an earlier one is torn down first. Either may be
sync or async, and take no argument or the App (whose ``state`` holds what they set up:
a database pool, an HTTP client). A startup hook that raises stops the worker before it
takes a job, with :class:`~lockgate.errors.StartupFailed` (one line, exit 2 from the
CLI; its traceback is logged at DEBUG); no shutdown hook runs then, as the process is
about to end and half-built state would only make them fail too (a program that runs
workers itself and goes on should tear down what the hooks that ran built). A shutdown
hook that raises is logged and the others still run.

Shutdown hooks run after the last job the worker could wait for: a sync run abandoned at
its timeout or by a second stop may still be running in its thread, and a job that runs
in a child process of its own (a redelivered job, see :mod:`lockgate.process.isolation`) sees
``app.state`` as the parent built it before the fork: a pool there is the parent's, so
such a task should open what it needs itself. A sync hook runs on the event loop: the
worker's heartbeats wait for it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from lockgate.core.logs import get_logger
from lockgate.errors import ConfigError, StartupFailed

Hook = Callable[..., Any]
H = TypeVar("H", bound=Hook)
log = get_logger(__name__)


def _name(hook: Hook) -> str:
    return getattr(hook, "__qualname__", None) or repr(hook)


def _check(hook: Hook, kind: str) -> Hook:
    if not callable(hook):
        raise ConfigError(f"{kind} takes a function, got {hook!r}")
    try:
        parameters = inspect.signature(hook).parameters.values()
    except (TypeError, ValueError):
        return hook  # a builtin or C function: called as declared
    required = [
        p for p in parameters
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]  # fmt: skip
    if len(required) > 1:
        raise ConfigError(
            f"{kind} hook {_name(hook)} takes {len(required)} arguments; it takes none, or "
            "the App (its state is app.state)"
        )
    return hook


class Hooks:
    """The startup and shutdown hooks of one App."""

    def __init__(self) -> None:
        self.startup: list[Hook] = []
        self.shutdown: list[Hook] = []

    def on_startup(self, hook: H) -> H:
        """Register ``hook`` to run before a worker's first job; returns it unchanged."""
        self.startup.append(_check(hook, "on_startup"))
        return hook

    def on_shutdown(self, hook: H) -> H:
        """Register ``hook`` to run after a worker's last job; returns it unchanged."""
        self.shutdown.append(_check(hook, "on_shutdown"))
        return hook

    async def start(self, app: Any) -> None:
        """Run the startup hooks in order.

        Raises:
            StartupFailed: a hook raised (the ones after it did not run).
        """
        for hook in self.startup:
            try:
                await _call(hook, app)
            except Exception as e:
                log.debug("on_startup hook %s failed", _name(hook), exc_info=True)
                raise StartupFailed(_name(hook), e) from e

    async def stop(self, app: Any) -> None:
        """Run the shutdown hooks, last declared first; a failure is logged, never raised."""
        for hook in reversed(self.shutdown):
            try:
                await _call(hook, app)
            except Exception:
                log.exception("on_shutdown hook %s failed", _name(hook))


async def _call(hook: Hook, app: Any) -> None:
    result = hook(app) if _takes_app(hook) else hook()
    if inspect.isawaitable(result):
        await result


def _takes_app(hook: Hook) -> bool:
    try:
        parameters = list(inspect.signature(hook).parameters.values())
    except (TypeError, ValueError):
        return False
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters
    )
