"""What the benchmark tasks report, from inside whichever worker runs them.

Completions are counted in batches (one ``INCRBY`` per ``BATCH`` no-op jobs, per
``LOW_BATCH`` low jobs), so the measurement costs a round trip per hundred jobs, not per
job. Critical jobs push their enqueue-to-start latency one by one: there are few of them
and the push happens after the start was stamped.

A worker run as several processes (``BENCH_PROBE_FLUSH=1``) cannot count in batches: each
process would keep up to ``BATCH - 1`` jobs unreported at the end. There a thread in each
process reports what it finished every ``FLUSH_SECONDS``, with the time of its latest job,
and the N-th job's time is the latest of all processes' (a sorted set, kept with ``GT``).

With ``BENCH_COUNT_ROUND_TRIPS=1`` (see ``roundtrips``) every report also adds the
process's client round trips since its previous one, and each process's first job adds
what it made before (start-up), so the runner can tell round trips per job.

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

from benchmarks import roundtrips

BATCH = 100
LOW_BATCH = 10
FLUSH_ENV = "BENCH_PROBE_FLUSH"
FLUSH_SECONDS = 0.005

_noop = itertools.count(1)  # next() on a count is atomic under the GIL: safe in threads
_low = itertools.count(1)
_lock = threading.Lock()
_client: redis.Redis | None = None
_tally: _Tally | None = None


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

    @property
    def latest(self) -> str:
        """Several processes: sorted set whose one score is the latest job's time."""
        return f"{self.prefix}:latest"

    @property
    def trips(self) -> str:
        """Client round trips the workers made from their first job to their last report."""
        return f"{self.prefix}:trips"

    @property
    def trips_start(self) -> str:
        """Client round trips the workers made before their first job."""
        return f"{self.prefix}:trips-start"

    def all(self) -> list[str]:
        """Every key, for deletion."""
        return [self.first, self.last, self.done, self.low, self.latencies, self.latest,
                self.trips, self.trips_start]  # fmt: skip


def keys() -> ProbeKeys:
    """This process's keys (from ``BENCH_KEYS``)."""
    return ProbeKeys(os.environ["BENCH_KEYS"])


def client() -> redis.Redis:
    """A shared sync client to ``BENCH_URL`` (thread-safe, created on first use)."""
    global _client
    with _lock:
        if _client is None:
            # Named so that round-trip counting leaves the probe's own trips out.
            name = roundtrips.PROBE_NAME if roundtrips.enabled() else None
            _client = redis.Redis.from_url(os.environ["BENCH_URL"], client_name=name)
        return _client


class _Tally:
    """This process's finished no-op jobs, reported by a thread every ``FLUSH_SECONDS``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = self._reported = 0
        self._latest = 0.0
        threading.Thread(target=self._run, name="bench-probe", daemon=True).start()

    def add(self) -> None:
        with self._lock:
            self._done += 1
            self._latest = time.time()

    def _run(self) -> None:
        while True:
            time.sleep(FLUSH_SECONDS)
            with self._lock:
                pending, latest = self._done - self._reported, self._latest
                self._reported = self._done
            if pending:
                _report(pending, latest)


def _tallied() -> _Tally:
    global _tally
    with _lock:
        if _tally is None:
            _tally = _Tally()
        return _tally


def _first() -> None:
    stamp = repr(time.time())
    if not roundtrips.enabled():
        client().set(keys().first, stamp, nx=True)
        return
    pipe = client().pipeline(transaction=False)
    pipe.set(keys().first, stamp, nx=True)
    pipe.incrby(keys().trips_start, roundtrips.take())
    pipe.execute()


def _report(count: int, latest: float | None = None) -> None:
    """Add ``count`` finished jobs; stamp ``last`` when they reach the target.

    ``latest`` (several processes) is the time of this process's latest job.
    """
    k = keys()
    if latest is None and not roundtrips.enabled():
        total = int(client().incrby(k.done, count))
    else:
        # One transaction: when ``done`` reaches the target, every process's latest is in.
        pipe = client().pipeline(transaction=True)
        pipe.incrby(k.done, count)
        if latest is not None:
            pipe.zadd(k.latest, {"t": latest}, gt=True)
        if roundtrips.enabled():
            pipe.incrby(k.trips, roundtrips.take())
        total = int(pipe.execute()[0])
    if total >= int(os.environ["BENCH_TARGET"]):
        stamp = time.time() if latest is None else client().zscore(k.latest, "t")
        client().set(k.last, repr(stamp), nx=True)


def noop_done() -> None:
    """Record one finished no-op job."""
    n = next(_noop)
    if n == 1:
        _first()
    if os.environ.get(FLUSH_ENV) == "1":
        _tallied().add()
    elif n % BATCH == 0:
        _report(BATCH)


def low_done() -> None:
    """Record one finished low job."""
    if next(_low) % LOW_BATCH == 0:
        client().incrby(keys().low, LOW_BATCH)


def critical_started(sent: float) -> None:
    """Record a critical job's start: ``sent`` is when the producer called enqueue."""
    waited = time.time() - sent
    client().rpush(keys().latencies, repr(waited))
