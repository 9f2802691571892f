"""Every query of the Grafana dashboard (docs/grafana/lockgate.json) returns series from a
real Prometheus scraping a real worker.

The test starts a worker command with ``--metrics-port`` (one process, and a supervisor of
two) that runs jobs ending every way (successes on two levels, a retry, a dead letter,
rate-limited put-backs), and a private Prometheus (Debian's ``prometheus``, ``make
prometheus``) on a free port and a temporary directory, scraping it every second. Each
panel's PromQL, with Grafana's variables replaced, is asked of Prometheus' HTTP API until
it returns a series; a query that never does fails the test, naming its panel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from test_metrics import imported_app, worker_env

from free_ports import free_port

HERE = Path(__file__).parent
DASHBOARD = HERE.parents[1] / "docs" / "grafana" / "lockgate.json"
PROMETHEUS = "/usr/bin/prometheus"
LOCAL = "127.0.0.1"
JOB = "lockgate"
DEADLINE = 60.0  # seconds for every query to return a series (a bound against hangs)
RUN_TIMEOUT = 60
# Grafana's variables, as a dashboard on this Prometheus would fill them in.
VARIABLES = {"$__rate_interval": "15s", "$__interval": "1s", "${job}": JOB, "$job": JOB}


def panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL with the variables replaced) for every target of every panel."""
    queries = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            assert "$" not in expr, (panel["title"], expr)  # a variable left unreplaced
            queries.append((f"{panel['title']} ({target['refId']})", expr))
    return queries


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def series(base: str, expr: str) -> list[Any]:
    """The series an instant query returns (an error answer fails: a bad query)."""
    query = urllib.parse.urlencode({"query": expr})
    try:
        answer = get_json(f"{base}/api/v1/query?{query}")
    except urllib.error.HTTPError as e:
        raise AssertionError(f"{expr}: {e.code} {e.read().decode()}") from e
    assert answer["status"] == "success", answer
    result: list[Any] = answer["data"]["result"]
    return result


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.fixture
def jobs(redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """``prometheus_app`` imported for this test's Redis and namespace (to enqueue)."""
    yield from imported_app("prometheus_app", redis_url, namespace, monkeypatch)


def enqueue_every_ending(jobs: ModuleType) -> None:
    for _ in range(3):
        jobs.ends.enqueue("ok", priority="critical")
        jobs.ends.enqueue("ok", priority="low")
    jobs.ends.enqueue("flaky")
    jobs.ends.enqueue("doomed")
    jobs.app.enqueue_many([jobs.paced.message(n) for n in range(5)])


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def test_the_dashboard_has_the_panels_the_issue_asks_for() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["schemaVersion"] >= 36
    titles = " / ".join(panel["title"] for panel in dashboard["panels"]).lower()
    for wanted in ("wait", "throughput", "failures", "dead letters", "workers", "queue depth",
                   "build"):  # fmt: skip
        assert wanted in titles, wanted
    exprs = " ".join(expr for _, expr in panel_queries(dashboard))
    for metric in ("lockgate_job_wait_seconds_bucket", "lockgate_jobs_total",
                   "lockgate_dead_letters", "lockgate_workers_ready", "lockgate_queue_jobs",
                   "lockgate_build_info", "lockgate_jobs_put_back_total"):  # fmt: skip
        assert metric in exprs, metric
    # Every panel and target reads the data source the importer picks.
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])


@pytest.mark.parametrize("processes", ["1", "2"])
def test_every_panel_query_returns_series_from_prometheus_scraping_a_worker(
    processes: str, jobs: ModuleType, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    assert os.access(PROMETHEUS, os.X_OK), f"{PROMETHEUS} is missing: make prometheus"
    queries = panel_queries(json.loads(DASHBOARD.read_text()))
    enqueue_every_ending(jobs)
    metrics_port = free_port()
    prometheus_port = free_port(taken={metrics_port})
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({  # YAML is a superset of JSON
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{
            "job_name": JOB,
            "static_configs": [{"targets": [f"{LOCAL}:{metrics_port}"]}],
        }],
    }))  # fmt: skip
    worker_log, prometheus_log = tmp_path / "worker.log", tmp_path / "prometheus.log"
    with worker_log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "lockgate", "worker", "prometheus_app:app",
             "--processes", processes, "--metrics-port", str(metrics_port)],
            cwd=HERE, env=worker_env(redis_url, namespace), stdin=subprocess.DEVNULL,
            stdout=out, stderr=out,
        )  # fmt: skip
    with prometheus_log.open("wb") as out:
        prometheus = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address={LOCAL}:{prometheus_port}"],
            cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
        )  # fmt: skip
    base = f"http://{LOCAL}:{prometheus_port}"
    try:
        deadline = time.monotonic() + DEADLINE
        while not ready(f"{base}/-/ready"):
            assert prometheus.poll() is None, prometheus_log.read_text()
            assert time.monotonic() < deadline, "Prometheus not ready"
            time.sleep(0.2)  # polling a server we do not control: no event to wait on
        missing = dict(queries)
        while missing and time.monotonic() < deadline:
            assert worker.poll() is None, worker_log.read_text()
            for title, expr in list(missing.items()):
                if series(base, expr):
                    del missing[title]
            time.sleep(0.5)
        assert not missing, (
            f"panels whose query returned no series within {DEADLINE:g}s: {sorted(missing)}\n"
            + json.dumps(series(base, "up"))
        )
        # The Grafana variable $job lists the worker's job.
        jobs_found = series(base, "count by (job) (lockgate_build_info)")
        assert [s["metric"]["job"] for s in jobs_found] == [JOB]
    finally:
        stop(prometheus)
        stop(worker)
    assert worker.returncode == 0, worker_log.read_text()
