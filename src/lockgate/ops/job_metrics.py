"""The job counters and histograms of a worker (see :mod:`lockgate.ops.metrics` for the
endpoint): a job watcher, and the words it counts put-backs in.

Needs the ``metrics`` extra (prometheus_client).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from lockgate.errors import MissingExtra

try:
    from prometheus_client import CollectorRegistry, Counter, Histogram
except ImportError as e:  # a core install: prometheus_client comes with the metrics extra
    raise MissingExtra("lockgate.ops.job_metrics", "metrics", "prometheus_client") from e
from lockgate.worker.joblog import UNKNOWN_TASK, ended_as, level_name

if TYPE_CHECKING:
    from lockgate.api.app import App
    from lockgate.backend.broker import Delivery
    from lockgate.core.outcome import Outcome
    from lockgate.worker.runner import Ending

# From 0.5 ms: a critical job's wait of 1-5 ms must be visible. Every bucket is one series
# per label set, so the steps stay coarse (about 1-2.5-5 per decade).
WAIT_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1, 2.5, 5, 10, 30, 60, 300, 900, 3600,
)  # fmt: skip
RUN_BUCKETS = WAIT_BUCKETS[:-1]  # up to 15 minutes

PutBackReason = Literal[
    "rate_limited", "claim_busy", "unknown_task", "redis_error", "run_failed", "other"
]


def put_back_reason(outcome: Outcome) -> PutBackReason:
    """Why a run was put back unrun, no attempt spent, as a metric label (pure).

    Read from the outcome's reason, as the runner and :mod:`lockgate.core.outcome` write
    it: ``rate_limited`` (a task's or a key's rate limit), ``claim_busy`` (another worker
    holds the job's claim), ``unknown_task`` (a worker that does not know the task, within
    ``App.unknown_task_grace``), ``redis_error`` (the claim or the rate limit could not be
    asked), ``run_failed`` (the run could not be started here), else ``other``.
    """
    reason = outcome.reason
    if reason == "rate limited":
        return "rate_limited"
    if reason == "claim busy" or "is being processed by another worker" in reason:
        return "claim_busy"
    if reason.startswith("unknown task"):
        return "unknown_task"
    if reason.startswith(("claim failed", "rate limit check failed")):
        return "redis_error"
    if reason.startswith("could not be run"):
        return "run_failed"
    return "other"


class JobMetrics:
    """A job watcher (see :mod:`lockgate.worker.events`) that counts a worker's jobs.

    A run counts as started when its task is called (``started``), or, for one that ends
    without being run (a duplicate, expired, undecodable, wrong arguments), when it is
    settled (its wait too: an expired job waited longest); a put-back (rate limited, claim
    busy, unknown task) is no start, and its wait goes on until the run really starts. So
    started = ended + skipped + running.

    Args:
        app: the worker's app (for its level names).
        registry: where the metrics are registered.
    """

    def __init__(self, app: App, registry: CollectorRegistry) -> None:
        self._app = app
        by_run = ["task", "level"]
        self.started_total = Counter(
            "lockgate_jobs_started", "Runs started (or ended unrun); put-backs are not.",
            by_run, registry=registry,
        )  # fmt: skip
        self.ended_total = Counter(
            "lockgate_jobs",
            "Runs ended, by outcome: succeeded, retried, dead_lettered, cancelled.",
            [*by_run, "outcome"], registry=registry,
        )  # fmt: skip
        self.put_back_total = Counter(
            "lockgate_jobs_put_back",
            "Runs put back unrun, no attempt spent, by reason (rate_limited, claim_busy, ...).",
            [*by_run, "reason"], registry=registry,
        )  # fmt: skip
        self.skipped_total = Counter(
            "lockgate_claims_skipped",
            "Duplicates of work already done, acknowledged without running.",
            ["task"], registry=registry,
        )  # fmt: skip
        self.wait_seconds = Histogram(
            "lockgate_job_wait_seconds", "Seconds from enqueue to the first attempt's start.",
            ["level"], buckets=WAIT_BUCKETS, registry=registry,
        )  # fmt: skip
        self.run_seconds = Histogram(
            "lockgate_job_run_seconds", "Seconds a run took.", ["task"],
            buckets=RUN_BUCKETS, registry=registry,
        )  # fmt: skip

    def started(self, delivery: Delivery, now: float) -> None:
        """Count the start; observe the wait of a job's first attempt."""
        job, level = delivery.job, level_name(self._app, delivery)
        self.started_total.labels(job.task if job else UNKNOWN_TASK, level).inc()
        self._wait(delivery, level, now)

    def _wait(self, delivery: Delivery, level: str, now: float) -> None:
        """Observe the wait of a job's first attempt that began or ended unrun at ``now``
        (its first delivery: a reclaimed one may have begun before)."""
        job = delivery.job
        if job is not None and job.attempt == 1 and delivery.deliveries == 1 and job.enqueued:
            self.wait_seconds.labels(level).observe(max(0.0, now - job.enqueued))

    def settled(self, ending: Ending, owned: bool) -> None:
        """Count the ending and observe the run's time (not a zombie's settle)."""
        outcome = ended_as(ending)
        if not owned or outcome is None:
            return
        delivery, job = ending.delivery, ending.delivery.job
        task, level = job.task if job else UNKNOWN_TASK, level_name(self._app, delivery)
        if outcome == "put_back":
            reason = put_back_reason(ending.outcome)
            self.put_back_total.labels(task, level, reason).inc()
        elif not ending.started:  # ended without being run: its start (and its wait, an
            self.started_total.labels(task, level).inc()  # expired job's the longest)
            self._wait(delivery, level, ending.finished)
        if outcome == "skipped":
            self.skipped_total.labels(task).inc()
        elif outcome != "put_back":
            self.ended_total.labels(task, level, outcome).inc()
        if ending.started:
            self.run_seconds.labels(task).observe(max(0.0, ending.finished - ending.started))
