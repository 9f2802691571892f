"""What a display shows of a secret task's arguments and result. Pure, no I/O.

A task declared ``@app.task(secret_args=True)`` enqueues jobs with ``Job.secret`` set.
Its arguments and result still travel in the job, and the task receives them as they
are; every display (job logs, ``lockgate job``, dead-letter listings, the dashboard)
passes them through these functions first, so the values never reach a page or a log.
"""

from __future__ import annotations

from typing import Any

import msgspec

from lockgate.core import codec
from lockgate.errors import SerializationError

MASK = "***"
"""The text shown instead of a secret value."""


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


def shown_job(data: str) -> tuple[str, bool]:
    """A stored job's JSON as a display may show it (a dead letter's, say).

    Args:
        data: the job as stored (see :func:`lockgate.core.codec.encode`).

    Returns:
        ``(text, secret)``: for a job of a ``secret_args`` task, its JSON with each
        argument made :data:`MASK` (an undecodable one that says it is secret: MASK
        whole); any other, ``data`` itself.
    """
    if _SECRET_FLAG not in data:  # the codec's compact form: no decode for plain jobs
        return data, False
    try:
        job = codec.decode(data)
    except SerializationError:
        return MASK, True
    if not job.secret:  # an argument's text held the flag
        return data, False
    args, kwargs = mask_args(job.args, job.kwargs, True)
    masked = msgspec.structs.replace(job, args=args, kwargs=kwargs)
    return codec.encode(masked).decode(), True
