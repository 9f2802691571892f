"""Enqueue when the caller's database transaction commits: Django and psycopg 3.

[Task.enqueue_on_commit][lockgate.Task.enqueue_on_commit] builds the job at once (bad
arguments raise in the caller) and sends it only once the transaction it was called in
commits, so a rolled-back payment leaves no job behind.

- **Django** (``django.db.connection`` or ``connections[alias]``, any database): the send
  is registered with ``transaction.on_commit(..., using=conn.alias)``. Django runs it right
  after the commit, in the committing thread, and drops it when the atomic block (or the
  savepoint it was registered in) rolls back. Outside an atomic block, in autocommit mode,
  the job is sent at once.
- **psycopg 3** (``psycopg.Connection``), which has no commit hook: outside a transaction
  (the connection is idle: autocommit, or nothing run since the last commit) the job is
  sent at once. Inside one, the transaction's id is read there (``pg_current_xact_id()``,
  which gives the transaction an xid as its first write would) and handed to the *commit
  watcher*: one thread per process that asks PostgreSQL, on a connection of its own made
  with the caller connection's parameters, for the outcome of every pending transaction in
  one query (``pg_xact_status``), 2 ms after the call, then backing off to every 100 ms.
  Committed: the job is sent from that thread. Rolled back: dropped (logged at DEBUG).
  Unknown (an xid too old for PostgreSQL to remember): dropped with a WARNING. The job
  follows the commit by a few milliseconds, not at once: [drain][lockgate.transactions.drain]
  waits for it (tests, scripts about to exit).

After a commit the caller's work has happened and cannot be undone, so a send that fails
then never raises into the caller: it is logged, and a transient Redis fault is retried in
the background (0.1 s doubling to 5 s) for as long as the process lives; the job's id makes
a repeated send a no-op if an earlier one got through after all. The watcher never dies
silently: every failure is logged, a lost connection is made again (backing off to 5 s),
and a thread that stopped anyway is started again by the next call. Its connections close
after 30 s without work. At interpreter exit it goes on with what is pending for up to
``EXIT_WAIT`` seconds, then names the jobs it gives up.

Known limits:

- As with Django's own ``on_commit``, between the commit and the send the job exists only
  in this process's memory: a process killed in that window (milliseconds, longer while
  Redis is down) loses it. The durable outbox (``App(outbox=DSN)``, see
  :mod:`lockgate.integrations.outbox`) does not: with it, a PostgreSQL connection's job is
  written as a row in the caller's transaction and relayed by the workers, and none of
  the above applies to it.
- psycopg: a savepoint (a nested ``conn.transaction()``) that rolls back on its own does
  not cancel a job enqueued inside it if the outer transaction commits: PostgreSQL reports
  the outcome of top-level transactions only. Django's ``on_commit`` does handle this.
- psycopg: async connections are not accepted (the call is sync; with the outbox,
  ``enqueue_on_commit_async`` takes them). The watcher is one more
  PostgreSQL session per process and server while transactions are pending. Across a
  failover to a replica that never saw the transaction its outcome may be misjudged; a
  prepared (two-phase) transaction waits until ``COMMIT PREPARED``.
"""

from __future__ import annotations

import atexit
import importlib
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from lockgate.backend.faults import classify
from lockgate.core.logs import get_logger
from lockgate.core.message import Message
from lockgate.errors import BrokerError, ConfigError, DatabaseError, LockgateError, MissingExtra
from lockgate.integrations.atomic import sending_on_commit

logger = get_logger(__name__)

FIRST_POLL = 0.002  # seconds from a call (or a poll) to the next poll; doubling...
MAX_POLL = 0.1  # ...up to this while a transaction stays open
RETRY_FIRST = 0.1  # a failed send after a commit: first retry, doubling...
RETRY_MAX = 5.0  # ...up to this; the same cap for reconnecting to PostgreSQL
IDLE_CLOSE = 30.0  # the watcher's connections close after this long without work
EXIT_WAIT = 10.0  # at interpreter exit, the longest wait for pending sends
APPLICATION_NAME = "lockgate commit watcher"
STATUS_QUERY = "SELECT x, pg_xact_status(x::xid8) FROM unnest(%s::text[]) AS x"
ACCEPTED = (
    "a psycopg 3 Connection (sync) or a Django connection (django.db.connection or "
    "django.db.connections[alias])"
)


class OutboxWriter(Protocol):
    """The durable outbox of an App (:class:`lockgate.integrations.outbox.Outbox`)."""

    def write(self, namespace: str, conn: object, message: Message) -> bool:
        """Write the job into the outbox in ``conn``'s transaction; False when ``conn``
        is not a PostgreSQL connection it writes to."""


class Sender(Protocol):
    """What a job waiting for its commit is sent through: its App
    (:class:`lockgate.api.app.App`)."""

    @property
    def namespace(self) -> str: ...

    @property
    def outbox(self) -> OutboxWriter | None: ...

    def enqueue_many(self, messages: Iterable[Message]) -> Sequence[Any]: ...


class DjangoConnection(Protocol):
    """What lockgate uses of a Django database connection (``django.db.connection``)."""

    alias: str
    vendor: str
    settings_dict: dict[str, Any]
    in_atomic_block: bool
    ops: Any

    def cursor(self) -> Any:
        """A cursor in the connection's current transaction."""


def django_connection(conn: object) -> DjangoConnection | None:
    """``conn`` as a Django connection, or None when it is not one.

    Duck typing: Django is never imported here (a Django connection comes with Django
    imported), and ``django.db.connection``, a proxy, passes as well as a real wrapper.
    """
    if not isinstance(getattr(conn, "alias", None), str):
        return None
    if not isinstance(getattr(conn, "settings_dict", None), dict):
        return None
    if not (hasattr(conn, "ops") and callable(getattr(conn, "cursor", None))):
        return None
    return conn  # type: ignore[return-value]  # checked above, attribute by attribute


def enqueue_on_commit(app: Sender, conn: object, message: Message) -> None:
    """Send ``message`` once the transaction ``conn`` is in commits (at once outside one).

    With ``App(outbox=DSN)`` and a PostgreSQL connection, the job is written into the
    outbox in that transaction instead (see :mod:`lockgate.integrations.outbox`).

    Args:
        app: the App that sends it.
        conn: a psycopg 3 connection or a Django connection.
        message: the job, built by [Task.message][lockgate.Task.message].

    Raises:
        ConfigError: ``conn`` is neither.
        MissingExtra: ``conn`` is not a Django connection and psycopg is not installed.
        DatabaseError: psycopg: the transaction's id could not be read (the connection is
            broken, or its transaction failed and can only roll back).
        BrokerError: sent at once (outside a transaction), and Redis refused it.
    """
    outbox = outbox_in_use(app)
    if outbox is not None and outbox.write(app.namespace, conn, message):
        return
    django = django_connection(conn)
    if django is not None:
        _on_django_commit(app, django, message)
        return
    try:
        import psycopg
    except ImportError as e:
        raise MissingExtra("enqueue_on_commit", "postgres", "psycopg") from e
    if isinstance(conn, psycopg.AsyncConnection):
        raise ConfigError(
            f"enqueue_on_commit takes {ACCEPTED}, not an AsyncConnection: pass a sync "
            "connection, or enqueue_async after your commit, or configure App(outbox=DSN) "
            "and await enqueue_on_commit_async"
        )
    if not isinstance(conn, psycopg.Connection):
        raise ConfigError(f"enqueue_on_commit takes {ACCEPTED}, got {type(conn).__name__}")
    _on_psycopg_commit(app, conn, message)


def outbox_in_use(app: Sender) -> OutboxWriter | None:
    """The App's outbox (``App(outbox=DSN)``), or None: none configured, or inside
    ``app.eager()``, whose jobs run inline as users' tests expect."""
    return None if getattr(app, "_eager", None) is not None else app.outbox


def drain(timeout: float = EXIT_WAIT) -> bool:
    """Wait until no job of this process waits for its transaction's outcome or for a
    retried send (psycopg's commit watcher; Django sends in the committing thread).

    Returns:
        True when nothing is pending; False when something still is after ``timeout``
        seconds (a transaction still open, Redis down).
    """
    return _watcher.drain(timeout)


def _on_django_commit(app: Sender, conn: DjangoConnection, message: Message) -> None:
    transaction: Any = importlib.import_module("django.db.transaction")
    if not conn.in_atomic_block:
        # Django runs it at once (autocommit) or refuses (manual transactions): a failed
        # send raises into the caller, as enqueue() does.
        transaction.on_commit(lambda: _send_now(app, message), using=conn.alias)
        return

    def after_commit() -> None:  # never raises: the commit has happened (no robust= needed)
        send = _Send(app, message)
        if _send([send]) is not None:
            _watcher.retry(send)

    transaction.on_commit(after_commit, using=conn.alias)


def _on_psycopg_commit(app: Sender, conn: Any, message: Message) -> None:
    import psycopg
    from psycopg.pq import TransactionStatus
    from psycopg.rows import tuple_row

    if conn.info.transaction_status == TransactionStatus.IDLE:  # not in a transaction
        app.enqueue_many([message])
        return
    try:
        with conn.cursor(row_factory=tuple_row) as cursor:  # whatever the conn's row factory
            cursor.execute("SELECT pg_current_xact_id()::text")
            row = cursor.fetchone()
    except psycopg.Error as e:
        where = f"{conn.info.host}:{conn.info.port}/{conn.info.dbname}"
        raise DatabaseError(
            f"cannot enqueue job {message.job.id!r} on commit: reading the transaction's id "
            f"at {where} failed: {' '.join(str(e).split())}"
        ) from e
    assert row is not None
    _watcher.watch(_conninfo(conn), _Send(app, message, xid=str(row[0])))


def _conninfo(conn: Any) -> str:
    """The caller connection's parameters (password included) for the watcher's own."""
    from psycopg.conninfo import make_conninfo

    params: dict[str, Any] = dict(conn.info.get_parameters())
    if conn.info.password:  # get_parameters() leaves it out
        params["password"] = conn.info.password
    # A watcher that waits forever on a dead socket would be a silent death.
    for name, value in (("connect_timeout", 10), ("keepalives_idle", 10),
                        ("keepalives_interval", 5), ("keepalives_count", 3)):  # fmt: skip
        params.setdefault(name, value)
    params.pop("application_name", None)
    return make_conninfo(**params)


def describe(conninfo: str) -> str:
    """host:port/dbname of a conninfo, for logs and errors (never the password)."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(conninfo)
    return f"{params.get('host', 'localhost')}:{params.get('port', 5432)}/{params.get('dbname')}"


@dataclass(eq=False)
class _Send:
    """A job waiting for its transaction's outcome (``xid``) or for a retried send."""

    app: Sender
    message: Message
    xid: str = ""
    failures: int = 0
    due: float = 0.0

    @property
    def label(self) -> str:
        return f"job {self.message.job.id} of task {self.message.job.task}"


def _send_now(app: Sender, message: Message) -> None:
    """Django's on_commit in autocommit mode: the send at once, raising into the caller."""
    with sending_on_commit():
        app.enqueue_many([message])


def _send(sends: list[_Send]) -> LockgateError | None:
    """Send jobs of one App whose transaction committed; log what fails.

    Returns:
        The error when a retry may help (a transient Redis fault), else None.
    """
    try:
        # Run by Django's on_commit, maybe while an outer atomic block is still open (a
        # TestCase's captureOnCommitCallbacks): not a send inside a transaction.
        with sending_on_commit():
            sends[0].app.enqueue_many([send.message for send in sends])
    except LockgateError as e:
        if isinstance(e, BrokerError) and classify(e) != "fatal":
            return e
        for send in sends:
            logger.error("%s was not enqueued after its transaction committed: %s", send.label, e)
    except Exception:
        for send in sends:
            logger.exception("%s was not enqueued after its transaction committed", send.label)
    return None


@dataclass(eq=False)
class _Server:
    """The watcher's connection to one PostgreSQL server and the sends waiting on it."""

    conninfo: str
    waiting: list[_Send] = field(default_factory=list)
    conn: Any = None
    failures: int = 0
    retry_at: float = 0.0

    def close(self, what: str) -> None:
        """Close the connection, if open; a failure to close is logged (DEBUG) as
        closing ``what`` failed."""
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                logger.debug("closing %s failed", what, exc_info=True)
            self.conn = None


class CommitWatcher:
    """The thread that learns the outcome of psycopg transactions and sends their jobs.

    One per process (``_watcher``). Callers only add work (``watch``, ``retry``); the
    thread alone touches the PostgreSQL connections, and alone removes work once done.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._servers: dict[str, _Server] = {}
        self._retries: list[_Send] = []
        # Committed, out of a server's waiting list and being sent now: still pending for
        # drain() until the send landed or was scheduled again.
        self._sending: set[_Send] = set()
        self._thread: threading.Thread | None = None
        self._fresh = False  # work added since the thread last looked
        self._exiting = False

    def watch(self, conninfo: str, send: _Send) -> None:
        """Send ``send`` once its transaction (``send.xid``, on that server) commits."""
        with self._changed:
            server = self._servers.get(conninfo)
            if server is None:
                server = self._servers[conninfo] = _Server(conninfo)
            server.waiting.append(send)
            self._wake()

    def retry(self, send: _Send) -> None:
        """Send ``send`` again later (its transaction committed; the send failed)."""
        with self._changed:
            self._schedule(send)
            self._wake()

    def drain(self, timeout: float) -> bool:
        """See [drain][lockgate.transactions.drain]."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._pending():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def stop(self, timeout: float) -> None:
        """At exit: finish what is pending for up to ``timeout`` seconds, then log what is
        left."""
        with self._changed:
            self._exiting = True
            self._changed.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
        with self._changed:
            left = [s.label for server in self._servers.values() for s in server.waiting]
            left += [s.label for s in self._retries]
        if left:
            logger.warning(
                "exiting with %d job(s) not enqueued (transaction still open, or Redis "
                "unreachable): %s",
                len(left),
                ", ".join(left),
            )

    # with the lock held

    def _pending(self) -> bool:
        return (
            bool(self._retries)
            or bool(self._sending)
            or any(s.waiting for s in self._servers.values())
        )

    def _wake(self) -> None:
        self._fresh = True
        if self._thread is None or not self._thread.is_alive():
            if self._thread is not None:
                logger.error("lockgate's commit watcher thread had stopped; starting it again")
            self._thread = threading.Thread(
                target=self._run, name="lockgate-commit-watcher", daemon=True
            )
            self._thread.start()
        self._changed.notify_all()

    def _schedule(self, send: _Send) -> None:
        send.failures += 1
        send.due = time.monotonic() + min(RETRY_MAX, RETRY_FIRST * 2 ** (send.failures - 1))
        if send not in self._retries:
            self._retries.append(send)

    def _idle(self) -> bool:
        """Block while nothing is pending (closing connections unused for IDLE_CLOSE);
        False once exiting with nothing left."""
        since = time.monotonic()
        while not self._pending():
            self._changed.notify_all()  # drain() waiters
            if self._exiting:
                return False
            connected = any(s.conn is not None for s in self._servers.values())
            if connected and time.monotonic() - since >= IDLE_CLOSE:
                self._close_connections()
                connected = False
            self._changed.wait(IDLE_CLOSE if connected else None)
        return True

    def _pause(self, last: float, interval: float) -> float:
        """Wait until the next poll (``interval`` after the last, sooner for new work or a
        retry that is due); returns the interval waited."""
        deadline = last + interval
        while True:
            if self._fresh:
                self._fresh = False
                interval = FIRST_POLL
                deadline = min(deadline, last + FIRST_POLL)
            due = min((s.due for s in self._retries), default=deadline)
            left = min(deadline, due) - time.monotonic()
            if left <= 0:
                return interval
            self._changed.wait(left)

    def _close_connections(self) -> None:
        for conninfo, server in list(self._servers.items()):
            server.close("the watcher's connection")
            if not server.waiting:
                del self._servers[conninfo]

    # the thread

    def _run(self) -> None:
        interval, last = FIRST_POLL, time.monotonic()
        try:
            while True:
                with self._changed:
                    if not self._pending():
                        if not self._idle():
                            return
                        interval, last = FIRST_POLL, time.monotonic()
                    interval = self._pause(last, interval)
                last = time.monotonic()
                try:
                    self._work()
                except Exception:
                    logger.exception("lockgate's commit watcher failed a round (it carries on)")
                interval = min(interval * 2, MAX_POLL)
        finally:
            with self._changed:
                self._close_connections()
                self._changed.notify_all()

    def _work(self) -> None:
        now = time.monotonic()
        with self._changed:
            rounds = [
                (server, list(server.waiting))
                for server in self._servers.values()
                if server.waiting and server.retry_at <= now
            ]
            due = [send for send in self._retries if send.due <= now]
        committed: list[_Send] = []
        for server, sends in rounds:
            committed += self._outcomes(server, sends)
        by_app: dict[int, list[_Send]] = {}
        for send in due + committed:
            by_app.setdefault(id(send.app), []).append(send)
        for sends in by_app.values():
            error = _send(sends)
            with self._changed:
                for send in sends:
                    if error is not None:
                        self._schedule(send)
                    elif send in self._retries:
                        self._retries.remove(send)
                    self._sending.discard(send)
                self._changed.notify_all()
            if error is not None:
                logger.warning(
                    "%d job(s) whose transaction committed not enqueued yet (%s); retrying "
                    "in %.1fs: %s",
                    len(sends),
                    ", ".join(send.label for send in sends),
                    sends[0].due - time.monotonic(),
                    error,
                )

    def _outcomes(self, server: _Server, sends: list[_Send]) -> list[_Send]:
        """Ask the server how the sends' transactions ended; returns the committed ones
        (all decided ones leave ``server.waiting``)."""
        try:
            statuses = self._statuses(server, sorted({send.xid for send in sends}))
        except Exception as e:
            self._lost(server, e, len(sends))
            return []
        committed = []
        with self._changed:
            for send in sends:
                status = statuses.get(send.xid, "in progress")
                if status == "in progress":
                    continue
                server.waiting.remove(send)
                if status == "committed":
                    committed.append(send)
                    self._sending.add(send)
                elif status == "aborted":
                    logger.debug("%s not enqueued: its transaction rolled back", send.label)
                elif status is None:
                    logger.warning(
                        "%s not enqueued: PostgreSQL no longer knows how transaction %s ended",
                        send.label,
                        send.xid,
                    )
        return committed

    def _statuses(self, server: _Server, xids: list[str]) -> dict[str, str | None]:
        import psycopg

        if server.conn is None or server.conn.closed:
            server.conn = psycopg.connect(
                server.conninfo,
                autocommit=True,
                application_name=f"{APPLICATION_NAME} (pid {os.getpid()})",
            )
            if server.failures:
                logger.info("lockgate's commit watcher reached %s again", describe(server.conninfo))
            server.failures = 0
        try:
            return dict(server.conn.execute(STATUS_QUERY, (xids,)).fetchall())
        except (psycopg.OperationalError, psycopg.InterfaceError):
            raise
        except psycopg.Error as e:  # one bad xid fails them all: ask one by one
            logger.warning("asking for %d transactions' outcome failed (%s)", len(xids), e)
        statuses: dict[str, str | None] = {}
        for xid in xids:
            try:
                statuses.update(server.conn.execute(STATUS_QUERY, ([xid],)).fetchall())
            except (psycopg.OperationalError, psycopg.InterfaceError):
                raise
            except psycopg.Error as e:  # "transaction ID ... is in the future": a failover?
                logger.error("the outcome of transaction %s is unknown: %s", xid, e)
                statuses[xid] = None
        return statuses

    def _lost(self, server: _Server, error: Exception, waiting: int) -> None:
        server.close("a lost connection")
        server.failures += 1
        delay = min(RETRY_MAX, RETRY_FIRST * 2 ** (server.failures - 1))
        server.retry_at = time.monotonic() + delay
        logger.warning(
            "lockgate's commit watcher lost PostgreSQL at %s (%s); %d job(s) wait for their "
            "transaction's outcome; reconnecting in %.1fs",
            describe(server.conninfo),
            " ".join(str(error).split()) or type(error).__name__,
            waiting,
            delay,
        )


_watcher = CommitWatcher()
_FORKED_AWAY: list[CommitWatcher] = []  # a parent's watcher: its connections are not ours


def _at_exit() -> None:
    _watcher.stop(EXIT_WAIT)


def _after_fork_in_child() -> None:
    global _watcher
    _FORKED_AWAY.append(_watcher)
    _watcher = CommitWatcher()


atexit.register(_at_exit)
os.register_at_fork(after_in_child=_after_fork_in_child)
