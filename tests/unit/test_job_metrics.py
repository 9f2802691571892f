"""The job counters and histograms (lockgate.ops.job_metrics), fed endings by hand: the
bucket edges, what counts as a start, and the put-back reasons of every producer of one."""

from __future__ import annotations

import platform
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from lockgate import App, ClaimBusy
from lockgate.backend.broker import Delivery
from lockgate.core.codec import Job
from lockgate.core.outcome import ALREADY_PROCESSED, DONE, Outcome, dead, wait
from lockgate.core.unknown_task import unknown_task
from lockgate.ops.job_metrics import RUN_BUCKETS, WAIT_BUCKETS, JobMetrics, put_back_reason
from lockgate.ops.process_metrics import BUILD_INFO, add_runtime_collectors
from lockgate.worker.registry import lockgate_version
from lockgate.worker.runner import Ending

NOWHERE = "redis://127.0.0.1:1/0"
ENQUEUED = 1_000_000.0
JOB = Job(id="j1", task="charge", queue="default", level="critical", enqueued=ENQUEUED)


@pytest.fixture
def app() -> Iterator[App]:
    app = App(NOWHERE, namespace="unit", levels={"critical": 4, "normal": 1})
    yield app
    app.close()


def delivery(job: Job = JOB, deliveries: int = 1) -> Delivery:
    return Delivery("default", 0, "stream", "1-0", job, job_id=job.id, deliveries=deliveries)


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def test_the_buckets_start_at_half_a_millisecond_and_stay_few() -> None:
    assert WAIT_BUCKETS[:3] == (0.0005, 0.001, 0.0025)
    assert RUN_BUCKETS[0] == 0.0005
    assert list(WAIT_BUCKETS) == sorted(WAIT_BUCKETS)
    assert len(WAIT_BUCKETS) <= 20 and len(RUN_BUCKETS) <= 20


@pytest.mark.parametrize(
    ("waited", "lowest"),
    [(0.0004, "0.0005"), (0.0005, "0.0005"), (0.0008, "0.001"), (0.003, "0.005")],
)
def test_a_wait_lands_in_the_first_bucket_at_or_above_it(
    app: App, waited: float, lowest: str
) -> None:
    registry = CollectorRegistry()
    metrics = JobMetrics(app, registry)
    metrics.started(delivery(), ENQUEUED + waited)
    bucket = "lockgate_job_wait_seconds_bucket"
    edges = [f"{edge:g}" if edge < 1 else f"{float(edge)}" for edge in WAIT_BUCKETS]
    below = edges[: edges.index(lowest)]
    for edge in below:
        assert value(registry, bucket, level="critical", le=edge) == 0, edge
    assert value(registry, bucket, level="critical", le=lowest) == 1
    assert value(registry, "lockgate_jobs_started_total", task="charge", level="critical") == 1


def test_a_put_back_is_no_start_and_its_wait_ends_when_its_run_begins(app: App) -> None:
    registry = CollectorRegistry()
    metrics = JobMetrics(app, registry)
    held = Outcome("retry", delay=0.2, next_job=JOB, reason="rate limited")
    metrics.settled(Ending(delivery(), held, finished=ENQUEUED + 0.001), True)
    assert value(registry, "lockgate_jobs_started_total", task="charge", level="critical") == 0
    assert value(registry, "lockgate_job_wait_seconds_count", level="critical") == 0
    assert value(registry, "lockgate_job_run_seconds_count", task="charge") == 0
    put_back = {"task": "charge", "level": "critical", "reason": "rate_limited"}
    assert value(registry, "lockgate_jobs_put_back_total", **put_back) == 1
    # Put back with waits + 1, as the runner does; its first run then begins: one wait,
    # the whole of it.
    again = Job(id="j1", task="charge", queue="default", level="critical",
                enqueued=ENQUEUED, waits=1, rate_reserved=True)  # fmt: skip
    metrics.started(delivery(again), ENQUEUED + 0.3)
    metrics.settled(Ending(delivery(again), DONE, started=ENQUEUED + 0.3,
                           finished=ENQUEUED + 0.31), True)  # fmt: skip
    assert value(registry, "lockgate_jobs_started_total", task="charge", level="critical") == 1
    assert value(registry, "lockgate_job_wait_seconds_count", level="critical") == 1
    assert value(registry, "lockgate_job_wait_seconds_bucket", level="critical", le="0.25") == 0
    assert value(registry, "lockgate_job_wait_seconds_bucket", level="critical", le="0.5") == 1
    assert value(registry, "lockgate_job_run_seconds_count", task="charge") == 1
    ended = {"task": "charge", "level": "critical", "outcome": "succeeded"}
    assert value(registry, "lockgate_jobs_total", **ended) == 1


def test_a_reclaimed_delivery_or_a_retry_observes_no_second_wait(app: App) -> None:
    registry = CollectorRegistry()
    metrics = JobMetrics(app, registry)
    metrics.started(delivery(deliveries=2), ENQUEUED + 1)
    retry = Job(id="j1", task="charge", queue="default", level="critical",
                enqueued=ENQUEUED, attempt=2)  # fmt: skip
    metrics.started(delivery(retry), ENQUEUED + 2)
    assert value(registry, "lockgate_jobs_started_total", task="charge", level="critical") == 2
    assert value(registry, "lockgate_job_wait_seconds_count", level="critical") == 0


@pytest.mark.parametrize(
    ("outcome", "counted"),
    [
        (dead("wrong arguments"), ("lockgate_jobs_total", "dead_lettered")),
        (Outcome("done", reason="expired: waited 9 s", cancelled=True),
         ("lockgate_jobs_total", "cancelled")),
        (Outcome("done", reason=ALREADY_PROCESSED, claim="keep"),
         ("lockgate_claims_skipped_total", "")),
    ],
)  # fmt: skip
def test_an_ending_without_a_run_counts_its_start_when_settled(
    app: App, outcome: Outcome, counted: tuple[str, str]
) -> None:
    registry = CollectorRegistry()
    metrics = JobMetrics(app, registry)
    metrics.settled(Ending(delivery(), outcome, finished=ENQUEUED + 9), True)
    assert value(registry, "lockgate_jobs_started_total", task="charge", level="critical") == 1
    name, ended = counted
    labels = {"level": "critical", "outcome": ended} if ended else {}
    assert value(registry, name, task="charge", **labels) == 1
    # Its wait ended there (an expired job's is the longest a queue shows).
    assert value(registry, "lockgate_job_wait_seconds_count", level="critical") == 1
    assert value(registry, "lockgate_job_wait_seconds_sum", level="critical") == 9
    # A zombie's settle changed nothing: nothing is counted.
    metrics.settled(Ending(delivery(), outcome), False)
    assert value(registry, "lockgate_jobs_started_total", task="charge", level="critical") == 1


def test_each_producer_of_a_put_back_has_its_reason() -> None:
    assert put_back_reason(wait(JOB, 0.5)) == "claim_busy"
    busy = ClaimBusy("job:j1", 1.5)
    assert put_back_reason(wait(JOB, 1.5, str(busy))) == "claim_busy"
    assert put_back_reason(unknown_task(JOB, 60.0, ENQUEUED + 1)) == "unknown_task"
    assert put_back_reason(Outcome("retry", next_job=JOB, reason="rate limited")) == (
        "rate_limited"
    )
    # The runner's words when Redis does not answer, or a run cannot be started.
    assert put_back_reason(wait(JOB, 0.5, "claim failed: timeout")) == "redis_error"
    assert put_back_reason(wait(JOB, 0.5, "rate limit check failed: timeout")) == "redis_error"
    assert put_back_reason(wait(JOB, 0.5, "could not be run: OSError()")) == "run_failed"
    assert put_back_reason(wait(JOB, 0.5, "something new")) == "other"


def test_build_info_process_and_python_series_of_one_process() -> None:
    registry = CollectorRegistry()
    add_runtime_collectors(registry)
    labels = {"version": lockgate_version(), "python_version": platform.python_version()}
    assert registry.get_sample_value(BUILD_INFO, labels) == 1
    assert (registry.get_sample_value("process_resident_memory_bytes") or 0) > 0
    assert registry.get_sample_value("process_start_time_seconds") is not None
    assert registry.get_sample_value("python_gc_collections_total", {"generation": "0"}) is not None
    names = {family.name for family in registry.collect()}
    assert "python_info" in names
