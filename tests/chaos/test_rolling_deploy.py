"""A rolling deploy from lockgate 0.1 to this version loses and doubles nothing (issue 8).

The real 0.1 package runs beside this one. It ships as a test fixture,
``lockgate_0_1.tar.gz`` (``git archive 85bc0e9 src/lockgate | gzip -9``), so the test works
on a clean clone without git history; it is extracted into the test's directory and 0.1's
processes run with ``PYTHONPATH=<extracted>/src``, ahead of the installed package.

400 jobs (plain sync, ``idempotent=True`` sync and async tasks, every level, some delayed,
one in ten failing its first attempt) are enqueued by 0.1 and new producers in three waves.
Two 0.1 and two new workers serve them; mid-run the 0.1 workers are replaced one at a time
(SIGTERM, wait for the exit, start a new worker in its place), with a wave enqueued after
each step. Every run INSERTs a row with no dedup (:mod:`rolling_app`), so a lost job shows as
a missing row and a double as two. 0.1 workers settle with their own scripts (no owner
check, the 0.1 claim key); that is exactly what runs beside the new ones in a real deploy.

An ``idempotent=True`` job enqueued again under its id after one generation ran it (a
producer's retry, a dead-letter replay) must be skipped by the other generation too.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from psycopg import sql

import lockgate
from conftest import job_ended, wait_until_sync
from lockgate.backend.keys import Keys

pytestmark = [pytest.mark.chaos, pytest.mark.single_node]

HERE = Path(__file__).parent
FIXTURE = HERE / "lockgate_0_1.tar.gz"
DSN = os.environ.get("LOCKGATE_PG_DSN", "host=127.0.0.1 dbname=test user=postgres")
JOBS = 400
# The deploy's steps: effects recorded before the step, then who enqueues the next wave of
# 50 jobs and from which job number (waves 0-149 old, 150-299 new were enqueued first).
STEPS = ((60, "old", 300), (200, "new", 350))
LEVELS = ("critical", "normal", "low")
# Every bound is a loose guard against hangs; the waits poll and end as soon as they can.
EXIT_TIMEOUT = 40.0
DRAIN_TIMEOUT = 60.0


class Proc:
    """A worker subprocess and its log."""

    def __init__(self, popen: subprocess.Popen[bytes], log: Path) -> None:
        self.popen = popen
        self.log = log

    def tail(self) -> str:
        lines = self.log.read_text(errors="replace").splitlines()
        return f"--- {self.log.name} (exit {self.popen.poll()})\n" + "\n".join(lines[-25:])

    def running_at_stop(self) -> int:
        """Jobs the worker was running when it was told to stop (from its own log)."""
        found = re.search(r"stopping: waiting up to \S+s for (\d+) jobs", self.log.read_text())
        return int(found.group(1)) if found else 0


class Deploy:
    """Producers and workers of both generations on one namespace and effects table.

    Args:
        old_src: where the 0.1 package was extracted (its ``src``).
        env: the environment both generations share.
    """

    def __init__(self, old_src: Path, env: dict[str, str], logs: Path) -> None:
        self.old_src = old_src
        self.env = {
            "old": dict(env, PYTHONPATH=str(old_src), ROLLING_ROLE="old"),
            "new": dict(env, ROLLING_ROLE="new"),
        }
        self.logs = logs
        self.procs: list[Proc] = []

    def produce(self, role: str, first: int, count: int) -> None:
        """Enqueue jobs through the package of one generation, checking it was that one."""
        command = [sys.executable, "rolling_app.py", str(first), str(count)]
        done = subprocess.run(
            command, cwd=HERE, env=self.env[role], check=True, timeout=60, capture_output=True
        )
        package = Path(done.stdout.decode().strip())
        expected = self.old_src if role == "old" else Path(lockgate.__file__).parent
        assert package.is_relative_to(expected), (role, package)

    def start(self, role: str) -> Proc:
        log = self.logs / f"worker-{len(self.procs)}-{role}.log"
        command = [
            sys.executable, "-m", "lockgate", "--log-level", "INFO", "worker",
            "rolling_app:app", "--concurrency", "3", "--grace-period", "30",
        ]  # fmt: skip
        with log.open("wb") as out:
            popen = subprocess.Popen(
                command,
                cwd=HERE,
                env=self.env[role],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        proc = Proc(popen, log)
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc) -> None:
        """SIGTERM, then wait for the exit: a graceful stop, as a deploy tool does it.

        Once it serves: both generations log "serving queues" after installing their
        signal handlers; a SIGTERM before (a worker started last, still starting on a
        loaded machine) would kill it, not stop it.
        """
        wait_until_sync(
            lambda: " serving queues " in proc.log.read_text(errors="replace"),
            EXIT_TIMEOUT,
            f"{proc.log.name} to serve",
        )
        proc.popen.send_signal(signal.SIGTERM)
        exited = f"{proc.log.name} to exit after SIGTERM"
        wait_until_sync(lambda: proc.popen.poll() is not None, EXIT_TIMEOUT, exited)
        assert proc.popen.returncode == 0, proc.tail()

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.popen.poll() is None:
                proc.popen.kill()
                proc.popen.wait(timeout=10)

    def tails(self) -> str:
        return "\n".join(proc.tail() for proc in self.procs)


@pytest.fixture
def old_src(tmp_path: Path) -> Path:
    """The 0.1 package, extracted from the fixture tarball."""
    with tarfile.open(FIXTURE) as archive:
        archive.extractall(tmp_path / "v0_1", filter="data")
    return tmp_path / "v0_1" / "src"


@pytest.fixture
def make_deploy(
    old_src: Path, tmp_path: Path, redis_url: str, namespace: str, table: str
) -> Iterator[Callable[[str], Deploy]]:
    """Deploys on the test's namespace and table. At teardown, processes a failed test left
    running are killed and the workers' log tails printed."""
    made: list[Deploy] = []

    def make(backend: str) -> Deploy:
        env = dict(os.environ, LOCKGATE_REDIS_URL=redis_url, ROLLING_NAMESPACE=namespace,
                   ROLLING_TABLE=table, ROLLING_DSN=DSN, ROLLING_BACKEND=backend)  # fmt: skip
        env.pop("PYTHONPATH", None)  # each generation gets its own
        made.append(Deploy(old_src, env, tmp_path))
        return made[-1]

    yield make
    for deploy in made:
        if any(proc.popen.poll() != 0 for proc in deploy.procs):
            print(deploy.tails())
        deploy.kill_all()


@pytest.fixture
def pg() -> Iterator[psycopg.Connection]:
    with psycopg.connect(DSN, autocommit=True) as conn:
        yield conn


@pytest.fixture
def table(pg: psycopg.Connection) -> Iterator[str]:
    """The run's own effects table (plain INSERTs, no constraint), dropped afterwards."""
    name = f"rolling_{uuid.uuid4().hex[:12]}"
    pg.execute(
        sql.SQL("CREATE TABLE {} (job_id text, n int, task text, pid int, role text, "
                "attempt int)").format(sql.Identifier(name))
    )  # fmt: skip
    yield name
    pg.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(name)))


def effects(conn: psycopg.Connection, table: str) -> int:
    query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
    row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def producer_of(n: int) -> str:
    """Which generation enqueued job n (see the waves in the test)."""
    return "old" if n < 150 or 300 <= n < 350 else "new"


def left_in_redis(
    rclient: redis.Redis, keys: Keys, backend: str, jobs: range = range(JOBS)
) -> dict[str, int]:
    """What is still queued, delayed, pending or marked, per kind (zeros left out)."""
    counts: dict[str, int] = {}
    if backend == "streams":
        for level in LEVELS:
            stream = keys.stream("default", level)
            counts[f"stream {level}"] = rclient.xlen(stream)
            counts[f"delayed {level}"] = rclient.zcard(keys.delayed("default", level))
            if rclient.exists(stream):
                pending = sum(g["pending"] for g in rclient.xinfo_groups(stream))
                counts[f"pending {level}"] = pending
    else:
        q = keys.sorted_keys("default")
        for name, key in (("waiting", q.waiting), ("inflight", q.inflight), ("delayed", q.delayed)):
            counts[name] = rclient.zcard(key)
        for name, key in (("payloads", q.payloads), ("owners", q.owners)):
            counts[name] = rclient.hlen(key)
    counts["markers"] = sum(not job_ended(rclient, keys, f"job-{n}") for n in jobs)
    return {name: n for name, n in counts.items() if n}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["streams", "sorted"])
def test_a_rolling_deploy_from_0_1_loses_and_doubles_nothing(
    make_deploy: Callable[[str], Deploy],
    namespace: str,
    rclient: redis.Redis,
    pg: psycopg.Connection,
    table: str,
    backend: str,
) -> None:
    deploy = make_deploy(backend)
    keys = Keys(namespace)
    started = time.monotonic()
    deploy.produce("old", 0, 150)
    deploy.produce("new", 150, 150)
    old = [deploy.start("old"), deploy.start("old")]
    deploy.start("new")
    deploy.start("new")
    # The rolling deploy: each 0.1 worker in turn, while jobs run and more come in.
    for step, (threshold, producer, first) in enumerate(STEPS):
        wait_until_sync(
            lambda t=threshold: effects(pg, table) >= t,
            DRAIN_TIMEOUT,
            f"{threshold} effects before step {step + 1}",
        )
        deploy.stop(old[step])
        deploy.start("new")
        deploy.produce(producer, first, 50)
    wait_until_sync(
        lambda: effects(pg, table) >= JOBS and not left_in_redis(rclient, keys, backend),
        DRAIN_TIMEOUT,
        "every job to run and nothing to be left",
    )
    for proc in deploy.procs:
        if proc.popen.poll() is None:
            deploy.stop(proc)
    elapsed = time.monotonic() - started

    rows = pg.execute(
        sql.SQL("SELECT job_id, n, task, role, attempt FROM {}").format(sql.Identifier(table))
    ).fetchall()
    per_job = Counter(row[0] for row in rows)
    # (producer, worker) generations: who enqueued the jobs each generation of workers ran.
    crossed = Counter((producer_of(row[1]), row[3]) for row in rows)
    by_task = Counter(row[2] for row in rows)
    retried = sum(row[4] > 1 for row in rows)
    in_flight = [proc.running_at_stop() for proc in old]
    print(f"\nrolling deploy ({backend}): {len(rows)} effects for {JOBS} jobs in {elapsed:.1f}s; "
          f"(producer, worker) {dict(sorted(crossed.items()))}; per task {dict(by_task)}; "
          f"{retried} ran after a retry; 0.1 workers running {in_flight} jobs when stopped; "
          f"left in Redis {left_in_redis(rclient, keys, backend)}, "
          f"dead letters {rclient.xlen(keys.dead())}")  # fmt: skip
    doubles = {job_id: n for job_id, n in per_job.items() if n > 1}
    lost = sorted({f"job-{n}" for n in range(JOBS)} - set(per_job))
    assert (doubles, lost) == ({}, []), f"worker logs in {deploy.logs}"
    assert len(rows) == JOBS
    assert retried == JOBS // 10
    assert rclient.xlen(keys.dead()) == 0
    assert left_in_redis(rclient, keys, backend) == {}
    generations = ("old", "new")
    assert all(crossed[p, w] > 0 for p in generations for w in generations), crossed
    assert sum(in_flight) > 0, "no 0.1 worker was stopped mid-job"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("first", ["new", "old"])
def test_a_job_done_by_one_generation_is_not_run_again_by_the_other(
    make_deploy: Callable[[str], Deploy],
    namespace: str,
    rclient: redis.Redis,
    pg: psycopg.Connection,
    table: str,
    first: str,
) -> None:
    """An ``idempotent=True`` job enqueued again under its id after it ran (a producer's
    retry, a dead-letter replay) is acknowledged without running, whichever generation ran
    it first and whichever meets it again, as it is within one generation."""
    deploy = make_deploy("streams")
    keys = Keys(namespace)
    for role in (first, "old" if first == "new" else "new"):
        deploy.produce(role, 1, 1)  # job-1, of the idempotent task `once`, each time
        worker = deploy.start(role)
        wait_until_sync(
            lambda: (
                effects(pg, table) >= 1 and not left_in_redis(rclient, keys, "streams", range(1, 2))
            ),
            DRAIN_TIMEOUT,
            f"job-1 settled by the {role} worker",
        )
        deploy.stop(worker)
    assert effects(pg, table) == 1
