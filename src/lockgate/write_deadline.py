"""A write deadline on async connections that costs no task per command.

redis-py's async connection bounds a write, once it has a socket timeout, with
``asyncio.wait_for``, which on Python 3.11 wraps every command's write in a task of its
own: a worker whose client gained a socket timeout (every call of a worker has a
deadline, see :mod:`lockgate.connections`) drained half as many jobs a second. Here the
same deadline is an ``asyncio.timeout`` around the drain (a timer handle, no task), the
errors and the disconnect on failure as redis-py's own; reads keep redis-py's deadline,
already an ``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import redis


class DeadlineWrites:
    """Mixin for a redis-py async connection class: bounded writes without a task each."""

    socket_timeout: float | None
    is_connected: bool
    _writer: Any

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        deadline = self.socket_timeout
        if not deadline:
            await super().send_packed_command(command, check_health)  # type: ignore[misc]
            return
        if not self.is_connected:
            await self.connect_check_health(check_health=False)  # type: ignore[attr-defined]
        if check_health:
            await self.check_health()  # type: ignore[attr-defined]
        if isinstance(command, str):
            command = command.encode()
        if isinstance(command, bytes):
            command = [command]
        try:
            self._writer.writelines(command)
            async with asyncio.timeout(deadline):
                await self._writer.drain()
        except TimeoutError:
            await self.disconnect(nowait=True)  # type: ignore[attr-defined]
            raise redis.TimeoutError("Timeout writing to socket") from None
        except OSError as e:
            await self.disconnect(nowait=True)  # type: ignore[attr-defined]
            number, text = ("UNKNOWN", e.args[0]) if len(e.args) == 1 else e.args[:2]
            raise redis.ConnectionError(f"Error {number} while writing to socket. {text}.") from e
        except BaseException:
            # A write cut short (cancelled) leaves the stream mid-command: never reuse it.
            await self.disconnect(nowait=True)  # type: ignore[attr-defined]
            raise


def with_deadline_writes(connection_class: type[Any]) -> type[Any]:
    """``connection_class`` with :class:`DeadlineWrites` mixed in (once)."""
    if issubclass(connection_class, DeadlineWrites):
        return connection_class
    name = f"Deadline{connection_class.__name__}"
    return type(name, (DeadlineWrites, connection_class), {})
