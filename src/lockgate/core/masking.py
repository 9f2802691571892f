"""What a display shows of a secret task's arguments and result. Pure, no I/O.

A task declared ``@app.task(secret_args=True)`` enqueues jobs with ``Job.secret`` set.
Its arguments and result still travel in the job, and the task receives them as they
are; every display (job logs, ``lockgate job``, dead-letter listings, the dashboard)
passes them through these functions first, so the values never reach a page or a log.
A display masks a job that carries the flag, and also one whose task the displaying App
declares secret (:func:`is_secret`): a job from a producer whose task lacks the option
(an older deploy) is masked all the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import msgspec

from lockgate.core import codec
from lockgate.core.tasks import TaskSettings
from lockgate.errors import SerializationError

MASK = "***"
"""The text shown instead of a secret value."""


class Declared(Protocol):
    """A declared task (``App.tasks``' values): what :func:`is_secret` reads of it."""

    @property
    def settings(self) -> TaskSettings:
        """Its options."""
        ...


def is_secret(flagged: bool, task: str, declared: Mapping[str, Declared]) -> bool:
    """Whether a display masks a job's arguments and result.

    Args:
        flagged: the job says so (``Job.secret``, stamped at enqueue; False when not
            known, as for an ended job, whose stored job is gone).
        task: its task's name.
        declared: the displaying App's tasks (``App.tasks``).

    Returns:
        True when ``flagged``, or when ``declared`` has ``task`` with ``secret_args``.
    """
    found = declared.get(task)
    return flagged or (found is not None and found.settings.secret_args)


def mask_value(value: Any, secret: bool) -> Any:
    """``value`` as a display may show it.

    Args:
        value: an argument or a result.
        secret: whether it belongs to a job of a ``secret_args`` task.

    Returns:
        :data:`MASK` when ``secret``, else ``value`` itself.
    """
    return MASK if secret else value


def mask_args(
    args: list[Any] | tuple[Any, ...], kwargs: dict[str, Any], secret: bool
) -> tuple[list[Any], dict[str, Any]]:
    """A job's arguments as a display may show them.

    Args:
        args: its positional arguments.
        kwargs: its keyword arguments.
        secret: whether the job belongs to a ``secret_args`` task.

    Returns:
        ``(args, kwargs)``, each positional value and each keyword value made
        :data:`MASK` when ``secret`` (the keywords keep their names, the list its
        length); copies of both, unchanged, otherwise.
    """
    if not secret:
        return list(args), dict(kwargs)
    return [MASK] * len(args), dict.fromkeys(kwargs, MASK)


_SECRET_FLAG = '"secret":true'  # how the codec writes Job.secret when set


def shown_job(data: str, declared: bool = False) -> tuple[str, bool]:
    """A stored job's JSON as a display may show it (a dead letter's, say).

    Args:
        data: the job as stored (see :func:`lockgate.core.codec.encode`).
        declared: the displaying App declares the job's task secret (:func:`is_secret`).

    Returns:
        ``(text, secret)``: for a job of a ``secret_args`` task (``declared``, or the job
        says so), its JSON with each argument made :data:`MASK` (an undecodable one:
        MASK whole); any other, ``data`` itself.
    """
    if not declared and _SECRET_FLAG not in data:  # the codec's compact form: no decode
        return data, False
    try:
        job = codec.decode(data)
    except SerializationError:
        return MASK, True
    if not (declared or job.secret):  # an argument's text held the flag
        return data, False
    args, kwargs = mask_args(job.args, job.kwargs, True)
    masked = msgspec.structs.replace(job, args=args, kwargs=kwargs)
    return codec.encode(masked).decode(), True
