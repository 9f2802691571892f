"""A write deadline on async connections that costs no task per command, and a retry
that keeps the errors of its earlier tries.

redis-py's async connection bounds a write, once it has a socket timeout, with
``asyncio.wait_for``, which on Python 3.11 wraps every command's write in a task of its
own: a worker whose client gained a socket timeout (every call of a worker has a
deadline, see :mod:`lockgate.backend.connections`) drained half as many jobs a second. Here the
same deadline is an ``asyncio.timeout`` around the drain (a timer handle, no task), the
errors and the disconnect on failure as redis-py's own; reads keep redis-py's deadline,
already an ``asyncio.timeout``.

redis-py raises only the last try's error when its retry gives up; a call whose first try
lost its connection after sending and whose retry was refused would look as if nothing
had been sent. :class:`ChainedRetry` links each try's error to the one before (see
:func:`earlier_try`), so :func:`lockgate.faults.may_have_landed` sees every try. Not
``__context__``: Python sets that on redis-py's own errors too (a connect timeout's is
the socket's timeout), which says nothing of an earlier try.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import redis
from redis.asyncio.retry import Retry as AsyncRetry

T = TypeVar("T")


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
            if self._writer.transport.get_write_buffer_size():
                # Not all sent at once: the drain may wait for the server to read.
                async with asyncio.timeout(deadline):
                    await self._writer.drain()
            else:
                await self._writer.drain()  # only raises what the transport met; no wait
        except TimeoutError:
            # Dropped, not flushed: a close would send the rest of the command whenever
            # the server reads again, and keep the transport until then.
            self._writer.transport.abort()
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


EARLIER_TRY = "_lockgate_earlier_try"


def earlier_try(error: BaseException) -> BaseException | None:
    """The error of the try before the one that raised ``error``, if a
    :class:`ChainedRetry` made both."""
    earlier = getattr(error, EARLIER_TRY, None)
    return earlier if isinstance(earlier, BaseException) else None


class ChainedRetry(AsyncRetry):
    """redis-py's async retry, with each try's error linked to the previous try's (see
    :func:`earlier_try`)."""

    async def call_with_retry(
        self,
        do: Callable[[], Awaitable[T]],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> T:
        earlier: list[BaseException] = []

        async def each_try() -> T:
            try:
                return await do()
            except Exception as e:
                if earlier and earlier[-1] is not e:
                    setattr(e, EARLIER_TRY, earlier[-1])
                earlier.append(e)
                raise

        return await super().call_with_retry(each_try, fail, is_retryable, with_failure_count)
