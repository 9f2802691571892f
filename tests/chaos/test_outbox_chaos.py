"""The durable outbox under kills and a Redis outage: producers SIGKILLed right after
each commit, and Redis stopped while commits go on. Every committed job runs exactly once
(0 lost, 0 doubled); a job whose transaction never committed never runs.

The task counts its runs in a table without constraint and records its effect under a
unique constraint (see outbox_app.py); the worker is a real ``lockgate worker
--outbox DSN`` process. ``LOCKGATE_CHAOS_OUTBOX_KILLS`` sets the number of producers killed
after their commit (200), ``LOCKGATE_CHAOS_OUTBOX_OUTAGE`` how many seconds Redis stays
down (3; the issue's figure was taken with 60).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from psycopg import sql

from conftest import delete_namespace, wait_until_sync
from lockgate import App
from lockgate.integrations.embedded import EmbeddedServer
from lockgate.integrations.outbox import COUNT_SQL, Outbox
from lockgate.integrations.postgres import init_schema

pytestmark = pytest.mark.chaos

HERE = Path(__file__).parent
DSN = os.environ.get("LOCKGATE_PG_DSN", "host=127.0.0.1 dbname=test user=postgres")
KILLS = int(os.environ.get("LOCKGATE_CHAOS_OUTBOX_KILLS", "200"))
OUTAGE = float(os.environ.get("LOCKGATE_CHAOS_OUTBOX_OUTAGE", "3"))
UNCOMMITTED_EVERY = 10  # every 10th producer is killed before its commit


def execute(query: Any, params: Any = None) -> list[Any]:
    with psycopg.connect(DSN, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description is not None else []


class Proc:
    """A child process and its log file."""

    def __init__(self, popen: subprocess.Popen[bytes], log: Path) -> None:
        self.popen, self.log = popen, log

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def ended(self, timeout: float) -> int:
        """Wait for it to end; its exit code (its log in the failure message)."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"still running after {timeout}s:\n{self.text()[-4000:]}"
            ) from None


class Run:
    """One test's namespace, effects tables and processes."""

    def __init__(self, tmp_path: Path, redis_url: str) -> None:
        self.namespace = uuid.uuid4().hex
        self.effects = f"outbox_chaos_{self.namespace[:12]}"
        self.tables = (sql.Identifier(self.effects), sql.Identifier(f"{self.effects}_runs"))
        self.tmp_path, self.redis_url = tmp_path, redis_url
        self.procs: list[Proc] = []
        self.outbox = Outbox(DSN)  # the default table: rows are the namespace's own

    def start(self, *args: str, **env: str) -> Proc:
        log_file = self.tmp_path / f"proc-{len(self.procs)}.log"
        environ = dict(
            os.environ, LOCKGATE_REDIS_URL=self.redis_url, LOCKGATE_TEST_NAMESPACE=self.namespace,
            OUTBOX_TEST_EFFECTS=self.effects, **env,
        )  # fmt: skip
        with log_file.open("wb") as out:
            popen = subprocess.Popen([sys.executable, *args], cwd=HERE, env=environ, stdout=out,
                                     stderr=subprocess.STDOUT)  # fmt: skip
        self.procs.append(Proc(popen, log_file))
        return self.procs[-1]

    def worker(self) -> Proc:
        """``lockgate worker --outbox DSN`` (the App itself has no outbox)."""
        return self.start(
            "-m", "lockgate", "--log-level", "INFO", "worker", "outbox_app:app",
            "--outbox", DSN, "--concurrency", "4", "--grace-period", "5",
            OUTBOX_TEST_APP_OUTBOX="0",
        )  # fmt: skip

    def produce(self, first: int, commits: int) -> tuple[set[int], set[int]]:
        """Run the producer to its end: the jobs committed, and those killed before."""
        producer = self.start("outbox_app.py", str(first), str(commits), str(UNCOMMITTED_EVERY))
        assert producer.ended(timeout=60 + commits) == 0, producer.text()
        lines = [line.split() for line in producer.text().splitlines()]
        committed = {int(n) for word, n in lines if word == "committed"}
        uncommitted = {int(n) for word, n in lines if word == "uncommitted"}
        assert len(committed) == commits
        return committed, uncommitted

    def waiting(self) -> int:
        """Rows of the namespace in the outbox."""
        return int(execute(self.outbox.sql(COUNT_SQL), (self.namespace,))[0][0])

    def runs(self) -> dict[int, int]:
        """Runs per job."""
        query = sql.SQL("SELECT n, count(*) FROM {} GROUP BY n")
        return dict(execute(query.format(sql.Identifier(f"{self.effects}_runs"))))

    def effects_done(self) -> int:
        query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(self.effects))
        return int(execute(query)[0][0])

    def stop(self, worker: Proc) -> None:
        """SIGTERM: a graceful stop, exit 0."""
        worker.popen.send_signal(signal.SIGTERM)
        assert worker.ended(timeout=60) == 0, worker.text()[-4000:]

    def queued(self) -> int:
        """Jobs still in Redis (streams backend, default queue)."""
        app = App(redis_url=self.redis_url, namespace=self.namespace)
        try:
            client = app.client()
            return sum(client.xlen(app.keys.stream("default", lv)) for lv in app.levels.names)
        finally:
            app.close()

    def check(self, committed: set[int], uncommitted: set[int]) -> tuple[int, int]:
        """Every committed job ran exactly once, no other job ran: (lost, doubled)."""
        runs = self.runs()
        lost = len(committed - set(runs))
        doubled = sum(count - 1 for count in runs.values() if count > 1)
        assert not set(runs) & uncommitted, "a job whose transaction never committed ran"
        assert set(runs) <= committed
        assert self.queued() == 0, "a job is still queued: a second one of a row"
        assert self.waiting() == 0
        return lost, doubled


@pytest.fixture
def make_run(tmp_path: Path) -> Iterator[Callable[[str], Run]]:
    """Runs on a Redis URL, each a namespace with its effects tables (the outbox table is
    the default, shared one); their processes, tables, rows and keys go at the end."""
    init_schema(DSN)  # the default tables: safe to run again
    made: list[Run] = []

    def factory(redis_url: str) -> Run:
        one = Run(tmp_path, redis_url)
        made.append(one)
        execute(sql.SQL("CREATE TABLE {} (n int PRIMARY KEY)").format(one.tables[0]))
        execute(sql.SQL("CREATE TABLE {} (n int NOT NULL)").format(one.tables[1]))
        return one

    yield factory
    for one in made:
        for proc in one.procs:
            if proc.popen.poll() is None:
                proc.popen.kill()
            proc.popen.wait(timeout=30)
        execute(sql.SQL("DROP TABLE IF EXISTS {}, {}").format(*one.tables))
        execute(one.outbox.sql("DELETE FROM {} WHERE namespace = %s"), (one.namespace,))
        with contextlib.suppress(redis.ConnectionError):  # a private server, gone already
            delete_namespace(one.redis_url, one.namespace)


def test_producers_killed_right_after_each_commit_lose_no_job_and_double_none(
    make_run: Callable[[str], Run], redis_url: str
) -> None:
    run = make_run(redis_url)
    worker = run.worker()
    committed, uncommitted = run.produce(0, KILLS)
    wait_until_sync(
        lambda: run.effects_done() == KILLS and run.waiting() == 0,
        timeout=120,
        message=f"{KILLS} effects and an empty outbox",
    )
    run.stop(worker)
    lost, doubled = run.check(committed, uncommitted)
    print(f"outbox chaos: {KILLS} producers SIGKILLed right after their commit "
          f"({len(uncommitted)} before it): {KILLS} jobs, {lost} lost, "
          f"{doubled} doubled")  # fmt: skip
    assert (lost, doubled) == (0, 0)
    assert sum(run.runs().values()) == KILLS


def test_jobs_committed_while_redis_is_down_wait_in_the_outbox_and_run_once_after(
    make_run: Callable[[str], Run],
) -> None:
    with EmbeddedServer(appendonly=True, fsync="always") as server:
        run = make_run(server.url)
        worker = run.worker()
        before, skipped = run.produce(0, 10)
        wait_until_sync(lambda: run.effects_done() == 10, message="the jobs before the outage")
        server.stop()
        down_at = time.monotonic()
        during, more = run.produce(1000, 20)
        assert run.waiting() == 20  # Redis is down: they wait in PostgreSQL
        time.sleep(max(0.0, OUTAGE - (time.monotonic() - down_at)))  # the fault's length
        assert run.waiting() == 20
        server.start()
        wait_until_sync(
            lambda: run.effects_done() == 30 and run.waiting() == 0,
            timeout=120,
            message="the jobs committed during the outage ran",
        )
        down_for = time.monotonic() - down_at
        run.stop(worker)
        lost, doubled = run.check(before | during, skipped | more)
        print(f"outbox chaos: Redis down {down_for:.1f}s, 20 jobs committed meanwhile: "
              f"{lost} lost, {doubled} doubled")  # fmt: skip
        assert (lost, doubled) == (0, 0)
        logged = worker.text()
        assert logged.count("outbox relay: Redis failed") == 1, logged[-4000:]
        assert logged.count("outbox relay: Redis works again") == 1, logged[-4000:]
