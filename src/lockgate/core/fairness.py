"""A job's fairness key (``@app.task(key_by=...)``), from its arguments. Pure, no I/O.

Within a level the streams backend serves jobs round-robin across their keys (see
``backend/lua/_fair.lua``): one tenant's flood takes one turn a round, as a tenant with a
few jobs does. This module decides the key at enqueue; the key travels in the job.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lockgate.errors import ConfigError

# The longest fairness key, in UTF-8 bytes: it becomes part of Redis key names.
MAX_KEY_BYTES = 512

KeyOf = Callable[[Sequence[Any], Mapping[str, Any]], str | None]

_NAMED = (
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.KEYWORD_ONLY,
)


def key_function(
    task: str, key_by: str | Callable[..., Any] | None, signature: inspect.Signature
) -> KeyOf | None:
    """How a task's jobs get their key from their arguments (as given at enqueue), or
    None for a task without ``key_by``.

    Raises:
        ConfigError: ``key_by`` is a string that names none of the task's parameters
            (``*args`` and ``**kwargs`` do not count), or neither a string nor callable.
    """
    if key_by is None:
        return None
    if callable(key_by):
        return _called(task, key_by)
    if not isinstance(key_by, str):
        raise ConfigError(
            f"task {task!r}: key_by must be a parameter's name or a function, "
            f"not {type(key_by).__name__}"
        )
    parameters = list(signature.parameters.values())
    named = [p.name for p in parameters if p.kind in _NAMED]
    if key_by not in named:
        raise ConfigError(
            f"task {task!r}: key_by={key_by!r} is not one of its parameters "
            f"({', '.join(named) or 'it has none'})"
        )
    parameter = signature.parameters[key_by]
    position = (
        parameters.index(parameter)
        if parameter.kind is not inspect.Parameter.KEYWORD_ONLY
        else None
    )
    default = parameter.default

    def of_argument(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        if position is not None and position < len(args):
            value = args[position]
        else:
            value = kwargs.get(key_by, default)
            if value is inspect.Parameter.empty:  # missing: the arguments' check says so
                return None
        return checked(task, str(value))

    return of_argument


def _called(task: str, key_by: Callable[..., Any]) -> KeyOf:
    def of_function(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        key = key_by(*args, **kwargs)
        if not isinstance(key, str):
            raise ConfigError(
                f"task {task!r}: its key_by function returned {type(key).__name__}, not str"
            )
        return checked(task, key)

    return of_function


def checked(task: str, key: str) -> str | None:
    """A key as a job carries it: None for ``""`` (the jobs without a key).

    Raises:
        ConfigError: it is over ``MAX_KEY_BYTES`` in UTF-8.
    """
    if not key:
        return None
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise ConfigError(
            f"task {task!r}: a fairness key is at most {MAX_KEY_BYTES} bytes, "
            f"this one {len(key.encode('utf-8', 'surrogatepass'))}: {key[:40]!r}..."
        )
    return key
