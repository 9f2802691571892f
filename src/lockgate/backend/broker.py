"""What every storage backend provides: deliveries, settlements, the producer and consumer
contracts, and the translation of pipelined replies.

Backends (:mod:`lockgate.backend.stream_broker`, :mod:`lockgate.backend.sorted_broker`) are the only
modules that talk to Redis about jobs. Each has two halves: pure builders of enqueue script
calls (used by sync and async producers alike) and a consumer used by one worker.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from lockgate.backend import faults
from lockgate.backend.addresses import masked
from lockgate.backend.connections import AsyncClient
from lockgate.backend.delayed_jobs import DelayedJob as DelayedJob
from lockgate.backend.delayed_jobs import delayed_job as delayed_job
from lockgate.backend.delayed_jobs import soonest as soonest
from lockgate.backend.delayed_jobs import soonest_first as soonest_first
from lockgate.backend.keys import Keys, status_shard
from lockgate.backend.lua import Arg, AsyncScripts, ScriptCall
from lockgate.core import codec, history
from lockgate.core.codec import Job
from lockgate.core.logs import get_logger
from lockgate.core.outcome import Outcome
from lockgate.errors import BrokerError, SerializationError

ENQUEUE_BATCH = 500
# The enqueue script's answer for a debounced job that took a waiting one's place.
MERGED = b"merged"
log = get_logger(__name__)
# A worker's liveness beats: at least this often, and at most (a short lease in tests).
LONGEST_BEAT = 1.0
SHORTEST_BEAT = 0.05


@dataclass(frozen=True, slots=True)
class Liveness:
    """When a worker counts as alive, and when as dead (pure; see ``lua/_liveness.lua``).

    A worker is alive for ``lease`` seconds after each beat of its liveness thread, which
    beats every ``beat`` seconds. No beat of any worker for ``gap`` seconds was an outage
    (Redis away, restarted, hung): only once beats have come for a whole ``lease`` after
    it may a lapsed worker be called dead and its jobs be taken. The gap must be shorter
    than any silence that can lapse a live worker (a lease, less the beat it may be
    behind the latest one and its retry): half the lease, with beats at an eighth.
    """

    lease: float
    beat: float
    gap: float

    @classmethod
    def of(cls, lease: float) -> Liveness:
        """The timing for a worker whose jobs may be taken ``lease`` seconds after it died
        (its visibility timeout): beats at an eighth of it (1 s at most, 50 ms at least),
        a gap of half of it (three beats at least: below 0.3 s a lease is too short to
        tell an outage from a stall, and only tests use such)."""
        beat = min(LONGEST_BEAT, max(SHORTEST_BEAT, lease / 8))
        return cls(lease=lease, beat=beat, gap=max(lease / 2, 3 * beat))

    @property
    def args(self) -> list[Arg]:
        """``quiet ms, gap ms`` as the scripts that take jobs from others want them."""
        return [max(1, round(self.lease * 1000)), max(1, round(self.gap * 1000))]


@dataclass(slots=True)
class Delivery:
    """A message handed to a worker.

    Attributes:
        queue: queue name.
        level: level index (0 is the highest).
        source: the stream key (streams backend) or queue name (sorted backend).
        ref: the stream entry id, or the job id on the sorted backend.
        job: the decoded job, or None when the entry could not be decoded.
        error: why ``job`` is None.
        job_id: the job id, as far as it could be read (for logs).
        raw: the stored job bytes, as read (kept for the dead-letter queue).
        deliveries: how many times the entry was handed to a worker (1 on a first read).
        owner: sorted backend: the token of this take (only it may settle the job).
        claim: the job claim the read took with it (idempotent tasks), None when it took none.
    """

    queue: str
    level: int
    source: str
    ref: str
    job: Job | None
    error: str | None = None
    job_id: str = "?"
    raw: bytes | None = None
    deliveries: int = 1
    owner: str = ""
    claim: ReadClaim | None = None


@dataclass(frozen=True, slots=True)
class ReadClaim:
    """A job claim taken by the read that delivered the job (no round trip of its own).

    Attributes:
        token: the claim's owner token.
        state: 1 taken, 0 the job is already done, -1 another worker holds it.
        wait: busy: seconds left on the holder's lease.
    """

    token: str
    state: int
    wait: float = 0.0


NOT_CLAIMED = 2  # the read scripts' claim state for a job they did not claim


@dataclass(frozen=True, slots=True)
class ReadClaims:
    """Which jobs a worker's reads claim as they read them.

    Attributes:
        prefix: the claim keys' prefix (``Keys.claim("")``).
        tasks: the names of the idempotent tasks (sorted: the same arguments every read).
        lease: the claims' lease in seconds.
        done_prefix: the done-marker buckets' prefix (``Keys.done_bucket_prefix``).
        legacy_markers: also claim the jobs' 0.1 names (``App(legacy_markers=True)``).
    """

    prefix: str
    tasks: tuple[str, ...]
    lease: float
    done_prefix: str
    legacy_markers: bool = False

    def on(self, keys: Keys) -> ReadClaims:
        """The same claims, taken in the partition of ``keys`` (where its jobs live)."""
        return replace(self, prefix=keys.claim(""), done_prefix=keys.done_bucket_prefix)

    def args(self, token: str) -> list[Arg]:
        """The read script's claim arguments, for a read whose tokens start ``token``."""
        if not self.tasks:
            return [""]
        lease_ms = max(1, round(self.lease * 1000))
        return [
            self.prefix, token, lease_ms, self.done_prefix, int(self.legacy_markers),
            *self.tasks,
        ]  # fmt: skip


def read_claim_args(claims: ReadClaims | None) -> tuple[str, list[Arg]]:
    """A fresh token prefix for one read, and the read script's claim arguments."""
    if claims is None:
        return "", [""]
    token = uuid.uuid4().hex[:16]
    return token, claims.args(token)


@dataclass(frozen=True, slots=True)
class Settlement:
    """How one delivery ends, ready to apply: the outcome and what it needs on the wire.

    Attributes:
        delivery: the delivery to settle.
        outcome: its decided end (never ``abandoned``: there is nothing to apply then).
        claim_key: the Redis key of the job's idempotency claim, if it has one.
        claim_token: that claim's owner token.
        claim_ttl: seconds the done marker lasts.
        legacy_claim_key: the claim's 0.1 name (``idempotent=True`` jobs) when the
            markers are also written there (``App(legacy_markers=True)``), else None.
        older_claim_key: the same for its 0.2/0.3 name.
        legacy_done: the done marker to write there as well (an older worker skips the
            job).
        done_prefix: the done-marker buckets' prefix (``Keys.done_bucket_prefix``).
        legacy_markers: also leave the string marker ``d:<token>`` under the claim key
            (what lockgate 0.2 workers read of a claim whose name has not changed).
        record: dead: the dead letter's fields.
        trim: dead: [dead letters kept at most, their max age ms], 0 for no limit.
        final: done and dead: the job's final record (``b""``: none is kept).
        final_ttl_ms: how long it is kept.
        result: done and dead: the job's result record (``b""``: none is kept).
        result_ttl_ms: how long it is kept.
        debounced: the job's task is debounced: its ending queues the next run an
            enqueue left while it ran (see ``lua/_debounce.lua``).
        holds_slot: the job's task has a ``key_concurrency``: its settle gives back the
            slot it may hold (see ``lua/_fair.lua``).
        flow: a job of a flow that ends (done, dead, cancelled): the flow's record key
            (``Keys.flow``), whose barriers its settle moves (see ``lua/_flow.lua``).
        flow_step: that job's ending for its flow, ``o`` done, ``x`` dead, ``c``
            cancelled, then its position in the flow.
        flow_result: done: its return value's JSON, kept for the jobs that wait for it;
            dead: its result record (its error).
        history_task: the task's name in the history of recent ends.
        history_entry: the ending's history entry (``b""``: none, see
            :mod:`lockgate.core.history`).
    """

    delivery: Delivery
    outcome: Outcome
    claim_key: str | None = None
    claim_token: str = ""
    claim_ttl: float = 0.0
    legacy_claim_key: str | None = None
    older_claim_key: str | None = None
    legacy_done: str = ""
    done_prefix: str = ""
    legacy_markers: bool = False
    record: Mapping[str, str | bytes] = field(default_factory=dict)
    trim: Sequence[int] = (0, 0)
    final: bytes = b""
    final_ttl_ms: int = 0
    result: bytes = b""
    result_ttl_ms: int = 0
    debounced: bool = False
    holds_slot: bool = False
    flow: str | None = None
    flow_step: str = ""
    flow_result: bytes = b""
    history_task: str = ""
    history_entry: bytes = b""

    def claim_keys(self, keys: Keys | None = None) -> list[str]:
        """The claim's key and its older names, when there are ones, then, for an ending
        with a history entry, its history list and the index (of ``keys``, the job's
        partition), then a flow job's flow record (the last KEYS)."""
        trailing = self.history_keys(keys) if keys is not None else []
        if self.flow is not None:
            trailing.append(self.flow)
        if self.claim_key is None:
            return trailing
        older = (self.legacy_claim_key, self.older_claim_key)
        return [self.claim_key, *(key for key in older if key is not None), *trailing]

    def history_keys(self, keys: Keys) -> list[str]:
        """The history list of the ending's task and outcome and the index of the tasks
        (none without a history entry; see ``lua/_history.lua``)."""
        if not self.history_entry:
            return []
        code = history.KIND_CODES[self.outcome.kind]
        return [keys.history(self.history_task, code), keys.history_tasks()]

    def claim_args(self) -> list[Arg]:
        """Claim token, action, done-marker TTL ms, older names' done marker, done-marker
        buckets' prefix, string marker flag (both backends)."""
        if self.claim_key is None:
            return ["", "keep", 0, "", "", 0]
        ttl = max(1, round(self.claim_ttl * 1000))
        return [
            self.claim_token, self.outcome.claim, ttl, self.legacy_done, self.done_prefix,
            int(self.legacy_markers),
        ]  # fmt: skip

    def end_args(self) -> list[Arg]:
        """Trim limits, the final record and its TTL, the job id and its status shard, the
        result record and its TTL, the flags (``d`` debounced, ``s`` holds a slot, ``f``
        and the flow step), a flow job's result, the history entry and its task, then the
        dead letter's field/value pairs."""
        job_id = self.delivery.job_id
        args: list[Arg] = [
            *self.trim,
            self.final,
            self.final_ttl_ms,
            job_id,
            status_shard(job_id) if self.final else "",
            self.result,
            self.result_ttl_ms,
            ("d" if self.debounced else "")
            + ("s" if self.holds_slot else "")
            + (f"f{self.flow_step}" if self.flow is not None else ""),
            self.flow_result,
            self.history_entry,
            self.history_task,
        ]
        for name, value in self.record.items():
            args += [name, value]
        return args


@dataclass(slots=True)
class ReadResult:
    """What one read took; ``next_due``: seconds until a delayed job or lease is due."""

    deliveries: list[Delivery] = field(default_factory=list)
    taken: list[int] = field(default_factory=list)
    dry: list[bool] = field(default_factory=list)
    next_due: float | None = None


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A job on its way in: the job, its encoding, its delay in ms (0: run now), and a
    once-only key with its TTL in ms (a cron tick's: the enqueue takes it with SET NX in
    the same script, so each tick is enqueued once however many schedulers run), and for
    a job with a fairness key whose task has a ``key_concurrency``, the task's name: its
    jobs wait in a lane of their own (see ``Keys.fair_jobs``); for a job of a debounced
    task, its ``debounce`` and ``debounce_max`` in ms (0: none; see ``lua/_debounce.lua``).
    """

    job: Job
    data: bytes
    delay_ms: int = 0
    once_key: str | None = None
    once_ttl_ms: int = 0
    limited: str = ""
    debounce: tuple[int, int] | None = None


def delay_arg(outgoing: Outgoing, group: str) -> bytes | int:
    """The enqueue scripts' delay of a job: ms, or for a debounced job
    ``'<wait ms> <cap ms>'``, followed on the streams backend by `` <group>`` (see
    ``lua/_debounce.lua``)."""
    if outgoing.debounce is None:
        return outgoing.delay_ms
    wait, cap = outgoing.debounce
    return f"{max(wait, outgoing.delay_ms)} {cap} {group}".rstrip().encode()


@dataclass(frozen=True, slots=True)
class EnqueuePlan:
    """Script calls that enqueue jobs, which jobs (by position) each call carries, and
    each job's queue when idle workers are woken per job (a partitioned namespace)."""

    calls: list[ScriptCall]
    positions: list[list[int]]
    queues: Sequence[str] = ()

    def wakeups(self, created: Sequence[bool]) -> dict[str, int]:
        """Per queue, how many of its jobs were added (none when no one is woken per job)."""
        counts: dict[str, int] = {}
        for queue, added in zip(self.queues, created, strict=False):
            if added:
                counts[queue] = counts.get(queue, 0) + 1
        return counts

    def created(self, replies: Sequence[Sequence[Any]]) -> list[bool]:
        """Per job, in the caller's order: False when its id was already queued or running.

        Each script answers per job with 0 for a duplicate, ``merged`` for a debounced
        job that took a waiting one's place, and something else otherwise.
        """
        flags = [False] * sum(len(p) for p in self.positions)
        for positions, answers in zip(self.positions, replies, strict=True):
            for position, answer in zip(positions, answers, strict=True):
                flags[position] = answer != 0 and answer != MERGED
        return flags


@dataclass(frozen=True, slots=True)
class LevelStats:
    """Counts for one queue and level (``level`` is ``*`` on the sorted backend).

    Attributes:
        length: jobs in the queue: waiting plus pending.
        waiting: jobs not yet handed to a worker.
        pending: jobs handed to a worker and not finished (in flight).
        delayed: jobs waiting for a due time (retries, delayed enqueues).
        consumers: workers known to the consumer group (None on the sorted backend).
        oldest_wait_ms: how long the next waiting job has waited (None when none waits).
    """

    queue: str
    level: str
    length: int
    waiting: int
    pending: int
    delayed: int
    consumers: int | None
    oldest_wait_ms: int | None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class KeyStats:
    """One fairness key of one queue and level (``@app.task(key_by=...)``).

    Attributes:
        key: the key.
        waiting: its jobs waiting, whatever their task.
        running: its jobs running, per task.
        limits: the ``key_concurrency`` of the tasks running (absent: none).
    """

    queue: str
    level: str
    key: str
    waiting: int
    running: dict[str, int]
    limits: dict[str, int]

    @property
    def busy(self) -> int:
        """Its jobs waiting and running."""
        return self.waiting + sum(self.running.values())

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


class Broker(Protocol):
    """One backend's layout of jobs in Redis: pure builders of the calls that enqueue and
    count jobs, and the consumer a worker reads with. Both backends keep this contract
    (tests/integration/test_backend_contract.py runs one suite against each)."""

    @property
    def ranked(self) -> bool:
        """Whether the backend orders jobs itself (one ranked set per queue, read in
        strict order) instead of one stream per level read by a weighted policy."""

    def plan_enqueue(self, jobs: Sequence[Outgoing]) -> EnqueuePlan:
        """Calls that enqueue these jobs, in batches."""

    def stats_calls(self, queues: Sequence[str]) -> list[ScriptCall]:
        """Calls whose replies :meth:`parse_stats` turns into counts."""

    def parse_stats(self, queues: Sequence[str], replies: Sequence[Any]) -> list[LevelStats]:
        """Per queue and level, the counts in the replies of :meth:`stats_calls` (pure)."""

    def consumer(
        self,
        client: AsyncClient,
        *,
        url: str,
        queues: Sequence[str],
        name: str,
        lease_seconds: float,
        claims: ReadClaims | None,
    ) -> Consumer:
        """A worker's consumer of ``queues`` on ``client`` (which it then owns)."""

    def wake_keys(self, queue: str) -> list[str]:
        """The wake streams idle workers of ``queue`` block on (XADDed on a resume)."""

    async def purge_waiting(
        self,
        client: AsyncClient,
        scripts: AsyncScripts,
        queue: str,
        *,
        levels: Sequence[str],
        task: str | None,
        chunk: int,
    ) -> int:
        """Delete the waiting jobs of ``queue`` on ``levels`` (``task``'s only, unless
        None) and free their ids, at most ``chunk`` per script call; how many went."""

    async def delayed(self, client: AsyncClient, queue: str, limit: int) -> list[DelayedJob]:
        """The delayed jobs of ``queue`` due soonest, at most ``limit``, soonest first
        (reads only: a job that becomes due meanwhile is missing or still listed)."""


class Consumer(Protocol):
    """One worker's connection to the jobs of some queues."""

    async def read(
        self, free: int, quotas: Sequence[int], running: Sequence[str] = ()
    ) -> ReadResult:
        """Take up to ``free`` messages, following the per-level quotas.

        ``running``: refs this worker still runs or settles; the sorted backend never
        hands them out again when their leases lapsed (streams reclaim: see reclaim).
        """

    async def wait_for_work(self, timeout: float) -> None:
        """Block until new work may be there, or ``timeout`` seconds pass."""

    @property
    def woken(self) -> int:
        """How many waits ended because new work may be there (not by their timeout)."""

    def settle_call(self, settlement: Settlement) -> ScriptCall:
        """The one script call that applies a settlement, owner-checked (pure)."""

    async def settle(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Apply settle calls in one round trip; per call, its reply or the lockgate error
        it met (see :func:`translated_replies`).

        Raises:
            BrokerError: the round trip itself failed (nothing or some applied).
        """

    async def reclaim(self, min_idle: float, running: Sequence[str] = ()) -> Delivery | None:
        """Take over one job a worker left (streams); None when there is none.

        ``running``: refs this worker still runs or settles, never taken again.
        """

    async def forget_consumers(self, min_idle: float) -> int:
        """Remove consumers that are gone and own nothing."""

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> None:
        """Keep running (or not yet settled) deliveries from going to another worker."""

    @property
    def liveness_keys(self) -> list[str]:
        """The liveness sets this worker's beats must reach (one per partition)."""

    @property
    def client(self) -> AsyncClient:
        """The consumer's Redis client."""

    async def close(self) -> None:
        """Release the consumer's resources."""


def by_source(deliveries: Sequence[Delivery]) -> dict[str, list[Delivery]]:
    """Deliveries grouped by where they came from (a stream, or a sorted-backend queue)."""
    groups: dict[str, list[Delivery]] = {}
    for delivery in deliveries:
        groups.setdefault(delivery.source, []).append(delivery)
    return groups


def batches(count: int, size: int = ENQUEUE_BATCH) -> Iterator[range]:
    """Consecutive ranges of at most ``size`` positions out of ``count``."""
    for start in range(0, count, size):
        yield range(start, min(start + size, count))


def decode_job(data: bytes | None) -> Job | None:
    """A stored job decoded, or None when there is none or it cannot be decoded."""
    if not data:
        return None
    try:
        return codec.decode(data)
    except SerializationError:
        return None


def purged(job: Job | None, task: str | None, levels: Sequence[str] | None = None) -> bool:
    """Whether a purge of ``task``'s jobs (any task's when None) on ``levels`` (any when
    None) deletes a waiting job (pure); a job that cannot be decoded (None) goes only with
    a purge of every task on every level."""
    if job is None:
        return task is None and levels is None
    return (task is None or job.task == task) and (levels is None or job.level in levels)


def safe_call(call: ScriptCall) -> ScriptCall:
    """The call with its text arguments as UTF-8 bytes, anything unencodable escaped.

    An error message may hold a lone surrogate (a file name read with surrogateescape):
    redis-py would fail to encode it at send time, for the whole pipeline, every time.
    """
    args = [
        a.encode("utf-8", "backslashreplace") if isinstance(a, str) and not a.isascii() else a
        for a in call.args
    ]  # ASCII text goes as it is: hiredis encodes it as fast (nearly all arguments)
    return ScriptCall(call.script, call.keys, args)


def translated_replies(replies: Sequence[Any], url: str) -> list[Any]:
    """Pipeline replies with each call's error translated into a lockgate error."""
    out: list[Any] = []
    for reply in replies:
        if isinstance(reply, faults.REDIS_FAULTS):
            reply = faults.translate(reply, masked(url))
        elif isinstance(reply, Exception):
            reply = BrokerError(f"{type(reply).__name__}: {reply}")
        out.append(reply)
    return out


def text(value: bytes | str) -> str:
    """A reply value as text (bytes that are not UTF-8 show as replacement characters)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value
