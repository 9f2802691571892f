"""The outbox relay: moves the committed rows of the durable outbox into Redis.

A worker of an App with ``App(outbox=DSN)`` (or ``lockgate worker --outbox DSN``) runs one
beside its loop, a helper it owns and supervises (see :mod:`lockgate.worker.loop`); a burst
worker runs none. Each pass, in one PostgreSQL transaction: take up to :data:`BATCH` rows
of the App's namespace (``FOR UPDATE SKIP LOCKED``: relays of several workers share the
rows and never wait on each other), enqueue their jobs in one script call, each with its
row's once-only key, ``DELETE`` the rows, commit; then delete the once-only keys, which
are needed no more (see :mod:`lockgate.integrations.outbox`). A full batch is followed by
another pass at once; otherwise the relay waits for a ``NOTIFY`` of a commit, or
:data:`POLL` seconds at most (a notification can be missed: a relay that was reconnecting).

Faults: Redis or PostgreSQL unreachable (or the table missing) leaves the rows where they
are, in the outbox. The relay logs it once (a WARNING naming what is down), retries with a
capped backoff (0.2 s doubling to 5 s), logs at INFO once it is back and relays what
waited. An error that cannot heal (Redis refuses this client) raises to the owner, which
stops the worker; a bug raises to the owner too, which logs it and restarts the relay.
Rows whose job cannot be enqueued at all (a job that does not decode, or over the App's
``max_payload_bytes``) are logged at ERROR with their content's size and deleted: they
would block the rows behind them forever.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from lockgate.api.app import App
from lockgate.backend.faults import classify, translated
from lockgate.core import codec
from lockgate.core.logs import get_logger
from lockgate.core.message import Message
from lockgate.core.policy import reconnect_delay
from lockgate.errors import LockgateError, SerializationError
from lockgate.integrations.outbox import (
    DELETE_SQL,
    ONCE_TTL,
    TAKE_SQL,
    UNDEFINED_TABLE,
    Outbox,
)
from lockgate.integrations.transactions import describe

log = get_logger(__name__)
BATCH = 500  # rows per pass, enqueued in one round trip
POLL = 1.0  # seconds: the longest wait between passes without a notification
ONCE_TTL_MS = round(ONCE_TTL.total_seconds() * 1000)
APPLICATION_NAME = "lockgate outbox relay"
# Connecting, and each statement: a relay never waits forever on a dead socket.
CONNECT_OPTIONS: dict[str, Any] = {
    "connect_timeout": 10,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}


class Relay:
    """Relays an App's rows of the outbox to Redis until ``stop`` is set.

    Args:
        app: the App whose namespace's rows are relayed (through its enqueue).
        outbox: where the rows are.
        stop: set to make :meth:`run` return (a worker passes its stop event).
        batch: rows per pass.
        poll: the longest wait between passes without a notification, in seconds.

    Attributes:
        relayed: jobs this relay created in Redis.
        passes: passes that reached both servers.
    """

    def __init__(
        self,
        app: App,
        outbox: Outbox,
        *,
        stop: asyncio.Event | None = None,
        batch: int = BATCH,
        poll: float = POLL,
    ) -> None:
        self.app, self.outbox = app, outbox
        self.stop = stop if stop is not None else asyncio.Event()
        self.batch, self.poll = batch, poll
        self.relayed = 0
        self.passes = 0
        self._conn: Any = None
        self._down = ""  # what is unreachable now: logged once, and again once back
        self._failures = 0

    async def run(self) -> None:
        """Relay until ``stop`` is set.

        Raises:
            LockgateError: Redis refuses this client for good (the owner stops the worker).
        """
        import psycopg

        log.info("outbox relay: table %s at %s, namespace %s", self.outbox.table,
                 describe(self.outbox.dsn), self.app.namespace)  # fmt: skip
        try:
            while not self.stop.is_set():
                try:
                    moved = await self.relay_once()
                    self._back()
                    if moved < self.batch:
                        await self._wait()
                except psycopg.Error as e:
                    await self._close()
                    await self._fault("PostgreSQL", e)
                except LockgateError as e:
                    if classify(e) == "fatal":
                        raise
                    await self._fault("Redis", e)
        finally:
            await self._close()

    async def relay_once(self) -> int:
        """One pass: relay up to ``batch`` rows; how many rows it took (and deleted).

        Raises:
            psycopg.Error: PostgreSQL failed (the rows stay, unless the commit landed).
            LockgateError: Redis failed (the transaction rolls back: the rows stay).
        """
        conn = await self._connection()
        once_keys: list[str] = []
        async with conn.transaction():
            cursor = await conn.execute(self.outbox.sql(TAKE_SQL), (self.app.namespace, self.batch))
            rows = await cursor.fetchall()
            if not rows:
                self.passes += 1
                return 0
            messages = [m for row in rows if (m := self._message(*row)) is not None]
            once_keys = [m.once[0] for m in messages if m.once is not None]
            self.relayed += await self._enqueue(messages)
            await conn.execute(
                self.outbox.sql(DELETE_SQL), (self.app.namespace, [r[0] for r in rows])
            )
        self.passes += 1
        await self._forget(once_keys)
        return len(rows)

    def _message(self, row: int, data: bytes, delay_ms: int) -> Message | None:
        try:
            job = codec.decode(bytes(data))
        except SerializationError as e:
            log.error("outbox row %d (%d bytes) is no job: deleted (%s)", row, len(data), e)
            return None
        once = self.app.store.layout.for_job(job.id, job.key).relayed(job.id, row)
        return Message(job, delay_ms / 1000, once=(once, ONCE_TTL_MS))

    async def _enqueue(self, messages: Sequence[Message]) -> int:
        """Enqueue the jobs (one round trip); how many were created. A job that cannot be
        enqueued at all is logged and left out (its row is deleted with the others)."""
        try:
            results = await self.app.enqueue_many_async(messages)
        except SerializationError:
            fit = []
            for message in messages:
                try:
                    self.app.outgoing(message)
                except SerializationError as e:
                    log.error("outbox: job %s of task %s cannot be enqueued: deleted (%s)",
                              message.job.id, message.job.task, e)  # fmt: skip
                else:
                    fit.append(message)
            results = await self.app.enqueue_many_async(fit)
        return sum(result.created for result in results)

    async def _forget(self, once_keys: list[str]) -> None:
        """Delete the once-only keys of rows whose delete committed (they expire anyway)."""
        if not once_keys:
            return
        try:
            client, _ = await self.app.store.async_connection()
            with translated(self.app.store.url):
                await client.unlink(*once_keys)
        except LockgateError as e:
            log.debug("outbox: %d once-only keys left to expire: %s", len(once_keys), e)

    async def _connection(self) -> Any:
        import psycopg
        from psycopg import sql

        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(
                self.outbox.dsn, autocommit=True,
                application_name=f"{APPLICATION_NAME} (pid {os.getpid()})", **CONNECT_OPTIONS,
            )  # fmt: skip
            await self._conn.execute(
                sql.SQL("LISTEN {}").format(sql.Identifier(self.outbox.channel))
            )
        return self._conn

    async def _wait(self) -> None:
        """Until a commit notifies the channel, ``poll`` seconds pass, or ``stop``."""
        conn = self._conn
        notified = asyncio.ensure_future(_notified(conn, self.poll))
        stopped = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({notified, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not notified.done():
                notified.cancel()
                await asyncio.gather(notified, return_exceptions=True)
        if not notified.cancelled():
            notified.result()  # a lost connection raises here

    async def _fault(self, server: str, error: BaseException) -> None:
        text = " ".join(str(error).split()) or type(error).__name__
        if getattr(error, "sqlstate", None) == UNDEFINED_TABLE:
            text = f"the table does not exist: create it with `lockgate pg init` ({text})"
        delay = reconnect_delay(self._failures, base=0.2)
        self._failures += 1
        if self._down != server:
            self._down = server
            log.warning("outbox relay: %s failed (%s); the jobs wait in the outbox table %s; "
                        "retrying with backoff up to 5s (logged again once it works)",
                        server, text, self.outbox.table)  # fmt: skip
        else:
            log.debug("outbox relay: %s still failing (%s); next try in %.1fs", server, text, delay)
        try:
            await asyncio.wait_for(self.stop.wait(), delay)
        except TimeoutError:
            pass

    def _back(self) -> None:
        if self._down:
            log.info("outbox relay: %s works again after %d failed tries; relaying",
                     self._down, self._failures)  # fmt: skip
        self._down, self._failures = "", 0

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:
                log.debug("outbox relay: closing the connection failed", exc_info=True)


async def _notified(conn: Any, timeout: float) -> None:
    """Until one notification comes on ``conn`` (or ``timeout`` seconds)."""
    async for _ in conn.notifies(timeout=timeout, stop_after=1):
        return


def relay_loop(
    app: App, stop: asyncio.Event, burst: bool
) -> Callable[[], Coroutine[Any, Any, None]] | None:
    """The relay a worker runs beside its loop: for an App with an outbox, unless the
    worker is a burst one (done once nothing is left to run, it relays nothing)."""
    if app.outbox is None or burst:
        return None
    return Relay(app, app.outbox, stop=stop).run
