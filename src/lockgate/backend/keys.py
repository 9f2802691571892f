"""Every Redis key name lockgate uses, in one place.

All keys of a namespace share the hash tag ``{namespace}``, so every script's keys live in
one Redis Cluster slot; a partitioned namespace (see :mod:`lockgate.backend.partitions`) has one
such set of keys per partition, each under its own tag. Nothing outside these two modules
builds a key name.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from functools import cached_property

from lockgate.errors import ConfigError

GROUP = "lockgate"
MAX_KEY_BYTES = 512  # the longest idempotency key
# A done marker is a member of one of 4,096 sorted sets (buckets) per namespace, not a key
# of its own: a bucket of at most 128 members is one compact listpack, about 35 B per
# marker where a string key with a TTL costs about 210 B. With the buckets' own keys, 43 B
# per marker at 100,000 live markers, 37 B at 400,000; past about 400,000 buckets start to
# outgrow the listpack limit and cost more (70 B per marker at 500,000). See
# lua/_done_marker.lua.
DONE_BUCKET_DIGITS = 3  # hex digits of SHA1(claim key) naming the bucket: 16**3 buckets
DONE_MEMBER_DIGITS = 24  # the next hex digits: the member (96 bits)
# An ended job's final record is a field of one of 4,096 hashes (shards) of its time window,
# not a key of its own (see lua/_status.lua): a hash of at most 128 fields of at most 64
# bytes is one compact listpack.
STATUS_SHARDS = 4096
# The level of a keyed job's delivery stream is its level's name and this (Keys.fair_stream).
FAIR_SUFFIX = "+"


# A flow's keys besides its record (Keys.flow): jobs not yet queued (held: job -> its
# enqueue call), barriers (wait: job -> parents left), parents and children (job -> their
# positions), results (job -> result record), the jobs done and dead (sets), the jobs
# queued with the flow (roots, a list until queued).
FLOW_PARTS = ("held", "wait", "parents", "children", "results", "done", "dead", "roots")


def check_key(key: str) -> str:
    """Validate an idempotency key.

    Raises:
        ConfigError: empty, not a string, or over 512 bytes.
    """
    if not isinstance(key, str) or not key:
        raise ConfigError(f"an idempotency key must be a non-empty string, got {key!r}")
    if len(key.encode()) > MAX_KEY_BYTES:
        raise ConfigError(f"idempotency key {key[:40]!r}... is over {MAX_KEY_BYTES} bytes")
    return key


def done_marker_place(prefix: str, claim_key: str) -> tuple[str, str]:
    """The bucket and member of a claim key's done marker under a done prefix: the
    prefix plus the first 3 hex digits of the key's SHA1, or the prefix itself when it does
    not end in ``:`` (a bucket of its own, see ``lua/_done_marker.lua``)."""
    digest = hashlib.sha1(claim_key.encode()).hexdigest()
    member = digest[DONE_BUCKET_DIGITS : DONE_BUCKET_DIGITS + DONE_MEMBER_DIGITS]
    if not prefix.endswith(":"):
        return prefix, member
    return prefix + digest[:DONE_BUCKET_DIGITS], member


def status_shard(job_id: str) -> str:
    """Which of a window's hashes holds a job's final record: 3 hex digits of the CRC-32
    of its id (pure; the scripts take it as an argument, so only this computes it)."""
    return "%03x" % (zlib.crc32(job_id.encode("utf-8", "surrogatepass")) % STATUS_SHARDS)


def fair_lane(key: str, task: str = "") -> str:
    """The lane of a fairness key's jobs: ``=<key>`` for its jobs of tasks without a
    ``key_concurrency``, ``<task>=<key>`` for those of such a task (a task name has no
    ``=``; see ``lua/_fair.lua``, which picks the lane as it queues a job)."""
    return f"{task}={key}"


def joined(kind: str, *parts: str) -> str:
    """A name built from several user strings that no other tuple of strings shares:
    ``<kind>/`` then each part but the last as ``<its UTF-8 length>:<part>:``, then the
    last part as it is (``joined("job", "a:b", "c")`` is ``job/3:a:b:c``, ``joined("job",
    "a", "b:c")`` is ``job/1:a:b:c``). Read left to right, a length says where its part
    ends, so a ``:`` inside a part cannot move the boundary; the ``/`` after the kind
    keeps every such name apart from the ``<kind>:...`` names that older releases joined
    with bare colons (which stay readable, see :meth:`Keys.older_job_claim_name`)."""
    head = "".join(f"{len(p.encode('utf-8', 'surrogatepass'))}:{p}:" for p in parts[:-1])
    return f"{kind}/{head}{parts[-1]}"


@dataclass(frozen=True)
class Keys:
    """Key names for one namespace (or one partition of it: ``tag``, see
    :mod:`lockgate.backend.partitions`)."""

    namespace: str
    tag: str = ""

    @cached_property
    def prefix(self) -> str:
        """Common prefix; the braces make the namespace (or the partition's tag) the
        Cluster hash tag."""
        return f"lockgate:{{{self.tag or self.namespace}}}"

    def stream(self, queue: str, level: str) -> str:
        """The stream holding one queue's jobs of one priority level."""
        return f"{self.prefix}:stream:{queue}:{level}"

    def fair_stream(self, queue: str, level: str) -> str:
        """Streams backend: the stream through which one queue and level's keyed jobs
        (``@app.task(key_by=...)``) are delivered. A read moves each job it hands out from
        its key's waiting stream (:meth:`fair_jobs`) into this one and reads it at once, so
        it holds only running jobs (see ``lua/_fair.lua``). Its place in a marker reads
        ``<queue>:<level>+``: level names have no ``+``."""
        return self.stream(queue, level + FAIR_SUFFIX)

    def fair_rotation(self, queue: str, level: str) -> str:
        """Streams backend: the sorted set of the fairness keys whose jobs wait in one
        queue and level, scored by their next turn (and ``""``: the turn of the jobs
        without a key)."""
        return f"{self.prefix}:fair:{queue}:{level}"

    def fair_jobs(self, queue: str, level: str, lane: str) -> str:
        """Streams backend: the stream of one lane's jobs waiting in one queue and level
        (no group: a read moves them to :meth:`fair_stream`); a lane is a fairness key's
        jobs (:func:`fair_lane`). Queue and level names have no ``:``, so the lane is
        what follows the third colon after ``fair``."""
        return f"{self.fair_rotation(queue, level)}:{lane}"

    def fair_limits(self) -> str:
        """Streams backend: hash of task name -> its ``key_concurrency`` (0: none), as the
        workers last started declared it (see ``lua/_fair.lua``)."""
        return f"{self.prefix}:fair-limits"

    def fair_slots(self, task: str, key: str) -> str:
        """Streams backend: the slots one task's jobs of one key hold (a sorted set of
        the delivery entries holding one, see ``lua/_fair.lua``)."""
        return f"{self.prefix}:{joined('slots', task, key)}"

    def fair_holds(self, queue: str, level: str) -> str:
        """Streams backend: hash of a delivery stream's entry -> the slots key its job
        holds a slot of, for its settle."""
        return f"{self.prefix}:fair-holds:{queue}:{level}"

    def delayed(self, queue: str, level: str) -> str:
        """Jobs of one stream waiting for a due time (retries, delayed enqueues).

        A sorted set of encoded jobs scored by due time in server milliseconds.
        """
        return f"{self.prefix}:delayed:{queue}:{level}"

    def claim(self, key: str) -> str:
        """An idempotency claim (``c:<token>`` with the lease), or a done marker written
        the way lockgate 0.1 and 0.2 wrote them (``d:<token>``, still honoured)."""
        return f"{self.prefix}:idem:{key}"

    @cached_property
    def done_bucket_prefix(self) -> str:
        """The prefix of the done-marker buckets: sorted sets of claim-key digests scored
        by expiry (seconds); the scripts append each bucket's hex digits."""
        return f"{self.prefix}:done:"

    def done_marker(self, claim_key: str) -> tuple[str, str]:
        """Where the done marker of a claim key lives (what the scripts compute in Lua).

        Args:
            claim_key: a key from :meth:`claim`.

        Returns:
            (the bucket's key, the member): the first 3 hex digits of the key's SHA1 name
            the bucket, the next 24 are the member.
        """
        return done_marker_place(self.done_bucket_prefix, claim_key)

    @staticmethod
    def job_claim_name(task: str, job_id: str) -> str:
        """The idempotency key of an ``idempotent=True`` task's job (its Redis key is
        :meth:`claim` of it): one per task and job id, ``job/<bytes>:<task>:<job id>``
        (see :func:`joined`; ``lua/_read_claim.lua`` builds the same)."""
        return joined("job", task, job_id)

    @staticmethod
    def older_job_claim_name(task: str, job_id: str) -> str:
        """The same claim as lockgate 0.2 and 0.3 named it, ``job:<task>:<job id>``: task
        ``a`` with id ``b:c`` and task ``a:b`` with id ``c`` shared it. Read as a fallback
        (a job done or running under it is not run again), written only with
        ``App(legacy_markers=True)``: a mirrored claim and a done marker tagged with the
        task, for 0.2 workers of a rolling deploy (see ``Claim``'s ``older_key``)."""
        return f"job:{task}:{job_id}"

    @staticmethod
    def legacy_job_claim_name(job_id: str) -> str:
        """The same claim as lockgate 0.1 named it, by job id alone (still honoured; also
        written, for 0.1 workers in a rolling deploy, with ``App(legacy_markers=True)``)."""
        return f"job:{job_id}"

    @staticmethod
    def step_claim_name(task: str, job_id: str, step: str) -> str:
        """The idempotency key of one step of a job (``job.step(name)``):
        ``step/<bytes>:<task>:<bytes>:<job id>:<step>`` (see :func:`joined`)."""
        return joined("step", task, job_id, step)

    @staticmethod
    def older_step_claim_name(task: str, job_id: str, step: str) -> str:
        """The same step's claim as 0.2 and 0.3 named it, ``step:<task>:<job id>:<step>``
        (ambiguous as :meth:`older_job_claim_name` is, and honoured the same way)."""
        return f"step:{task}:{job_id}:{step}"

    def wake(self) -> str:
        """A short stream XADDed when a delayed job or retry is scheduled: idle workers block
        on it with their job streams, so they wake to re-read the next due time."""
        return f"{self.prefix}:wake"

    def counter(self, name: str) -> str:
        """A counter kept by ``App.incr_once``."""
        return f"{self.prefix}:counter:{name}"

    def request(self, name: str, request_id: str) -> str:
        """The guard of one request id on one counter (see :func:`joined`)."""
        return f"{self.prefix}:{joined('request', name, request_id)}"

    def older_request(self, name: str, request_id: str) -> str:
        """The same guard as 0.2 and 0.3 named it (counter ``a`` with request ``b:c`` and
        counter ``a:b`` with request ``c`` shared it): a request guarded under it is not
        counted again; written only with ``App(legacy_markers=True)``, tagged with the
        counter (see ``lua/incr_once.lua``)."""
        return f"{self.prefix}:request:{name}:{request_id}"

    def cooldown(self, key: str) -> str:
        """A cooldown (rate limit) marker."""
        return f"{self.prefix}:cooldown:{key}"

    def rate_limit(self, name: str) -> str:
        """The GCRA limiter of task ``name``'s ``rate_limit``, shared by every worker: a
        string holding the next start's theoretical arrival time (server microseconds),
        expiring when that time passes (see lua/rate_limit.lua)."""
        return f"{self.prefix}:rate:{name}"

    def key_rate_limit(self, task: str, key: str) -> str:
        """The GCRA limiter of one key of task ``task``'s ``key_rate_limit`` (as
        :meth:`rate_limit`; a task name has no ``/``, so no task's limiter shares it)."""
        return f"{self.prefix}:rate:{joined('key', task, key)}"

    def dead(self) -> str:
        """The dead-letter stream of the namespace."""
        return f"{self.prefix}:dead"

    def partitions(self) -> str:
        """How many partitions the namespace has (see :mod:`lockgate.backend.partitions`): written
        by the first client to connect, checked by every other."""
        return f"{self.prefix}:partitions"

    def queue_names(self) -> str:
        """The queues producers and workers of the namespace were configured with: each
        client adds its App's on its first call (see :mod:`lockgate.backend.partition_record`),
        so a queue shows in the dashboard before any worker serves it. A sorted set of
        names (scores unused)."""
        return f"{self.prefix}:queues"

    def wakeup(self, queue: str) -> str:
        """A partitioned namespace's wake-up list of ``queue``: a producer pushes one item
        per job it adds, an idle worker pops one (BLPOP), so an enqueue wakes about as many
        workers as it brings jobs."""
        return f"{self.prefix}:wakeup:{queue}"

    def paused(self) -> str:
        """The namespace's paused queues: workers take none of their jobs (the read
        scripts check it), producers still enqueue them (see ``lockgate.queues``).

        A sorted set of queue names (scores unused): ZADD, ZREM, ZRANGE and ZSCORE are
        commands the documented ACL user already has, where a set's would not be."""
        return f"{self.prefix}:paused"

    def job(self, job_id: str) -> str:
        """Marker that a job id is queued or running (the enqueue dedup key)."""
        return f"{self.prefix}:job:{job_id}"

    def debounce_first(self, job_id: str) -> str:
        """A debounced job's first enqueue (ms) while it waits, kept ``debounce_max``
        (built by the scripts from :meth:`job`'s name; see ``lua/_debounce.lua``)."""
        return f"{self.prefix}:debounce:{job_id}"

    def debounce_next(self, job_id: str) -> str:
        """A hash: the run an enqueue queued while a debounced job ran (built by the
        scripts from :meth:`job`'s name; see ``lua/_debounce.lua``)."""
        return f"{self.prefix}:next:{job_id}"

    def flow(self, flow_id: str) -> str:
        """A flow's record (a hash: jobs, shape, TTL, cancelled); its other keys are this
        name and a suffix of :data:`FLOW_PARTS` (built by the scripts from this one; see
        ``lua/_flow.lua``)."""
        return f"{self.prefix}:flow:{flow_id}"

    def flow_keys(self, flow_id: str) -> list[str]:
        """Every key a flow keeps (what ``flow_ttl`` expires)."""
        base = self.flow(flow_id)
        return [base, *(f"{base}:{part}" for part in FLOW_PARTS)]

    def flow_traces(self, flow_id: str) -> str:
        """A hash of a traced flow's runs' span contexts (``traceparent`` by position),
        what its jobs' spans link to (``lockgate.otel``): kept apart from :meth:`flow_keys`,
        best effort, expiring ``flow_ttl`` after its last write."""
        return f"{self.flow(flow_id)}:traces"

    def flow_stage(self, flow_id: str, token: str) -> str:
        """Where one ``enqueue_flow`` call stages the flow's jobs before its commit renames
        them to :meth:`flow`'s keys (expiring if the caller dies before then)."""
        return f"{self.prefix}:flowstage:{flow_id}:{token}"

    def flows_releasing(self) -> str:
        """The flows whose first jobs a commit has not all queued yet (a sorted set of flow
        ids scored by the commit's time, ms): workers finish what a producer left."""
        return f"{self.prefix}:flows:releasing"

    def step_result(self, step_claim_name: str) -> str:
        """The stored result of a ``run_step`` whose claim is named ``step_claim_name``
        (:meth:`step_claim_name`), kept as long as the step's done marker."""
        return f"{self.prefix}:stepresult:{step_claim_name}"

    def tick(self, task: str, stamp: str) -> str:
        """A cron tick's once-only key (SET NX PX by the enqueue script): a tick whose key
        is taken is not enqueued again, even after its job ended and freed :meth:`job`."""
        return f"{self.prefix}:tick:{task}:{stamp}"

    def relayed(self, job_id: str, row: int) -> str:
        """An outbox row's once-only key (SET NX PX by the enqueue script that relays it,
        see :mod:`lockgate.integrations.outbox`): a row relayed again adds no second job.
        The job's id keeps rows of two databases with the same row id apart."""
        return f"{self.prefix}:relayed:{job_id}:{row}"

    def history(self, task: str, code: str) -> str:
        """A task's recent ends of one outcome (``code``: ``d`` done, ``r`` retried, ``x``
        dead; see ``lockgate.core.history``): a list of short entries, newest first, capped
        near 1,000 (see ``lua/_history.lua``; ``settle_many.lua`` builds the same name)."""
        return f"{self.prefix}:ends:{code}:{task}"

    def history_tasks(self) -> str:
        """The names of the tasks that have a :meth:`history` list (a sorted set, score 0)."""
        return f"{self.prefix}:ends"

    def result(self, job_id: str) -> str:
        """A job's result record, for a task declared with ``keep_result``."""
        return f"{self.prefix}:result:{job_id}"

    def progress(self, job_id: str) -> str:
        """A job's progress (``current_job().set_progress``): the JSON array ``[value,
        note]``, written by its worker and kept a while after its last write (see
        :mod:`lockgate.core.progress`). It lives in the partition of the job's id, even
        for a keyed job, so that readers find it from the id alone."""
        return f"{self.prefix}:progress:{job_id}"

    def job_record_keys(self, job_id: str) -> list[str]:
        """A job's marker, older status and result keys: what a purge deletes with it."""
        return [self.job(job_id), self.status(job_id), self.result(job_id)]

    def status(self, job_id: str) -> str:
        """A job's final record as lockgate 0.3 kept it, a key of its own (read, and
        deleted by a purge, until such records expired; see :meth:`statuses`)."""
        return f"{self.prefix}:status:{job_id}"

    def statuses(self) -> str:
        """The index of the final-record windows (a sorted set: each window's start in ms
        scored by its hashes' expiry); the hashes are ``<this>:<start>:<shard>``, one per
        :func:`status_shard` (see ``lua/_status.lua``)."""
        return f"{self.prefix}:statuses"

    def cancel_flag(self, job_id: str) -> str:
        """Set by ``App.cancel`` for a running job: its worker cancels the run that the
        value names (the stream entry id, or the sorted backend's take token)."""
        return f"{self.prefix}:cancel:{job_id}"

    def worker(self, name: str) -> str:
        """A live worker's registry entry (JSON, see :mod:`lockgate.worker.registry`), expiring
        unless its worker heartbeats."""
        return f"{self.prefix}:worker:{name}"

    def liveness(self) -> str:
        """Which workers are alive, on the server's clock (a sorted set: see
        ``lua/_liveness.lua``); one per partition, beside its streams."""
        return f"{self.prefix}:liveness"

    def workers(self) -> str:
        """The registry's index: worker names scored by their entry's expiry (Unix s)."""
        return f"{self.prefix}:workers"

    def dashboard_secret(self) -> str:
        """32 random bytes, written by the first dashboard to serve the namespace: with
        the access token, the key of every dashboard's login cookies and CSRF tokens."""
        return f"{self.prefix}:dashboard-secret"

    def activity(self, minute: int) -> str:
        """The activity counts of one minute (Unix time // 60): a sorted set used as a set
        of counters, member ``stat:level:queue`` (see :mod:`lockgate.worker.activity`)."""
        return f"{self.prefix}:activity:{minute}"

    def sorted_waiting(self, queue: str) -> str:
        """Sorted backend: job ids waiting, scored by rank (lower runs first)."""
        return f"{self.prefix}:sorted:{queue}:waiting"

    def sorted_inflight(self, queue: str) -> str:
        """Sorted backend: job ids taken by a worker, scored by lease deadline (ms)."""
        return f"{self.prefix}:sorted:{queue}:inflight"

    def sorted_payloads(self, queue: str) -> str:
        """Sorted backend: hash of job id -> encoded job."""
        return f"{self.prefix}:sorted:{queue}:payloads"

    def sorted_ranks(self, queue: str) -> str:
        """Sorted backend: hash of job id -> original rank, restored when a lease expires."""
        return f"{self.prefix}:sorted:{queue}:ranks"

    def sorted_clock(self, queue: str) -> str:
        """Sorted backend: last enqueue stamp (us), so stamps strictly increase (FIFO)."""
        return f"{self.prefix}:sorted:{queue}:clock"

    def sorted_lane(self, queue: str, level: str, key: str) -> str:
        """Sorted backend: the ids of a fairness key's jobs of one level waiting behind
        its head (the one in waiting), scored by enqueue stamp (us); see
        ``lua/_fair_sorted.lua``."""
        return f"{self.prefix}:sorted-lane:{queue}:{level}:{key}"

    def sorted_parked(self, queue: str, task: str, key: str) -> str:
        """Sorted backend: the ids of one task's jobs of one key parked while the key is at
        the task's ``key_concurrency`` (scored by rank; ``lua/_fair_sorted.lua``)."""
        return f"{self.prefix}:{joined('sorted-parked', queue, task, key)}"

    def sorted_parked_sets(self, queue: str) -> str:
        """Sorted backend: the names of a queue's parked sets (:meth:`sorted_parked`) that
        hold jobs, for the purge."""
        return f"{self.prefix}:sorted:{queue}:parked"

    def sorted_heads(self, queue: str) -> str:
        """Sorted backend: hash of '<level> <key>' -> the id of the key's job in waiting,
        and '' -> how many jobs wait in lanes (``lua/_fair_sorted.lua``)."""
        return f"{self.prefix}:sorted:{queue}:heads"

    def sorted_delayed(self, queue: str) -> str:
        """Sorted backend: job ids waiting for a due time, scored by due ms (server clock)."""
        return f"{self.prefix}:sorted:{queue}:delayed"

    def sorted_deliveries(self, queue: str) -> str:
        """Sorted backend: hash of job id -> how many times it was taken."""
        return f"{self.prefix}:sorted:{queue}:deliveries"

    def sorted_wake(self, queue: str) -> str:
        """Sorted backend: short stream XADDed on enqueue and retry; idle workers block on
        it with XREAD, so every one of them wakes (lockgate 0.1 used a list, ``wakeup``,
        which BLPOP hands to one waiter only)."""
        return f"{self.prefix}:sorted:{queue}:wake"

    def sorted_owners(self, queue: str) -> str:
        """Sorted backend: hash of job id -> owner token of the take that may settle it."""
        return f"{self.prefix}:sorted:{queue}:owners"

    def place_keys(self, placed: str) -> list[str]:
        """The keys of the place a job's marker value names (see ``lua/_marker.lua``), in
        the order ``job_status`` and ``cancel_job`` take them: a stream and its delayed
        set; a sorted queue's payloads, inflight, delayed, deliveries, waiting, ranks and
        owners; none for a marker that names no place (lockgate 0.2's, or none)."""
        words = placed.split(" ")
        if len(words) == 2 and words[0] == "sorted":
            q = self.sorted_keys(words[1])
            return [
                q.payloads, q.inflight, q.delayed, q.deliveries, q.waiting, q.ranks, q.owners
            ]  # fmt: skip
        if len(words) >= 4 and words[0] == "fair":  # 'fair <entry> <queue>:<level> <key>'
            queue, _, level = words[2].partition(":")
            key = placed.split(" ", 3)[3]
            return [self.stream(queue, level), self.delayed(queue, level),
                    self.fair_jobs(queue, level, key)]  # fmt: skip
        if len(words) >= 2 and ":" in words[-1]:
            queue, _, level = words[-1].rpartition(":")
            return [self.stream(queue, level), self.delayed(queue, level)]
        return []

    def sorted_keys(self, queue: str) -> SortedKeys:
        """All keys of one sorted-backend queue."""
        return SortedKeys(
            waiting=self.sorted_waiting(queue),
            inflight=self.sorted_inflight(queue),
            payloads=self.sorted_payloads(queue),
            ranks=self.sorted_ranks(queue),
            clock=self.sorted_clock(queue),
            wake=self.sorted_wake(queue),
            delayed=self.sorted_delayed(queue),
            deliveries=self.sorted_deliveries(queue),
            owners=self.sorted_owners(queue),
        )


@dataclass(frozen=True)
class SortedKeys:
    """The keys of one sorted-backend queue."""

    waiting: str
    inflight: str
    payloads: str
    ranks: str
    clock: str
    wake: str
    delayed: str
    deliveries: str
    owners: str
