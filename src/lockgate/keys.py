"""Every Redis key name lockgate uses, in one place.

All keys of a namespace share the hash tag ``{namespace}``, so every script's keys live in
one Redis Cluster slot. Nothing outside this module builds a key name.
"""

from __future__ import annotations

from dataclasses import dataclass

GROUP = "lockgate"


@dataclass(frozen=True)
class Keys:
    """Key names for one namespace."""

    namespace: str

    @property
    def prefix(self) -> str:
        """Common prefix; the braces make the namespace the Cluster hash tag."""
        return f"lockgate:{{{self.namespace}}}"

    def stream(self, queue: str, level: str) -> str:
        """The stream holding one queue's jobs of one priority level."""
        return f"{self.prefix}:stream:{queue}:{level}"

    def delayed(self, queue: str, level: str) -> str:
        """Jobs of one stream waiting for a due time (retries, delayed enqueues).

        A sorted set of encoded jobs scored by due time in server milliseconds.
        """
        return f"{self.prefix}:delayed:{queue}:{level}"

    def claim(self, key: str) -> str:
        """An idempotency claim or done marker."""
        return f"{self.prefix}:idem:{key}"

    @staticmethod
    def job_claim_name(task: str, job_id: str) -> str:
        """The idempotency key of an ``idempotent=True`` task's job (its Redis key is
        :meth:`claim` of it): one per task and job id."""
        return f"job:{task}:{job_id}"

    @staticmethod
    def legacy_job_claim_name(job_id: str) -> str:
        """The same claim as lockgate 0.1 named it, by job id alone (still honoured, and
        still marked, for 0.1 workers in a rolling deploy)."""
        return f"job:{job_id}"

    def wake(self) -> str:
        """A short stream XADDed when a delayed job or retry is scheduled: idle workers block
        on it with their job streams, so they wake to re-read the next due time."""
        return f"{self.prefix}:wake"

    def counter(self, name: str) -> str:
        """A counter kept by ``App.incr_once``."""
        return f"{self.prefix}:counter:{name}"

    def request(self, name: str, request_id: str) -> str:
        """The guard of one request id on one counter."""
        return f"{self.prefix}:request:{name}:{request_id}"

    def cooldown(self, key: str) -> str:
        """A cooldown (rate limit) marker."""
        return f"{self.prefix}:cooldown:{key}"

    def dead(self) -> str:
        """The dead-letter stream of the namespace."""
        return f"{self.prefix}:dead"

    def job(self, job_id: str) -> str:
        """Marker that a job id is queued or running (the enqueue dedup key)."""
        return f"{self.prefix}:job:{job_id}"

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
