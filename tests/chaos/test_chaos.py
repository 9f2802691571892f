"""Chaos: workers SIGKILLed at random, poison jobs, flaky jobs and a Redis crash, at once.

2,000 jobs over three levels; 3 worker processes, a random one SIGKILLed every ~0.5 s and
replaced; one SIGKILL and restart of a private Redis (AOF, fsync always) in the middle;
2% poison jobs that kill their worker; 10% that raise RetryableError once. Every side
effect goes through the PostgreSQL claim. At the end each non-poison job's effect exists
exactly once, every poison job is dead-lettered (and nothing else), and nothing is left
pending, waiting or delayed.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest
import redis

from lockgate import App
from lockgate.embedded import EmbeddedServer
from lockgate.postgres import init_schema

DSN = os.environ.get("LOCKGATE_PG_DSN", "host=127.0.0.1 dbname=test user=postgres")
JOBS = 2_000
POISON_EVERY = 50  # 2%
FLAKY_EVERY = 10  # 10%
WORKERS = 3
KILL_EVERY = 0.5
DEADLINE = 150.0
HERE = Path(__file__).parent


def spawn(env: dict[str, str], logs: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "lockgate", "--log-level", "WARNING", "worker", "chaos_app:app",
        "--concurrency", "4", "--visibility-timeout", "1", "--max-deliveries", "3",
        "--grace-period", "5",
    ]  # fmt: skip
    with (logs / f"worker-{time.monotonic_ns()}.log").open("wb") as log:
        return subprocess.Popen(command, cwd=HERE, env=env, stdout=log, stderr=log)


def effects(run: str) -> tuple[int, int]:
    """(distinct jobs with an effect, effects recorded) for this run."""
    with psycopg.connect(DSN) as conn:
        row = conn.execute(
            "SELECT count(DISTINCT n), count(*) FROM chaos_effects WHERE run = %s", (run,)
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def dead_letters(client: redis.Redis, app: App) -> int:
    try:
        return int(client.xlen(app.keys.dead()))
    except redis.ConnectionError:
        return -1  # the server is restarting


@pytest.mark.timeout(DEADLINE + 60)
def test_chaos_nothing_lost_nothing_doubled(tmp_path: Path) -> None:
    init_schema(DSN)
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS chaos_effects (run text, n int)")
    run, namespace = uuid.uuid4().hex, f"chaos-{uuid.uuid4().hex[:8]}"
    rng = random.Random(run)
    poison_ids = {n for n in range(JOBS) if n % POISON_EVERY == 0}
    workers: list[subprocess.Popen[bytes]] = []
    with EmbeddedServer(appendonly=True, fsync="always") as server:
        app = App(redis_url=server.url, namespace=namespace)

        @app.task(priority="normal")
        def effect(n: int, flaky: bool = False) -> None: ...

        @app.task(priority="normal")
        def poison(n: int) -> None: ...

        levels = app.levels.names
        app.enqueue_many(
            [
                poison.message(n, priority=levels[n % 3], job_id=f"job-{n}")
                if n in poison_ids
                else effect.message(
                    n, flaky=n % FLAKY_EVERY == 1, priority=levels[n % 3], job_id=f"job-{n}"
                )
                for n in range(JOBS)
            ]
        )
        env = dict(os.environ, LOCKGATE_REDIS_URL=server.url, CHAOS_NAMESPACE=namespace,
                   CHAOS_RUN=run, CHAOS_DSN=DSN)  # fmt: skip
        client = redis.Redis.from_url(server.url, socket_timeout=2)
        kills = restarts = replaced = 0
        try:
            workers = [spawn(env, tmp_path) for _ in range(WORKERS)]
            started = time.monotonic()
            next_kill = started + KILL_EVERY
            while time.monotonic() - started < DEADLINE:
                for i, worker in enumerate(workers):
                    if worker.poll() is not None:  # a poison job killed it
                        workers[i] = spawn(env, tmp_path)
                        replaced += 1
                if time.monotonic() >= next_kill:
                    victim = rng.randrange(len(workers))
                    workers[victim].send_signal(signal.SIGKILL)
                    workers[victim].wait()
                    workers[victim] = spawn(env, tmp_path)
                    kills += 1
                    next_kill = time.monotonic() + KILL_EVERY
                distinct, _ = effects(run)
                if not restarts and distinct >= JOBS * 0.4:
                    server.kill()
                    server.start()
                    restarts += 1
                if distinct == JOBS - len(poison_ids) and dead_letters(client, app) == len(
                    poison_ids
                ):
                    break
                time.sleep(0.05)
            elapsed = time.monotonic() - started
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            for worker in workers:
                try:
                    worker.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    worker.kill()
                    worker.wait()

        distinct, recorded = effects(run)
        dead = client.xrange(app.keys.dead())
        dead_ids = {fields[b"job_id"].decode() for _, fields in dead}
        streams = [app.keys.stream("default", level) for level in levels]
        pending = sum(
            client.xpending(stream, "lockgate")["pending"]
            for stream in streams
            if client.exists(stream)
        )
        waiting = sum(client.xlen(stream) for stream in streams) - pending
        delayed = sum(client.zcard(app.keys.delayed("default", level)) for level in levels)
        client.close()
        app.close()

    lost = JOBS - len(poison_ids) - distinct
    duplicates = recorded - distinct
    print(
        f"\nchaos: {JOBS} jobs in {elapsed:.1f}s, {kills} random kills, {replaced} workers "
        f"killed by poison, {restarts} Redis restart; lost {lost}, duplicates {duplicates}, "
        f"dead-lettered {len(dead_ids)} (poison {len(poison_ids)}), pending {pending}, "
        f"waiting {waiting}, delayed {delayed}"
    )
    assert restarts == 1
    assert lost == 0
    assert duplicates == 0
    assert dead_ids == {f"job-{n}" for n in poison_ids}
    assert (pending, waiting, delayed) == (0, 0, 0)
