"""``task.using(...)``: a task with its enqueue options set, whose ``enqueue`` takes only
the task's own arguments (the name follows Django's ``Task.using``).

A task whose parameters are named like enqueue options (``def notify(user, priority,
delay)``) cannot get them through a plain ``enqueue``, which takes those keywords for
itself; ``notify.using(priority="critical").enqueue("u", priority="high", delay=3)``
passes all three to the task. It is also the per-call ``queue=`` (Celery's
``apply_async(queue=...)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

from lockgate.core.message import Message
from lockgate.core.options import EnqueueOptions

P = ParamSpec("P")
E = TypeVar("E")
E_co = TypeVar("E_co", covariant=True)


class Sends(Protocol[E_co]):
    """What a configured task uses of its task (:class:`lockgate.api.task.Task`): the
    one body of each operation, there."""

    def build(
        self,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        job_id: str | None = ...,
        priority: str | None = ...,
        delay: float | timedelta | None = ...,
        eta: datetime | None = ...,
        queue: str | None = ...,
    ) -> Message: ...

    def send(self, message: Message) -> E_co: ...

    async def send_async(self, message: Message) -> E_co: ...

    def send_on_commit(self, conn: Any, message: Message) -> str: ...

    async def send_on_commit_async(self, conn: Any, message: Message) -> str: ...


class ConfiguredTask(Generic[P, E]):
    """A task with enqueue options set ([Task.using][lockgate.Task.using]): its
    ``enqueue``, ``enqueue_async``, ``message`` and ``enqueue_on_commit`` take the task's
    own arguments only, any name included, and behave as the task's do otherwise (the same
    results and errors).

    Attributes:
        options: the options every job it builds gets.
    """

    __slots__ = ("_task", "options")

    def __init__(self, task: Sends[E], options: EnqueueOptions) -> None:
        self._task = task
        self.options = options

    def __repr__(self) -> str:
        return f"<{self._task!r} using {self.options}>"

    def message(self, *args: P.args, **kwargs: P.kwargs) -> Message:
        """Build a job without sending it (see [Task.message][lockgate.Task.message]).

        Raises:
            InvalidArguments: the arguments do not fit the task.
            SerializationError: an argument would not arrive as it is.
            ConfigError: see [Task.message][lockgate.Task.message].
        """
        return self._task.build(args, kwargs, *self.options)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> E:
        """Queue a run of the task (see [Task.enqueue][lockgate.Task.enqueue]).

        Returns:
            The job's id, and whether it was created (False for a duplicate id).

        Raises:
            InvalidArguments: the arguments do not fit the task.
            ConfigError: see [Task.message][lockgate.Task.message].
            SerializationError: an argument would not arrive as it is.
            OutcomeUnknown: no reply came once the job was sent.
            ConnectionFailed: Redis cannot be reached (nothing was sent).
        """
        return self._task.send(self.message(*args, **kwargs))

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> E:
        """The async form of [enqueue][lockgate.api.using.ConfiguredTask.enqueue]."""
        return await self._task.send_async(self.message(*args, **kwargs))

    def enqueue_on_commit(self, conn: Any, *args: P.args, **kwargs: P.kwargs) -> str:
        """Queue a run of the task once the transaction ``conn`` is in commits (see
        [Task.enqueue_on_commit][lockgate.Task.enqueue_on_commit]).

        Returns:
            The job's id.
        """
        return self._task.send_on_commit(conn, self.message(*args, **kwargs))

    async def enqueue_on_commit_async(self, conn: Any, *args: P.args, **kwargs: P.kwargs) -> str:
        """The async form of
        [enqueue_on_commit][lockgate.api.using.ConfiguredTask.enqueue_on_commit] (see
        [Task.enqueue_on_commit_async][lockgate.Task.enqueue_on_commit_async])."""
        return await self._task.send_on_commit_async(conn, self.message(*args, **kwargs))
