"""Idempotent side effects: crash-safe claims in Redis, optionally backed by PostgreSQL.

A claim is an owner token with a short lease that a background thread renews while the
side effect runs; success replaces it with a done marker with a long TTL (a member of a
bucketed sorted set, see :meth:`lockgate.backend.keys.Keys.done_marker`); a failure releases it so
a retry can run. Completing, releasing and renewing are compare-and-set on
the token (Lua), so a worker whose lease lapsed can never delete or complete the claim of
the worker that took over. A worker killed mid-claim stops renewing and its claim expires
with the lease: the job is not skipped forever, as it is with the lesson's plain SET NX.

With a PostgreSQL connection the database is the source of truth: the claim row is
inserted in the caller's transaction (commits or rolls back with the business write),
Redis is consulted first as a cache, and a done marker is refilled from the database.
"""

from __future__ import annotations

import functools
import re
import threading
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Generator, Iterable
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import Any, Protocol, TypeVar

from lockgate.backend.keys import Keys, check_key
from lockgate.backend.lua import Arg, ScriptCall
from lockgate.backend.store import Store
from lockgate.core.config import seconds
from lockgate.core.context import JobContext, running_job
from lockgate.core.logs import get_logger
from lockgate.core.retry import DEFAULT_TTL, check_ttl
from lockgate.core.sansio import drive, drive_async
from lockgate.errors import AlreadyProcessed, BrokerError, ClaimBusy, ConfigError, StepDone

log = get_logger(__name__)
_T = TypeVar("_T")

DEFAULT_LEASE = 30.0
RENEW_RETRY = 0.1  # seconds between tries of a lease renewal that failed
LAPSED = -2  # idem_claim's answer: a worker's claim whose lease lapsed; judge its holder
JUDGE_ROUNDS = 3  # judge-and-take rounds before a claim that keeps changing counts as busy
# The value of a claim held by a worker (lockgate.core.context.Holder.token): hold, quiet and
# gap ms, a random part, the worker's consumer name.
_HELD = re.compile(r"c:w\d+\.(\d+)\.(\d+)\.[0-9a-f]+\.(.+)", re.DOTALL)


class ClaimHost(Protocol):
    """What a claim uses of its App (:class:`lockgate.api.app.App`): the store its
    calls go through, the thread that renews its lease, and whether it writes markers
    for older releases too."""

    @property
    def store(self) -> Store: ...

    @property
    def lease_keeper(self) -> LeaseKeeper: ...

    @property
    def legacy_markers(self) -> bool: ...


class LeaseKeeper:
    """One daemon thread per App that renews the leases of live claims, and sends again
    the settles of claims whose own settle failed (Redis away): a worker's claim is not
    left to its long hold (see :class:`lockgate.core.context.Holder`) because its release or
    done marker was lost."""

    def __init__(self, app: ClaimHost) -> None:
        self._app = weakref.ref(app)
        self._claims: dict[str, Claim] = {}
        self._unsettled: dict[str, tuple[Claim, str]] = {}  # token -> claim, action
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._interval = DEFAULT_LEASE / 3

    def add(self, claim: Claim) -> None:
        with self._lock:
            self._claims[claim.token] = claim
            if claim.lease < self._interval * 3:
                self._wake.set()  # a shorter lease than the thread is sleeping for
            self._start()

    def remove(self, claim: Claim) -> None:
        with self._lock:
            self._claims.pop(claim.token, None)

    def settle_later(self, claim: Claim, action: str) -> None:
        """Send ``action`` ('done', 'release') for ``claim`` until it lands: its own
        settle failed. Compare-and-set on the token, so a late one changes nothing that
        is no longer the claim's."""
        with self._lock:
            self._unsettled[claim.token] = (claim, action)
            self._wake.set()
            self._start()

    def _start(self) -> None:  # under the lock
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._run, name="lockgate-lease-keeper", daemon=True
            )
            self._thread.start()

    def _after_fork_in_child(self) -> None:
        """Start afresh in a forked child (called by the App's at-fork hook)."""
        # Another parent thread may have held the lock or the event's; the parent's
        # claims are the parent's to renew; the parent's thread does not exist here.
        self._claims = {}
        self._unsettled = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread = None
        self._interval = DEFAULT_LEASE / 3

    def _run(self) -> None:
        failed = False
        while True:
            with self._lock:
                claims = list(self._claims.values())
                unsettled = list(self._unsettled.values())
                self._interval = min((c.lease / 3 for c in claims), default=DEFAULT_LEASE / 3)
            # A renewal that failed (Redis away) is tried again soon, not a third of the
            # lease later: an outage shorter than the lease then never lapses a claim.
            soon = failed or unsettled
            wait = min(self._interval, RENEW_RETRY) if soon else self._interval
            if self._wake.wait(wait):
                self._wake.clear()
                continue  # a claim with a shorter lease came: sleep by its measure
            app = self._app()
            if app is None:
                return
            if claims or unsettled:
                failed = not self._renew(app, claims, unsettled, after_failure=failed)
            else:
                failed = False

    def _renew(
        self,
        app: ClaimHost,
        claims: Iterable[Claim],
        unsettled: Iterable[tuple[Claim, str]] = (),
        *,
        after_failure: bool = False,
    ) -> bool:
        """Renew the live claims and send the settles that failed; False when the call
        failed (logged once per outage). After a failure (Redis away) a claim that lapsed
        meanwhile is taken back."""
        live = [c for c in claims if c.token in self._claims]
        action = "retake" if after_failure else "renew"
        calls = [c.settle_call(action, c.renewal) for c in live]
        calls += [claim.settle_call(done, claim.ttl) for claim, done in unsettled]
        logged = not after_failure
        try:
            replies = app.store.run(calls)
        except Exception as e:  # keep renewing the others next round
            if logged:
                log.error("renewing %d idempotency leases failed: %s; retrying every "
                          "%.1fs", len(calls), e, RENEW_RETRY)  # fmt: skip
            return False
        for claim, kept in zip(live, replies[: len(live)], strict=True):
            if not kept:
                claim.lost = True
                self.remove(claim)  # nothing to renew any more: said once
                log.error("lost the claim on %s: its lease lapsed and may be taken over",
                          claim.key)  # fmt: skip
        for (claim, done), kept in zip(unsettled, replies[len(live) :], strict=True):
            with self._lock:
                self._unsettled.pop(claim.token, None)
            # Not kept: the failed try may have landed after all (its reply was lost).
            log.info("claim on %s: %s sent again after it failed (%s)", claim.key, done,
                     "applied" if kept else "already settled or taken over")  # fmt: skip
        return True


@dataclass(frozen=True, slots=True)
class _Io:
    """One round trip of a claim (a Redis call, the PostgreSQL row): how the sync shell
    makes it, and how the async shell does."""

    blocking: Callable[[], Any]
    awaiting: Callable[[], Awaitable[Any]]


def _run(steps: Generator[_Io, Any, _T]) -> _T:
    """The sync shell of a claim's steps: each round trip made in this thread."""
    return drive(steps, lambda io: io.blocking())


async def _run_async(steps: Generator[_Io, Any, _T]) -> _T:
    """The async shell of a claim's steps: each round trip awaited."""
    return await drive_async(steps, lambda io: io.awaiting())


class Claim:
    """An idempotency claim, used as ``with`` (sync) or ``async with`` (async).

    Args:
        app: the App whose Redis holds the claim.
        key: what is being done once (an order id, a job and step, ...).
        ttl: how long the done marker blocks duplicates.
        lease: how long a claim survives its owner without renewal.
        conn: a psycopg 3 connection (sync for ``with``, async for ``async with``); the
            claim row is then inserted in its current transaction, and PostgreSQL is the
            source of truth.
        step: the step name when this claim guards one step of a job.
        legacy_key: an older name of the same claim (lockgate 0.1 keyed the claims of
            ``idempotent=True`` tasks by job id alone): its done marker or live claim is
            honoured, so an upgrade never runs a finished job again; with
            ``App(legacy_markers=True)`` the claim is also mirrored there and a done
            marker written there (tagged with ``legacy_scope``), so a 0.1 worker still
            running in a rolling deploy skips the job too.
        legacy_scope: what tags this claim's markers under its older names
            (``legacy_key``, ``older_key``), naming it unambiguously: the task name for
            a job's claim, the step's own claim name for a step. A marker there tagged
            with another scope does not count as done here.
        older_key: the name lockgate 0.2 and 0.3 gave the same claim, joining its parts
            with bare ``:`` (:meth:`lockgate.backend.keys.Keys.older_job_claim_name`,
            ``older_step_claim_name``): its done marker (bucketed, or 0.2's ``d:``
            string) or live claim is honoured, so an upgrade never runs a finished job
            or step again. Nothing is written there but, with
            ``App(legacy_markers=True)``, a mirrored claim and a done marker tagged with
            ``legacy_scope`` (what 0.2 workers of a rolling deploy read; the tag keeps
            it from counting for another claim of that name). So the ambiguity of those
            names ends with the untagged markers 0.2 and 0.3 wrote (at most the TTL
            they were written with, a day by default): until then such a marker also
            counts for any other claim that joined to the same name (task ``a`` with job
            id ``b:c`` after task ``a:b`` ran job ``c`` under 0.3), the residual risk of
            the upgrade.
        token: the owner token (default: a new random one); given for a claim that the
            worker's read took already.
        job_id: for the claim of an ``idempotent=True`` task's job: the job's id; the
            claim then lives in the job's partition (see :mod:`lockgate.backend.partitions`), so
            the job's settle writes its done marker with the ack.
        job_key: that job's fairness key, if it has one (a keyed job lives in its key's
            partition).

    Raises (on entry):
        AlreadyProcessed: the key is done (``StepDone`` for a step).
        ClaimBusy: another worker holds a live claim; retry after ``delay`` seconds.
        ConfigError: bad key, TTL or lease, a TTL under twice the task's retry window, or
            a key already claimed by this same job run (one key shared by several steps).
    """

    def __init__(
        self,
        app: ClaimHost,
        key: str,
        *,
        ttl: float | timedelta = DEFAULT_TTL,
        lease: float | timedelta = DEFAULT_LEASE,
        conn: Any = None,
        step: str | None = None,
        legacy_key: str | None = None,
        legacy_scope: str = "",
        older_key: str | None = None,
        token: str | None = None,
        job_id: str | None = None,
        job_key: str | None = None,
    ) -> None:
        self.key = check_key(key)
        self.ttl = seconds(ttl, f"ttl for {key!r}")
        self.lease = seconds(lease, f"lease for {key!r}")
        if self.ttl <= 0:
            raise ConfigError(f"ttl for {key!r} must be positive, got {ttl!r}")
        if self.lease < 0.1:
            raise ConfigError(f"lease for {key!r} must be at least 0.1 s, got {lease!r}")
        self.app = app
        self.conn = conn
        self.step = step
        job = running_job()
        # A user claim made in a worker's run is held by that worker: it outlives its
        # lease, for as long as its done marker would, and is taken over only once the
        # worker is known dead (see lua/_take_claim.lua). A job's own claim follows its
        # job, which is taken from a worker only once it is known dead.
        mine = job is not None and job.app is app and job_id is None  # not another App's
        holder = job.holder if job is not None and mine else None
        self._holder = holder if holder is not None and holder.here() else None
        self._caller = "" if self._holder is None else self._holder.consumer
        hold = 0.0 if self._holder is None or token is not None else self.ttl
        if token is None:
            held = self._holder
            token = uuid.uuid4().hex if held is None else held.token(round(hold * 1000))
        self.token = token
        self.renewal = self.lease + hold  # what a renewal extends the claim's expiry to
        self.lost = False
        # Read once: the claim and its settle agree on where and how markers are written.
        # A user claim with an older name is placed by it: both share one slot.
        place = app.store.claim_place
        self._redis_key, self.done_prefix = place(key, job_id, older_key, job_key)
        self._older_key = (
            None if older_key is None else place(older_key, job_id, older_key, job_key)[0]
        )
        self._legacy_key = (
            place(legacy_key, job_id, None, job_key)[0] if legacy_key is not None else None
        )
        self._legacy_scope = legacy_scope
        self.legacy_markers = app.legacy_markers

    @property
    def legacy_redis_key(self) -> str | None:
        """The 0.1 name of this claim, when it has one (honoured when claiming)."""
        return self._legacy_key

    @property
    def legacy_write_key(self) -> str | None:
        """The 0.1 name that this claim is mirrored and marked done under: only with
        ``App(legacy_markers=True)``, else None."""
        return self._legacy_key if self.legacy_markers else None

    @property
    def older_write_key(self) -> str | None:
        """The 0.2/0.3 name that this claim is mirrored and marked done under: only with
        ``App(legacy_markers=True)``, else None (it is read either way)."""
        return self._older_key if self.legacy_markers else None

    @property
    def string_markers(self) -> bool:
        """Whether settling leaves ``d:<token>`` under the claim key itself, as 0.2 read
        a claim whose name has not changed since (a user claim): with
        ``App(legacy_markers=True)`` and no older name (which 0.2 reads instead)."""
        return self.legacy_markers and self._older_key is None

    def legacy_done_value(self) -> str:
        """The done marker written under the older names ('' when none is): 0.1 and 0.2
        read any ``d:`` value as done, this release reads the ``:t:`` tag and counts it
        only for the same scope."""
        if self.legacy_write_key is None and self.older_write_key is None:
            return ""
        return f"d:{self.token}:t:{self._legacy_scope}"

    @property
    def redis_key(self) -> str:
        """The Redis key holding the live claim (its done marker lives in a bucket)."""
        return self._redis_key

    def settle_call(self, action: str, duration: float) -> ScriptCall:
        """The script call that finishes ('done', 'release') or renews this claim."""
        ms = max(1, round(duration * 1000))
        keys = [self._redis_key]
        keys += [k for k in (self.legacy_write_key, self.older_write_key) if k is not None]
        args: list[Arg] = [
            self.token, action, ms, self.legacy_done_value(), self.done_prefix,
            int(self.string_markers),
        ]  # fmt: skip
        return ScriptCall("idem_settle", keys, args)

    def claim_call(self, expect: str = "") -> ScriptCall:
        """The script call that takes this claim (its reply goes to :meth:`taken`);
        ``expect``: the value of a lapsed claim whose holder was judged dead."""
        keys = [self._redis_key]
        if self._legacy_key is not None:
            keys.append(self._legacy_key)
        if self._older_key is not None:
            keys.append(self._older_key)
        args: list[Arg] = [
            self.token, round(self.renewal * 1000), self._legacy_scope, self.done_prefix,
            int(self.legacy_markers), int(self._older_key is not None), expect,
        ]  # fmt: skip
        return ScriptCall("idem_claim", keys, args)

    def _claiming(self) -> Generator[_Io, Any, None]:
        """The round trips of taking this claim (see :meth:`_entering`). A worker's claim
        whose lease lapsed is taken over only once its holder is judged dead, and only
        while it is still the claim that was judged.

        Raises:
            AlreadyProcessed, ClaimBusy: see :meth:`taken`.
        """
        reply = yield self._script(self.claim_call())
        for _ in range(JUDGE_ROUNDS):
            if reply[0] != LAPSED:
                break
            value = reply[2].decode() if isinstance(reply[2], bytes) else str(reply[2])
            held = _HELD.fullmatch(value)
            if held is None:
                break
            quiet, gap, consumer = int(held[1]), int(held[2]), held[3]
            judge = self.app.store.judge_call(consumer, self._caller, quiet, gap)
            dead, wait_ms = yield self._script(judge)
            if not dead:
                reply = [-1, wait_ms]
                break
            reply = yield self._script(self.claim_call(expect=value))
        self.taken(reply)

    def _script(self, call: ScriptCall) -> _Io:
        """One script call of taking the claim; the async shell sends it in the round trip
        of every call made in this turn of the event loop."""
        store = self.app.store
        return _Io(lambda: store.run([call])[0], functools.partial(store.run_soon, call))

    def _guard(self) -> None:
        job = running_job()
        if job is None:
            return
        check_ttl(self.key, self.ttl, job.retry_window)
        if self.key in job.claimed_keys:
            raise ConfigError(
                f"idempotency key {self.key!r} is claimed twice in one run of job "
                f"{job.job_id}: give each external step its own key (job.step(name))"
            )
        job.claimed_keys.add(self.key)

    def _done(self) -> AlreadyProcessed:
        if self.step is not None:
            return StepDone(self.key, f"step {self.step!r} already done ({self.key})")
        return AlreadyProcessed(self.key)

    def taken(self, reply: list[int]) -> None:
        """Apply the reply of :meth:`claim_call`: the claim is held (and renewed) from now.

        For callers that send the call themselves (the worker takes the claims of a whole
        read in one round trip).

        Raises:
            AlreadyProcessed: the key is done (``StepDone`` for a step).
            ClaimBusy: another worker holds a live claim.
        """
        state, remaining_ms = reply[0], reply[1]
        if state == 0:
            raise self._done()
        if state < 0:  # LAPSED too: a claim that kept changing as it was judged
            raise ClaimBusy(self.key, remaining_ms / 1000)
        self.app.lease_keeper.add(self)

    def enter_taken(self, state: int, wait: float) -> Claim:
        """Enter a claim that the read delivering its job already took, with this token.

        Raises:
            AlreadyProcessed: the read found the key done.
            ClaimBusy: the read found another worker's live claim (``wait`` seconds left).
        """
        self._guard()
        self.taken([state, round(wait * 1000)])
        return self

    def _entering(self) -> Generator[_Io, Any, Claim]:
        """Entering, for the sync and async shells (:func:`_run`, :func:`_run_async`): the
        claim in Redis, then the claim row in PostgreSQL when there is a connection.

        Raises:
            AlreadyProcessed: the key is done, in Redis or (its marker then refilled) in
                PostgreSQL.
            ClaimBusy: see :meth:`taken`.
        """
        self._guard()
        if self.conn is not None:  # a missing extra raises before anything is claimed
            from lockgate.integrations import postgres
        yield from self._claiming()
        if self.conn is not None:
            row = (self.conn, self.key)
            try:
                first = yield _Io(
                    functools.partial(postgres.claim, *row),
                    functools.partial(postgres.claim_async, *row),
                )
            except BaseException:
                yield from self._finishing("release")
                raise
            if not first:
                yield from self._finishing("done")  # refill the cache from the source of truth
                raise self._done()
        return self

    # sync

    def __enter__(self) -> Claim:
        return _run(self._entering())

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _run(self._finishing(self._exit_action(exc_type)))

    def _exit_action(self, exc_type: type[BaseException] | None) -> str:
        # With PostgreSQL the row commits with the caller's transaction, after this exit;
        # marking done here could outlive a rollback. Release instead: a duplicate then
        # meets the row (or waits on its lock) and refills the marker.
        return "release" if exc_type is not None or self.conn is not None else "done"

    def _finishing(self, action: str) -> Generator[_Io, Any, None]:
        """Settling with ``action`` (see :meth:`_entering`); one that failed is left to
        the lease keeper to send again.

        Raises:
            BrokerError: Redis refused, or could not be reached.
        """
        self.app.lease_keeper.remove(self)
        store, calls = self.app.store, [self.settle_call(action, self.ttl)]
        try:
            (kept,) = yield _Io(
                functools.partial(store.run, calls), functools.partial(store.run_async, calls)
            )
        except BrokerError:
            self.app.lease_keeper.settle_later(self, action)
            raise
        self.settled(action, kept)

    def settled(self, action: str, kept: int) -> None:
        """Stop renewing; log when the claim had been taken over before ``action``.

        For callers that send :meth:`settle_call` themselves (the worker batches the done
        markers of idempotent tasks with its acks).
        """
        self.app.lease_keeper.remove(self)
        if not kept:
            log.error("claim on %s was taken over before %s: another worker may have run it",
                      self.key, action)  # fmt: skip
        elif action == "done":
            job = running_job()
            if job is not None:  # a retry of this job must start before this marker expires
                job.done_markers.append(time.time() + self.ttl)

    # async

    async def __aenter__(self) -> Claim:
        return await _run_async(self._entering())

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await _run_async(self._finishing(self._exit_action(exc_type)))


def step_claim(app: ClaimHost, job: JobContext, name: str, ttl: float | timedelta | None) -> Claim:
    """The claim of step ``name`` of ``job`` on ``app`` (what
    [JobContext.step][lockgate.JobContext.step] returns): its done marker lasts ``ttl``,
    by default the task's ``idempotency_ttl``."""
    key = Keys.step_claim_name(job.task, job.job_id, name)
    return Claim(
        app, key, ttl=job.idempotency_ttl if ttl is None else ttl, step=name,
        older_key=Keys.older_step_claim_name(job.task, job.job_id, name), legacy_scope=key,
    )  # fmt: skip
