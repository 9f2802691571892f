"""What the benchmark tasks report, from inside whichever worker runs them.

Completions are counted in batches (one ``INCRBY`` per ``BATCH`` no-op jobs, per
``LOW_BATCH`` low jobs), so the measurement costs a round trip per hundred jobs, not per
job. Critical jobs push their enqueue-to-start latency one by one: there are few of them
and the push happens after the start was stamped.

Configured through the environment the runner sets: ``BENCH_URL`` (the server),
``BENCH_KEYS`` (the prefix of the harness's own keys) and ``BENCH_TARGET`` (no-op jobs
to wait for).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass

import redis

BATCH = 100
LOW_BATCH = 10

_noop = itertools.count(1)  # next() on a count is atomic under the GIL: safe in threads
_low = itertools.count(1)
_lock = threading.Lock()
_client: redis.Redis | None = None


@dataclass(frozen=True)
class ProbeKeys:
    """The harness's keys for one run."""

    prefix: str

    @property
    def first(self) -> str:
        """Wall-clock time the first no-op job started."""
        return f"{self.prefix}:first"

    @property
    def last(self) -> str:
        """Wall-clock time the target count of no-op jobs was reached."""
        return f"{self.prefix}:last"

    @property
    def done(self) -> str:
        """No-op jobs done, in steps of BATCH."""
        return f"{self.prefix}:done"

    @property
    def low(self) -> str:
        """Low jobs done, in steps of LOW_BATCH."""
        return f"{self.prefix}:low"

    @property
    def latencies(self) -> str:
        """List of critical jobs' enqueue-to-start seconds."""
        return f"{self.prefix}:latency"

    def all(self) -> list[str]:
        """Every key, for deletion."""
        return [self.first, self.last, self.done, self.low, self.latencies]


def keys() -> ProbeKeys:
    """This process's keys (from ``BENCH_KEYS``)."""
    return ProbeKeys(os.environ["BENCH_KEYS"])


def client() -> redis.Redis:
    """A shared sync client to ``BENCH_URL`` (thread-safe, created on first use)."""
    global _client
    with _lock:
        if _client is None:
            _client = redis.Redis.from_url(os.environ["BENCH_URL"])
        return _client


def noop_done() -> None:
    """Record one finished no-op job."""
    n = next(_noop)
    if n == 1:
        client().set(keys().first, repr(time.time()), nx=True)
    if n % BATCH == 0:
        total = client().incrby(keys().done, BATCH)
        if total >= int(os.environ["BENCH_TARGET"]):
            client().set(keys().last, repr(time.time()), nx=True)


def low_done() -> None:
    """Record one finished low job."""
    if next(_low) % LOW_BATCH == 0:
        client().incrby(keys().low, LOW_BATCH)


def critical_started(sent: float) -> None:
    """Record a critical job's start: ``sent`` is when the producer called enqueue."""
    waited = time.time() - sent
    client().rpush(keys().latencies, repr(waited))
