"""`lockgate demo` runs the lesson's scenario end to end on an embedded server."""

from __future__ import annotations

import os
import subprocess
import sys

from lockgate.demo import shares_while_all_busy


def test_demo_without_redis_configured_runs_on_an_embedded_server() -> None:
    env = {k: v for k, v in os.environ.items() if k != "LOCKGATE_REDIS_URL"}
    env["COLUMNS"] = "120"
    done = subprocess.run(
        [sys.executable, "-m", "lockgate", "demo"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "an embedded server" in done.stdout
    for run in ("strict", "weighted", "sorted+aging"):
        assert run in done.stdout
    assert done.stdout.count("5000") >= 3  # every run finished all low jobs


def test_shares_count_only_the_window_where_every_level_had_work() -> None:
    starts = {"critical": [1.0, 2.0], "normal": [0.0, 1.5, 3.0], "low": [0.5, 1.2, 4.0]}
    shares = shares_while_all_busy(starts, ["critical", "normal", "low"])
    # The window is [1.0, 2.0]: critical 2, normal 1, low 1 of 4 jobs started.
    assert shares == {"critical": 0.5, "normal": 0.25, "low": 0.25}
