"""The app of the Prometheus query test's worker process, configured by the environment.

``LOCKGATE_REDIS_URL`` picks the server and ``LOCKGATE_TEST_NAMESPACE`` the namespace. Each
task ends one way, so the worker's metrics have a series for every panel of the Grafana
dashboard: successes on two levels, a retry, a dead letter, rate-limited put-backs.
"""

from __future__ import annotations

import os

from lockgate import App, RetryableError, current_job

app = App(namespace=os.environ.get("LOCKGATE_TEST_NAMESPACE", "prometheus-test"))


@app.task(retries=1, backoff=0.01)
async def ends(how: str) -> None:
    """``ok`` succeeds, ``flaky`` fails its first attempt, ``doomed`` fails both (a dead
    letter)."""
    if how == "doomed" or (how == "flaky" and current_job().attempt == 1):
        raise RetryableError(how)


@app.task(rate_limit="10/s")
async def paced(n: int) -> None:
    """Over its rate when enqueued together: put back until its turn."""
