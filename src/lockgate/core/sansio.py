"""Sans-IO operations, written once for the sync and the async API.

An operation that needs round trips (a Redis call, a PostgreSQL insert, a task's own
call) is a generator: it yields what must be done, and receives the result (or has the
error raised at its ``yield``). :func:`drive` does each thing in this thread,
:func:`drive_async` awaits it: the only difference between the two APIs is there.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Generator, Iterator
from typing import Any, Generic, TypeVar

_Do = TypeVar("_Do")
_T = TypeVar("_T")


def drive(steps: Generator[_Do, Any, _T], do: Callable[[_Do], Any]) -> _T:
    """Run ``steps`` to its end in this thread.

    Args:
        steps: the operation; what it yields goes to ``do``, and what ``do`` returns (or
            raises) back to it.
        do: how a thing it yields is done (``operator.call`` for a function).

    Returns:
        What ``steps`` returned; what it raised propagates.
    """
    shell = _Shell(steps)
    for todo in shell:
        try:
            shell.send(do(todo))
        except BaseException as e:
            shell.throw(e)
    return shell.result


async def drive_async(steps: Generator[_Do, Any, _T], do: Callable[[_Do], Awaitable[Any]]) -> _T:
    """Run ``steps`` to its end on the running loop: :func:`drive`, each thing awaited."""
    shell = _Shell(steps)
    for todo in shell:
        try:
            shell.send(await do(todo))
        except BaseException as e:
            shell.throw(e)
    return shell.result


class _Shell(Generic[_Do, _T]):
    """The driving of one sans-IO generator: iterate it for what to do; answer each with
    :meth:`send` (its result) or :meth:`throw` (its error); :attr:`result` is what the
    generator returned. What the generator raises propagates from the iteration."""

    result: _T

    def __init__(self, steps: Generator[_Do, Any, _T]) -> None:
        self._steps = steps
        self._resume: Callable[[], _Do] = functools.partial(steps.send, None)

    def __iter__(self) -> Iterator[_Do]:
        while True:
            try:
                todo = self._resume()
            except StopIteration as stop:
                self.result = stop.value
                return
            yield todo

    def send(self, value: Any) -> None:
        """Resume the generator with ``value``, the result of what it asked for."""
        self._resume = functools.partial(self._steps.send, value)

    def throw(self, error: BaseException) -> None:
        """Resume the generator with ``error`` raised where it asked (outside the
        shell's ``except`` block, so the error's context is the generator's own)."""
        self._resume = functools.partial(self._steps.throw, error)
