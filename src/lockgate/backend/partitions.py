"""Where a namespace's keys live when it has several partitions (pure: names, no I/O).

``App(partitions=1)`` keeps every key under the one hash tag ``{namespace}``: one Redis
Cluster slot, one primary. With ``partitions=P`` (P > 1) the namespace is P independent
copies of the job layout, each under its own hash tag, and a job lives in the partition
its id hashes to (:func:`partition_of`; a job with a fairness key, its key: see
:func:`home_of`), with everything one script touches about it: its
stream and delayed set, its enqueue marker, status, result, cancel flag, cron tick key,
dead letter, and the claim and done marker of an ``idempotent=True`` task. So each script
still runs on one node, and jobs spread over the cluster.

The partitions' tags are chosen so their slots are evenly spaced (:func:`partition_tags`):
partition p's slot lies in the p-th of P equal slot ranges, so a cluster whose primaries
hold equal contiguous ranges (what ``redis-cli --cluster create`` makes) gets an equal
share of partitions on each primary (P = 9 on 3 primaries: 3 each) instead of whatever
CRC16 happens to give nine random names.

User claims (``app.idempotent``, ``job.step``), ``incr_once`` counters and cooldowns are
not about a job: each hashes by its own key (:meth:`Layout.claim_place`,
:meth:`Layout.counter_keys`, :meth:`Layout.cooldown`), so they spread over the cluster
too. What belongs to the whole namespace (the worker registry, activity counts, rate
limiters, the partition count itself, the idle workers' wake-up lists) keeps the plain
``{namespace}`` tag.

A tag of a partitioned namespace contains ``/``, which a namespace name cannot, so no
other namespace's keys can match ``lockgate:{namespace/*``.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from functools import cache, cached_property

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from lockgate.backend.keys import Keys

SEPARATOR = "/"
# Hex digits of SHA1(key) naming a user claim's tag: 4,096 tags, each holding one bucket
# of done markers, as many buckets as a one-partition namespace has (see keys.py).
CLAIM_TAG_DIGITS = 3


def partition_of(job_id: str, partitions: int) -> int:
    """The partition a job id hashes to (CRC32: the same in every process and version)."""
    if partitions == 1:
        return 0
    return zlib.crc32(job_id.encode("utf-8", "surrogatepass")) % partitions


def home_of(job_id: str, key: str | None, partitions: int) -> int:
    """The partition a job lives in: its fairness key's when it has one
    (``@app.task(key_by=...)``), so that a key's jobs, lane and slots share one slot and
    one script serves them; else its id's. A job is found by its id alone all the same
    (``Jobs`` looks in the id's partition first, then in the others)."""
    return partition_of(key or job_id, partitions)


@cache
def partition_tags(namespace: str, partitions: int) -> tuple[str, ...]:
    """The hash tag of each partition: ``namespace`` alone for one partition, else
    ``namespace/p<i>`` with the smallest suffix ``.<n>`` that puts partition i's slot in
    the i-th of ``partitions`` equal ranges of the 16,384 slots."""
    if partitions == 1:
        return (namespace,)
    tags = []
    for index in range(partitions):
        base, salt = f"{namespace}{SEPARATOR}p{index}", 0
        while True:
            tag = base if salt == 0 else f"{base}.{salt}"
            if key_slot(tag.encode()) * partitions // REDIS_CLUSTER_HASH_SLOTS == index:
                tags.append(tag)
                break
            salt += 1
    return tuple(tags)


@dataclass(frozen=True)
class Layout:
    """The key names of one namespace across its partitions.

    Attributes:
        namespace: the namespace.
        partitions: how many partitions it has (1: today's one-tag layout).
    """

    namespace: str
    partitions: int = 1

    @cached_property
    def base(self) -> Keys:
        """The keys of the whole namespace (registry, activity, rate limits, the
        partition record); with one partition also every job's."""
        return Keys(self.namespace)

    @cached_property
    def parts(self) -> tuple[Keys, ...]:
        """Each partition's keys, in partition order."""
        if self.partitions == 1:
            return (self.base,)
        return tuple(Keys(self.namespace, tag) for tag in partition_tags(*self._id))

    @property
    def _id(self) -> tuple[str, int]:
        return self.namespace, self.partitions

    @property
    def partitioned(self) -> bool:
        """Whether jobs are spread over several partitions."""
        return self.partitions > 1

    def for_job(self, job_id: str, key: str | None = None) -> Keys:
        """The keys of the partition job ``job_id`` (of fairness key ``key``) lives in
        (see :func:`home_of`)."""
        return self.parts[home_of(job_id, key, self.partitions)]

    def index_of(self, keys: Keys) -> int:
        """The position of a partition's keys in :attr:`parts`."""
        return self.parts.index(keys)

    def claim_place(
        self,
        key: str,
        job_id: str | None = None,
        place: str | None = None,
        job_key: str | None = None,
    ) -> tuple[str, str]:
        """The Redis key of the claim on ``key`` and its done markers' bucket prefix.

        Args:
            key: the idempotency key.
            job_id: for the claim of an ``idempotent=True`` task's job: the job's id, whose
                partition the claim lives in (its settle writes the marker with the ack).
            job_key: that job's fairness key, if it has one: the job, and so its claim,
                lives in the key's partition (:func:`home_of`).
            place: hash this name instead of ``key`` for a user claim's tag: a step's
                claim is placed by its 0.2/0.3 name, so the two names share one slot
                and one script reads both (see :meth:`Keys.older_step_claim_name`).

        Returns:
            (claim key, done prefix). A prefix ending in ``:`` gets the claim's bucket
            digits appended (see ``lua/_done_marker.lua``); a user claim of a partitioned
            namespace has its own tag, holding one bucket, and the prefix is that bucket.
        """
        if not self.partitioned:
            return self.base.claim(key), self.base.done_bucket_prefix
        if job_id is not None:
            keys = self.for_job(job_id, job_key)
            return keys.claim(key), keys.done_bucket_prefix
        digest = hashlib.sha1((place or key).encode("utf-8", "surrogatepass")).hexdigest()
        keys = Keys(self.namespace, f"{self.namespace}{SEPARATOR}c.{digest[:CLAIM_TAG_DIGITS]}")
        return keys.claim(key), keys.done_bucket_prefix.rstrip(":")

    def counter_keys(self, name: str) -> tuple[str, str]:
        """Counter ``name``'s key and the prefix of its request guards (one tag)."""
        keys = self._own(f"n.{name}")
        return keys.counter(name), keys.request(name, "")

    def request_keys(self, name: str, request_id: str) -> tuple[str, str]:
        """The guard of ``request_id`` on counter ``name`` (:meth:`Keys.request`) and its
        0.2/0.3 name (:meth:`Keys.older_request`, see ``lua/incr_once.lua``), under the
        counter's tag."""
        keys = self._own(f"n.{name}")
        return keys.request(name, request_id), keys.older_request(name, request_id)

    def cooldown(self, key: str) -> str:
        """The key of a cooldown on ``key``."""
        return self._own(f"k.{key}").cooldown(key)

    def _own(self, name: str) -> Keys:
        if not self.partitioned:
            return self.base
        return Keys(self.namespace, f"{self.namespace}{SEPARATOR}{name}")

    @property
    def patterns(self) -> list[str]:
        """SCAN patterns matching every key of the namespace (and no other's)."""
        own = f"{self.base.prefix}:*"
        if not self.partitioned:
            return [own]
        return [own, f"lockgate:{{{self.namespace}{SEPARATOR}*"]
