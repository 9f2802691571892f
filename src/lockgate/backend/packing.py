"""Commands packed by hiredis (C) on async clients, as redis-py's sync clients already do.

redis-py's async connections build the wire form of every argument in Python; for a worker
whose scripts take a dozen arguments per job that was the largest cost in its profile
(about a fifth of its CPU per job). hiredis's ``pack_command`` does the same in C.
Without hiredis installed, clients keep redis-py's own packing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_pack: Callable[[tuple[Any, ...]], bytes] | None
try:
    from hiredis import pack_command as _pack
except ImportError:  # pragma: no cover - hiredis comes with redis[hiredis]
    _pack = None


class HiredisPacking:
    """Mixin for a redis-py async connection class: pack commands with hiredis."""

    def pack_command(self, *args: Any) -> list[bytes]:
        assert _pack is not None
        first = args[0]
        # A command name with a space ('FUNCTION LOAD') goes out as separate arguments.
        if isinstance(first, str):
            if " " in first:
                args = (*first.encode().split(), *args[1:])
        elif b" " in first:
            args = (*first.split(), *args[1:])
        return [_pack(args)]


def with_hiredis_packing(pool: Any) -> Any:
    """Make ``pool`` (an async connection pool) open connections that pack with hiredis."""
    if _pack is None:
        return pool
    base = pool.connection_class
    pool.connection_class = type(f"Hiredis{base.__name__}", (HiredisPacking, base), {})
    return pool
