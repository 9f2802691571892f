"""Prometheus metrics, health and readiness of workers: ``lockgate worker --metrics-port``.

Needs the ``metrics`` extra (prometheus_client). One HTTP endpoint per worker command:

- ``/metrics``: the metrics below, in Prometheus' text format (OpenMetrics when asked);
- ``/healthz``: 200 while the process lives;
- ``/readyz``: 200 while the worker is connected to Redis and consuming
  ([Worker.ready][lockgate.Worker.ready]), else 503; with ``--processes N``, while at
  least one of its worker processes is.

Metrics (``level`` is the priority level's name, ``task`` the task's name, ``?`` for an
entry that could not be decoded):

- ``lockgate_jobs_started_total{task,level}``: runs started (the task called), and runs
  that ended without being run (a duplicate, expired, undecodable, wrong arguments);
- ``lockgate_jobs_total{task,level,outcome}``: runs ended, ``outcome`` one of
  ``succeeded``, ``retried`` (the attempt failed and another will run), ``dead_lettered``
  (a final failure) and ``cancelled`` (``App.cancel``, or expired);
- ``lockgate_jobs_put_back_total{task,level,reason}``: runs put back unrun, no attempt
  spent, and no start counted; ``reason`` one of ``rate_limited``, ``claim_busy`` (another
  worker holds the job's claim), ``unknown_task``, ``redis_error``, ``run_failed``,
  ``other`` (see :func:`~lockgate.ops.job_metrics.put_back_reason`);
- ``lockgate_claims_skipped_total{task}``: duplicates of work already done, acknowledged
  without running. Started = ended + skipped + running (a run abandoned at a stop and
  run again, or put back by a step's busy claim after it began, counts a second start);
- ``lockgate_job_wait_seconds{level}`` (histogram, buckets from 0.5 ms to an hour):
  enqueue to the start of the first attempt's run, after any put-backs (a retry's wait
  includes its backoff, so it is not observed);
- ``lockgate_job_run_seconds{task}`` (histogram, 0.5 ms to 15 minutes): each run that
  started;
- ``lockgate_queue_jobs{queue,level,state}`` (gauge): ``state`` waiting, pending (handed
  to a worker, not finished) or delayed (retries, delayed enqueues);
- ``lockgate_queue_oldest_wait_seconds{queue,level}`` (gauge): age of the next waiting job;
- ``lockgate_dead_letters`` (gauge): length of the dead-letter queue;
- ``lockgate_workers_ready`` (gauge): worker processes connected and consuming;
- ``lockgate_build_info{version,python_version}`` (gauge, always 1);
- prometheus_client's process and Python series: ``process_*`` (CPU seconds, memory,
  file descriptors, start time), ``python_gc_*`` and ``python_info``. With
  ``--processes N`` each worker process publishes its own ``process_*`` and
  ``python_gc_*`` with a ``worker`` label (its name, as in the registry), gone when it
  exits (see :mod:`lockgate.ops.process_metrics`).

Counters start at zero with the process (with ``--processes N``, with the supervisor: a
worker process restarted adds to the counts of the one before); Prometheus' ``rate()``
handles the restart. The queue gauges are read from Redis (:func:`lockgate.inspect.queue_stats`)
when a scrape asks for them, at most once a second whatever the scrape rate.

One process: :class:`WorkerMetrics` adds a :class:`JobMetrics` watcher to the worker,
registers a :class:`QueueCollector` and serves its registry with a
:class:`~lockgate.ops.health.MetricsServer` (a thread). The queue counts are read on the
worker's own event loop, so they share its connection pool.

Several processes (``--processes N``): prometheus_client's multiprocess mode, the way its
documentation describes (https://prometheus.github.io/client_python/multiprocess/): the
supervisor makes a fresh directory and sets ``PROMETHEUS_MULTIPROC_DIR`` to it before it
starts the worker processes (:class:`SupervisorMetrics`), which inherit it and write
their samples there; the supervisor serves the one endpoint with a
``MultiProcessCollector`` and marks each process that exits dead. Its scrapes and its
readiness skip a file whose header is not written yet (a worker process starting:
:func:`complete_files`), which prometheus_client's reader fails on. Custom collectors do
not work across processes, so each worker process publishes its readiness (a
``livesum`` gauge) twice a second, and the one holding a lock file in the directory reads
the queue counts once a second into ``mostrecent`` gauges.
"""

from __future__ import annotations

import asyncio
import fcntl
import glob
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Awaitable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from lockgate.core.logs import get_logger
from lockgate.errors import ConfigError, LockgateError, MissingExtra

try:
    import prometheus_client
    from prometheus_client import CollectorRegistry, Gauge, values
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
    from prometheus_client.registry import Collector
    from prometheus_client.values import MutexValue
except ImportError as e:  # a core install: prometheus_client comes with the metrics extra
    raise MissingExtra("lockgate.ops.metrics", "metrics", "prometheus_client") from e
from lockgate.ops.health import BIND_ALL, MetricsServer
from lockgate.ops.inspect import Stats, queue_stats
from lockgate.ops.job_metrics import JobMetrics
from lockgate.ops.process_metrics import (
    ProcessGauges,
    add_runtime_collectors,
    add_supervisor_collectors,
)

if TYPE_CHECKING:
    from lockgate.api.app import App
    from lockgate.worker.loop import Worker

T = TypeVar("T")
log = get_logger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
READY_METRIC = "lockgate_workers_ready"
SAMPLE_EVERY = 1.0  # seconds a reading of the queue counts is reused
SAMPLE_TIMEOUT = 2.0  # seconds a scrape waits for the counts before leaving them out
PUBLISH_EVERY = 0.5  # seconds between a worker process's writes of its readiness
SAMPLER_LOCK = "queue-sampler.lock"  # in the multiprocess directory
STATES = ("waiting", "pending", "delayed")


class QueueSampler:
    """The queue counts of a worker's queues, read on the worker's event loop from any
    thread, at most once per ``every`` seconds (a reading, or a failure, is reused).

    Args:
        app: the worker's app.
        queues: its queues.
        every: seconds a reading is reused.
    """

    def __init__(self, app: App, queues: Sequence[str], every: float = SAMPLE_EVERY) -> None:
        self._app = app
        self._queues = tuple(queues)
        self._every = every
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last: Stats | None = None
        self._at = -float("inf")
        self._failing = False

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read on ``loop`` (the worker's, where the app's async client lives)."""
        self._loop = loop

    def sample(self) -> Stats | None:
        """The counts, None when they cannot be read now (not attached, Redis down)."""
        with self._lock:  # concurrent scrapes share one reading
            if time.monotonic() - self._at < self._every:
                return self._last
            self._last = self._read()
            self._at = time.monotonic()
            return self._last

    def _read(self) -> Stats | None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return None
        try:
            future = asyncio.run_coroutine_threadsafe(queue_stats(self._app, self._queues), loop)
        except RuntimeError:  # the loop closed since
            return None
        try:
            stats = future.result(SAMPLE_TIMEOUT)
        except Exception as e:  # a scrape still answers, without the queue gauges
            future.cancel()
            if not self._failing:  # once per outage, not once a second
                why = e if isinstance(e, LockgateError) else repr(e)
                log.warning("metrics: cannot read the queue counts: %s", why)
            self._failing = True
            return None
        if self._failing:
            log.info("metrics: reading the queue counts again")
        self._failing = False
        return stats


def queue_samples(stats: Stats) -> Iterator[tuple[str, tuple[str, ...], float]]:
    """The queue gauges' samples (pure): ``(metric, label values, value)``."""
    for row in stats.levels:
        for state in STATES:
            yield "lockgate_queue_jobs", (row.queue, row.level, state), getattr(row, state)
        oldest = (row.oldest_wait_ms or 0) / 1000
        yield "lockgate_queue_oldest_wait_seconds", (row.queue, row.level), oldest
    yield "lockgate_dead_letters", (), stats.dead_letters


QUEUE_GAUGES = {
    "lockgate_queue_jobs": ("Jobs per queue, level and state.", ("queue", "level", "state")),
    "lockgate_queue_oldest_wait_seconds": (
        "Seconds the next waiting job has waited.", ("queue", "level"),
    ),
    "lockgate_dead_letters": ("Entries in the dead-letter queue.", ()),
}  # fmt: skip


class QueueCollector(Collector):
    """The queue gauges, read when scraped (one process; see :class:`QueueSampler`)."""

    def __init__(self, sampler: QueueSampler) -> None:
        self._sampler = sampler

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return ()  # registered without a reading from Redis

    def collect(self) -> Iterable[GaugeMetricFamily]:
        stats = self._sampler.sample()
        if stats is None:
            return ()  # left out: Prometheus marks them stale, not a made-up value
        families = {
            name: GaugeMetricFamily(name, text, labels=list(labels))
            for name, (text, labels) in QUEUE_GAUGES.items()
        }
        for name, labels, value in queue_samples(stats):
            families[name].add_metric(list(labels), value)
        return families.values()


class WorkerMetrics:
    """The metrics of one worker process: served on ``port`` (a single worker), or
    written to ``directory`` for the supervisor that serves them (``--processes N``).

    Adds its :class:`JobMetrics` watcher to ``worker.watchers``. Turns prometheus_client's
    ``*_created`` series off for the process (one more series per label set, which
    nobody here graphs).

    Args:
        worker: the worker, before it runs.
        port: serve ``/metrics``, ``/healthz`` and ``/readyz`` on this port (0: a free one).
        directory: a supervisor's multiprocess directory, which ``PROMETHEUS_MULTIPROC_DIR``
            named when this process started.
        host: the address to listen on, with ``port``.

    Raises:
        ConfigError: neither or both of port and directory; the port cannot be bound; the
            directory is not this process's multiprocess directory.
    """

    def __init__(
        self,
        worker: Worker,
        *,
        port: int | None = None,
        directory: str | None = None,
        host: str = BIND_ALL,
    ) -> None:
        if (port is None) == (directory is None):
            raise ConfigError("WorkerMetrics needs either a port or a directory")
        prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
        self.worker = worker
        self.registry = CollectorRegistry()
        self.jobs = JobMetrics(worker.app, self.registry)
        self._sampler = QueueSampler(worker.app, worker.queues)
        self._ready = Gauge(
            READY_METRIC, "Worker processes connected to Redis and consuming.",
            registry=self.registry, multiprocess_mode="livesum",
        )  # fmt: skip
        self.server: MetricsServer | None = None
        self._publisher: _Publisher | None = None
        if port is not None:
            self._ready.set_function(lambda: float(worker.ready))
            self.registry.register(QueueCollector(self._sampler))
            add_runtime_collectors(self.registry)
            self.server = MetricsServer(self.registry, lambda: worker.ready, port, host)
        else:
            assert directory is not None
            self._publisher = _Publisher(worker, directory, self._sampler, self._ready,
                                         self.registry, ProcessGauges(worker.name))  # fmt: skip
        worker.watchers.add(self.jobs)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve (or publish) from now on; queue counts are read on ``loop``."""
        self._sampler.attach(loop)
        if self.server is not None:
            self.server.start()
        if self._publisher is not None:
            self._publisher.start()

    def close(self) -> None:
        """Stop serving (or publishing)."""
        if self.server is not None:
            self.server.close()
        if self._publisher is not None:
            self._publisher.close()

    async def serving(self, work: Awaitable[T]) -> T:
        """Await ``work`` (the worker's run) with the metrics served meanwhile."""
        self.start(asyncio.get_running_loop())
        try:
            return await work
        finally:
            self.close()


class _Publisher:
    """A worker process's share of a supervisor's endpoint (multiprocess mode): its
    readiness and its process series every ``PUBLISH_EVERY`` seconds; the queue counts too
    while it holds the directory's sampler lock (one process at a time; the lock goes with
    its holder)."""

    def __init__(
        self,
        worker: Worker,
        directory: str,
        sampler: QueueSampler,
        ready: Gauge,
        registry: CollectorRegistry,
        process: ProcessGauges,
    ) -> None:
        if os.environ.get(MULTIPROC_ENV) != directory or values.ValueClass is MutexValue:
            raise ConfigError(
                f"--metrics-dir {directory} needs {MULTIPROC_ENV} set to it when the process "
                "starts (lockgate worker --processes N sets it)"
            )
        self._worker = worker
        self._directory = directory
        self._sampler = sampler
        self._ready = ready
        self._process = process
        self._gauges = {
            name: Gauge(name, text, list(labels), registry=registry,
                        multiprocess_mode="mostrecent")
            for name, (text, labels) in QUEUE_GAUGES.items()
        }  # fmt: skip
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lockgate-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._ready.set(0)

    def _run(self) -> None:
        """Publish until closed; a round that fails is logged, this process counts as not
        ready meanwhile, and the next round tries again (the thread never ends early)."""
        sampling = False
        while True:
            try:
                with open(os.path.join(self._directory, SAMPLER_LOCK), "a") as lock:
                    while True:
                        self._ready.set(float(self._worker.ready))
                        self._process.publish()
                        sampling = sampling or _try_lock(lock.fileno())
                        stats = self._sampler.sample() if sampling else None
                        if stats is not None:
                            for name, labels, value in queue_samples(stats):
                                gauge = self._gauges[name]
                                (gauge.labels(*labels) if labels else gauge).set(value)
                        if self._stop.wait(PUBLISH_EVERY):
                            return
            except Exception:
                log.exception("metrics: publishing failed; trying again")
                sampling = False  # the lock went with the file
                try:
                    self._ready.set(0)
                except Exception:
                    log.debug("metrics: readiness not published", exc_info=True)
                if self._stop.wait(PUBLISH_EVERY):
                    return


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


HEADER_BYTES = 8  # a multiprocess file's header: 4 bytes of used length, 4 of padding


def complete_files(paths: Iterable[str]) -> list[str]:
    """The multiprocess files whose header is written, in order; the others are left out.

    A worker process's file exists before it has a header: prometheus_client's writer
    opens it (0 bytes), then grows it to its first size, then writes the header, and its
    reader fails on a file shorter than 4 bytes. Such a file holds no sample yet, so
    leaving it out changes no sum; one that vanished meanwhile (a dead process's ``live``
    gauge) is left out too. Files only grow while written, so a file seen whole stays so.

    Args:
        paths: the files' paths.

    Returns:
        The paths of the files at least a header long.
    """
    complete = []
    for path in paths:
        try:
            if os.path.getsize(path) >= HEADER_BYTES:
                complete.append(path)
        except FileNotFoundError:
            continue
    return complete


class _CompleteFilesCollector(MultiProcessCollector):
    """``MultiProcessCollector`` merging only the files whose header is written (see
    :func:`complete_files`), so a scrape while a worker process starts cannot fail."""

    def __init__(self, registry: CollectorRegistry, path: str) -> None:
        super().__init__(registry, path=path)  # type: ignore[no-untyped-call]
        self._directory = path

    def collect(self) -> Iterable[Metric]:
        files = complete_files(glob.glob(os.path.join(self._directory, "*.db")))
        merged: Iterable[Metric] = self.merge(files, accumulate=True)  # type: ignore[no-untyped-call]
        return merged


class SupervisorMetrics:
    """The one endpoint of a supervisor's worker processes (multiprocess mode).

    Makes a fresh directory and sets ``PROMETHEUS_MULTIPROC_DIR`` to it for the worker
    processes started after (they inherit the environment); serves what they write there.
    Ready while at least one of them is. Use as a context manager: leaving it stops
    serving, removes the directory and restores the environment.

    Args:
        port: the TCP port (0: a free one).
        host: the address to listen on.

    Raises:
        ConfigError: the port cannot be bound.
    """

    def __init__(self, port: int, host: str = BIND_ALL) -> None:
        self.directory = tempfile.mkdtemp(prefix="lockgate-metrics-")
        self._previous = os.environ.get(MULTIPROC_ENV)
        os.environ[MULTIPROC_ENV] = self.directory
        registry = CollectorRegistry()
        _CompleteFilesCollector(registry, self.directory)
        add_supervisor_collectors(registry)
        try:
            self.server = MetricsServer(registry, self.ready, port, host)
        except BaseException:
            self._clean_up()
            raise

    def ready(self) -> bool:
        """Whether a worker process is connected and consuming (a live one's gauge)."""
        files = complete_files(glob.glob(os.path.join(self.directory, "gauge_livesum_*.db")))
        merged = MultiProcessCollector.merge(files, accumulate=False)  # type: ignore[no-untyped-call]
        for metric in merged:
            if metric.name == READY_METRIC:
                return any(sample.value > 0 for sample in metric.samples)
        return False

    def process_exited(self, pid: int) -> None:
        """Forget the readiness of a worker process that ended (its counts stay)."""
        try:
            mark_process_dead(pid, self.directory)  # type: ignore[no-untyped-call]
        except OSError as e:
            log.warning("metrics: cannot forget worker process %d: %s", pid, e)

    def __enter__(self) -> SupervisorMetrics:
        self.server.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.server.close()
        self._clean_up()

    def _clean_up(self) -> None:
        if self._previous is None:
            os.environ.pop(MULTIPROC_ENV, None)
        else:
            os.environ[MULTIPROC_ENV] = self._previous
        shutil.rmtree(self.directory, ignore_errors=True)
