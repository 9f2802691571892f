"""Chaos under a workflow: a chord of 2,000 members and one callback, while worker
processes are SIGKILLed every few seconds and the private Redis is killed and restarted.

``group(member x 2000).then(callback)``, queued by ``enqueue_flow``; 4 worker processes
(``flow_app.py``) run it while a random one is SIGKILLed every 1.5-3 s and replaced, and
the private Redis (AOF, fsync always) is SIGKILLed once when 30-60% of the members made
their effect, down for 0.8 s (shorter than the visibility timeout: no live worker's job
may run twice), then restarted from its AOF. Random kills pause from ``CALM`` effects
before the restart until ``QUIET`` seconds after it, so warm workers meet the crash and a
rerun it caused cannot hide behind a later kill of its worker.

Each member notes its run's start, then writes its effect as a PostgreSQL row keyed by
its job id (a primary key: a second effect conflicts) and records, in the same
transaction, every attempt that committed (runs that started and never committed are the
ones a kill cut short); the callback records each of its runs with the member effects
present then and what ``parent_results()`` gave it. The flow's barrier lives in the
owner-checked settle script: the callback must run once, after all 2,000 members, with
their 2,000 results in declaration order.

At the end: every member's effect exactly once; a member that committed more than once
did so only after a SIGKILL of the worker that committed it before (killed between its
commit and its settle); the callback ran exactly once (strictly: a SIGKILL landing in the
millisecond between its commit and its settle would rerun it, as at-least-once allows,
and the failure then names its worker's kill), seeing 2,000 effects and 2,000 parents'
results; the flow reads ``done`` (else it is a hung flow) and its result is the
callback's; nothing is left in the queues (streams, pending entries, delayed sets, sorted
sets, dead letters, the flows' releasing set, job markers).

No deadline drives the run: it ends when the flow is done and its callback's run is
recorded, and fails when for ``STALL`` seconds no member effect, callback run or flow
progress appeared. One seed drives the random choices (members' work times, when Redis is
killed, which worker is killed and when); it is printed (``flow chaos seed=N``) and
``LOCKGATE_CHAOS_SEED=N`` replays the plan (not every interleaving). The closing line of
each run (visible with ``-s``) gives its figures.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import psycopg
import pytest
from chaos_servers import OUTAGE, SEED_ENV, Server, chaos_seed, serving
from psycopg import sql

from lockgate import App, BrokerError, FlowResult, JobFailed, group
from lockgate.backend.keys import GROUP

pytestmark = pytest.mark.chaos

DSN = os.environ.get("LOCKGATE_PG_DSN", "host=127.0.0.1 dbname=test user=postgres")
LOG_LEVEL = os.environ.get("LOCKGATE_CHAOS_LOG_LEVEL", "WARNING")  # of the workers' logs
MEMBERS = 2_000
WORKERS = 4
CONCURRENCY = 4
VISIBILITY = 1.0
DOWN_FOR = 0.8 * VISIBILITY  # Redis stays down this long (see test_chaos.py)
KILL_EVERY = (1.5, 3.0)  # seconds between two random SIGKILLs
RESTART_AT = (0.3, 0.6)  # share of the member effects made when Redis is killed
WORK = (0.05, 0.25)  # seconds a member works before its effect
CALM = 100  # no random kill from this many effects before the Redis restart ...
QUIET = 3 * VISIBILITY  # ... until this many seconds after it
STALL = 30.0  # fail when nothing progressed for this long
PACE = 0.05  # the supervisor's loop
SHOWN = 20  # ids listed per kind of failure
HERE = Path(__file__).parent
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS flow_chaos_effects (run text NOT NULL, job_id text NOT NULL,"
    " PRIMARY KEY (run, job_id))",
    "CREATE TABLE IF NOT EXISTS flow_chaos_attempts (id bigserial PRIMARY KEY,"
    " run text NOT NULL, job_id text NOT NULL, pid int NOT NULL, worker int NOT NULL,"
    " attempt int NOT NULL, started double precision NOT NULL, made boolean NOT NULL)",
    "CREATE INDEX IF NOT EXISTS flow_chaos_attempts_run ON flow_chaos_attempts (run)",
    "CREATE TABLE IF NOT EXISTS flow_chaos_starts (run text NOT NULL, job_id text NOT NULL,"
    " pid int NOT NULL, worker int NOT NULL, started double precision NOT NULL)",
    "CREATE INDEX IF NOT EXISTS flow_chaos_starts_run ON flow_chaos_starts (run)",
    "CREATE TABLE IF NOT EXISTS flow_chaos_callbacks (id bigserial PRIMARY KEY,"
    " run text NOT NULL, job_id text NOT NULL, pid int NOT NULL, worker int NOT NULL,"
    " attempt int NOT NULL, started double precision NOT NULL, seen int NOT NULL,"
    " parents int NOT NULL, in_order boolean NOT NULL)",
)
TABLES = ["flow_chaos_effects", "flow_chaos_attempts", "flow_chaos_starts"]
TABLES += ["flow_chaos_callbacks"]


class Fleet:
    """The worker processes: one SIGKILLed at random every ``KILL_EVERY`` seconds and
    replaced; one that died on its own is replaced too (and noted).

    ``killed`` maps the pid of every worker SIGKILLed to a time (``time.time``) when it
    was surely dead.
    """

    def __init__(self, env: dict[str, str], logs: Path, rng: random.Random) -> None:
        self.env, self.logs, self.rng = env, logs, rng
        self.procs: list[subprocess.Popen[bytes]] = []
        self.killed: dict[int, float] = {}
        self.exits: list[str] = []  # deaths by anything but our SIGKILL
        self.next_kill = 0.0  # monotonic
        self.held = 0.0  # no random kill before this time (monotonic)

    def spawn(self) -> subprocess.Popen[bytes]:
        command = [
            sys.executable, "-m", "lockgate", "--log-level", LOG_LEVEL, "worker", "flow_app:app",
            "--concurrency", str(CONCURRENCY), "--visibility-timeout", str(VISIBILITY),
            "--max-deliveries", "10", "--grace-period", "5",
        ]  # fmt: skip
        path = self.logs / f"worker-{time.monotonic_ns()}.log"
        with path.open("wb") as log:
            proc = subprocess.Popen(command, cwd=HERE, env=self.env, stdout=log, stderr=log)
        path.rename(self.logs / f"worker-{proc.pid}.log")  # the pids the report names
        return proc

    def start(self) -> None:
        self.procs = [self.spawn() for _ in range(WORKERS)]
        self.next_kill = time.monotonic() + self.rng.uniform(*KILL_EVERY)

    def hold_kills(self, seconds: float) -> None:
        self.held = max(self.held, time.monotonic() + seconds)

    def tend(self) -> None:
        """Replace the workers that died on their own; SIGKILL one when its time came."""
        for i, proc in enumerate(self.procs):
            code = proc.poll()
            if code is not None:
                self.exits.append(f"pid {proc.pid} exit {code}")
                self.procs[i] = self.spawn()
        now = time.monotonic()
        if now < self.next_kill or now < self.held:
            return
        victim = self.rng.randrange(len(self.procs))
        proc = self.procs[victim]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.killed[proc.pid] = time.time()
        self.procs[victim] = self.spawn()
        self.next_kill = time.monotonic() + self.rng.uniform(*KILL_EVERY)

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                self.exits.append(f"pid {proc.pid} ignored SIGTERM for 20 s")

    def errors(self) -> list[str]:
        """The lines of the workers' logs (every one of the run) that report an error."""
        found = []
        for path in sorted(self.logs.glob("worker-*.log")):
            for line in path.read_text(errors="replace").splitlines():
                if "ERROR" in line or "Traceback" in line:
                    found.append(f"{path.name}: {line}")
        return found


@dataclass
class Run:
    """What the supervisor saw."""

    elapsed: float = 0.0
    restarts: int = 0
    downtime: float = 0.0
    restart_time: float = 0.0  # time.time() when Redis was killed
    restarted_at: int = 0  # member effects made then
    stalled: bool = False
    flow_state: str = "unknown"  # the last state read (cheaply) while it ran
    trace: list[str] = field(default_factory=list)  # "seconds:effects/done" every 5 s


def progress(conn: psycopg.Connection[Any], run: str) -> tuple[int, int]:
    """(member effects made, callback runs recorded)."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM flow_chaos_effects WHERE run = %(run)s),"
        " (SELECT count(*) FROM flow_chaos_callbacks WHERE run = %(run)s)",
        {"run": run},
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def supervise(
    fleet: Fleet, server: Server, app: App, conn: psycopg.Connection[Any], run_id: str,
    flow_id: str, restart_at: int,
) -> Run:  # fmt: skip
    """Kill and replace workers, crash Redis once, until the flow is done and its
    callback recorded, or nothing moved for ``STALL`` seconds."""
    run = Run()
    flows = app.store.flows
    started = moved = time.monotonic()
    last: tuple[int, int, int] = (-1, -1, -1)
    fleet.start()
    while True:
        fleet.tend()
        effects, callbacks = progress(conn, run_id)
        try:
            summary = flows.summary(flow_id)
        except (BrokerError, *OUTAGE):
            summary = None  # the server is restarting: keep the last counts
        done = summary.done if summary is not None else last[2]
        if summary is not None:
            ended = summary.total > 0 and summary.done >= summary.total
            run.flow_state = "done" if ended else "failed" if summary.dead else "running"
        if (effects, callbacks, done) != last:
            last, moved = (effects, callbacks, done), time.monotonic()
        since = time.monotonic() - started
        if since >= 5.0 * len(run.trace):
            run.trace.append(f"{since:.0f}s:{effects}/{done}")
        if callbacks and run.flow_state == "done":
            break
        if not run.restarts and effects >= restart_at - CALM:
            fleet.hold_kills(QUIET)  # busy workers, not fresh ones, meet the crash
        if not run.restarts and effects >= restart_at:
            down, run.restart_time = time.monotonic(), time.time()
            server.crash(app, DOWN_FOR)
            run.downtime = time.monotonic() - down
            run.restarts, run.restarted_at = 1, effects
            fleet.hold_kills(QUIET)
            moved = time.monotonic()
        if time.monotonic() - moved > STALL or run.flow_state == "failed":
            run.stalled = run.flow_state != "failed"
            break
        time.sleep(PACE)
    run.elapsed = time.monotonic() - started
    return run


@dataclass(frozen=True)
class Attempt:
    """A run that committed: of which job, in which process (and its worker), when."""

    job_id: str
    pid: int
    worker: int
    started: float


def unexplained_reruns(
    attempts: list[Attempt], killed: dict[int, float], t0: float
) -> tuple[int, list[str]]:
    """Runs of a job that committed after another run of it had: (how many a SIGKILL
    explains, the others described). A rerun is explained when the worker that committed
    the run before it (or the forked child that ran it) was SIGKILLed before the rerun
    started: killed between its commit and its settle."""
    runs: dict[str, list[Attempt]] = defaultdict(list)
    for attempt in sorted(attempts, key=lambda a: a.started):
        runs[attempt.job_id].append(attempt)
    explained, others = 0, []
    for job_id, made in sorted(runs.items()):
        for before, again in itertools.pairwise(made):
            deaths = [killed[pid] for pid in (before.pid, before.worker) if pid in killed]
            if deaths and min(deaths) <= again.started:
                explained += 1
                continue
            death = f"killed at {min(deaths) - t0:.2f}s" if deaths else "never killed"
            others.append(
                f"{job_id}: worker {before.worker} (pid {before.pid}) committed a run started "
                f"at {before.started - t0:.2f}s ({death}), worker {again.worker} (pid "
                f"{again.pid}) another started at {again.started - t0:.2f}s"
            )
    return explained, others


def leftovers(client: Any, app: App, job_ids: list[str]) -> dict[str, int]:
    """What is left in Redis of the run's jobs, by place (empty: nothing)."""
    keys = app.keys
    levels = app.levels.names
    with client.pipeline(transaction=False) as pipe:
        names: list[str] = []
        if app.backend == "sorted":
            queue = keys.sorted_keys("default")
            for name, key in [("waiting", queue.waiting), ("inflight", queue.inflight),
                              ("delayed", queue.delayed)]:  # fmt: skip
                names.append(name)
                pipe.zcard(key)
            for name, key in [("payloads", queue.payloads), ("deliveries", queue.deliveries),
                              ("owners", queue.owners)]:  # fmt: skip
                names.append(name)
                pipe.hlen(key)
        else:
            for level in levels:
                names += [f"stream {level}", f"delayed {level}"]
                pipe.xlen(keys.stream("default", level))
                pipe.zcard(keys.delayed("default", level))
        names += ["dead letters", "flows releasing"]
        pipe.xlen(keys.dead())
        pipe.zcard(keys.flows_releasing())
        counts = dict(zip(names, pipe.execute(), strict=True))
        for job_id in job_ids:
            pipe.exists(keys.job(job_id))
        counts["job markers"] = sum(pipe.execute())
    if app.backend != "sorted":
        for level in levels:
            stream = keys.stream("default", level)
            if client.exists(stream):
                counts[f"pending {level}"] = client.xpending(stream, GROUP)["pending"]
    return {name: int(count) for name, count in counts.items() if count}


def shown(ids: list[str]) -> str:
    listed = sorted(ids, key=lambda name: (len(name), name))
    more = f" (+{len(listed) - SHOWN} more)" if len(listed) > SHOWN else ""
    return f"[{', '.join(listed[:SHOWN])}]{more}"


def enqueue(app: App, flow_id: str, rng: random.Random) -> FlowResult:
    """The chord, declared by the same task names as flow_app's."""

    @app.task(retries=3, backoff=0.05)
    def member(n: int, work: float) -> int:
        return n  # the workers run flow_app's

    @app.task(retries=3, backoff=0.05)
    def callback(members: int) -> int:
        return members

    works = [round(rng.uniform(*WORK), 3) for _ in range(MEMBERS)]
    chord = group(*(member.message(n, works[n]) for n in range(MEMBERS)))
    return app.enqueue_flow(chord.then(callback.message(MEMBERS)), flow_id=flow_id)


@pytest.mark.parametrize("backend", ["streams", "sorted"])
@pytest.mark.timeout(300)  # a backstop: lack of progress fails the test long before
def test_chord_under_worker_kills_and_a_redis_restart(
    tmp_path: Path, backend: Literal["streams", "sorted"]
) -> None:
    seed = chaos_seed()
    run_id, namespace = uuid.uuid4().hex, f"flowchaos-{uuid.uuid4().hex[:8]}"
    flow_id = f"chord-{run_id[:8]}"
    print(f"\nflow chaos seed={seed} ({SEED_ENV}={seed} replays it; rows of run {run_id})",
          flush=True)  # fmt: skip
    rng = random.Random(seed)
    restart_at = round(MEMBERS * rng.uniform(*RESTART_AT))
    with psycopg.connect(DSN, autocommit=True) as conn:
        for statement in SCHEMA:
            conn.execute(statement)
    t0 = time.time()
    with serving("single") as server, psycopg.connect(DSN, autocommit=True) as conn:
        app = App(redis_url=server.url, namespace=namespace, backend=backend)
        result = enqueue(app, flow_id, rng)
        assert result.created and len(result.job_ids) == MEMBERS + 1
        members, callback_id = result.job_ids[:-1], result.job_ids[-1]
        env = dict(os.environ, LOCKGATE_REDIS_URL=server.url, CHAOS_NAMESPACE=namespace,
                   CHAOS_RUN=run_id, CHAOS_DSN=DSN, CHAOS_BACKEND=backend)  # fmt: skip
        fleet = Fleet(env, tmp_path, rng)
        try:
            run = supervise(fleet, server, app, conn, run_id, flow_id, restart_at)
        finally:
            fleet.stop()
        info = app.flow(flow_id)
        try:
            outcome: object = result.result(timeout=5)
        except (JobFailed, TimeoutError) as e:
            outcome = e
        client = server.client()
        left = leftovers(client, app, result.job_ids)
        client.close()
        app.close()
        effects: dict[str, int] = dict(
            conn.execute(
                "SELECT job_id, count(*) FROM flow_chaos_effects WHERE run = %s GROUP BY job_id",
                (run_id,),
            ).fetchall()
        )
        attempts = [
            Attempt(*row)
            for row in conn.execute(
                "SELECT job_id, pid, worker, started FROM flow_chaos_attempts WHERE run = %s",
                (run_id,),
            ).fetchall()
        ]
        cut = conn.execute(  # member runs that started and never committed
            "SELECT count(*), count(*) FILTER (WHERE s.worker = ANY(%s) OR s.pid = ANY(%s))"
            " FROM flow_chaos_starts s WHERE s.run = %s AND NOT EXISTS (SELECT 1 FROM"
            " flow_chaos_attempts a WHERE a.run = s.run AND a.job_id = s.job_id AND a.pid = s.pid"
            " AND a.started = s.started)",
            (list(fleet.killed), list(fleet.killed), run_id),
        ).fetchone()
        assert cut is not None
        callbacks = conn.execute(
            "SELECT job_id, pid, worker, started, seen, parents, in_order"
            " FROM flow_chaos_callbacks WHERE run = %s ORDER BY started, id",
            (run_id,),
        ).fetchall()

    lost = [job_id for job_id in members if job_id not in effects]
    doubled = [job_id for job_id, count in effects.items() if count != 1]
    strays = sorted(set(effects) - set(members))
    explained, unexplained = unexplained_reruns(attempts, fleet.killed, t0)
    reruns = len(attempts) - len(effects)
    hung = int(info.state != "done")
    jobs_by_state: dict[str, int] = defaultdict(int)
    for job in info.jobs:
        jobs_by_state[job.state] += 1
    callback_runs = [
        f"pid {pid} (worker {worker}) at {started - t0:.2f}s saw {seen} effects, "
        f"{parents} parents' results{'' if in_order else ' (not in declaration order)'}"
        + (f", its worker killed at {fleet.killed[worker] - t0:.2f}s" if worker in fleet.killed
           else "")
        for _, pid, worker, started, seen, parents, in_order in callbacks
    ]  # fmt: skip
    print(
        f"flow chaos [{backend}] seed={seed}: members {MEMBERS}, effects {len(effects)} "
        f"(lost {len(lost)}, doubled {len(doubled)}), member reruns {reruns} ({explained} "
        f"after a SIGKILL, {len(unexplained)} unexplained), member runs cut short {cut[0]} "
        f"({cut[1]} in a worker SIGKILLed), callback runs {len(callbacks)} "
        f"{callback_runs}, SIGKILLs {len(fleet.killed)}, Redis restarts {run.restarts} (at "
        f"{run.restarted_at} effects, down {run.downtime:.2f}s), hung flows {hung} (state "
        f"{info.state}, jobs {dict(jobs_by_state)}), left in Redis {left or 0}, other "
        f"exits {fleet.exits}, duration {run.elapsed:.1f}s; progress (time:effects/done) "
        f"{' '.join(run.trace)}"
    )
    checks = [
        (run.stalled, f"nothing progressed for {STALL:.0f}s (flow {info.state})"),
        (run.restarts != 1, f"Redis restarted {run.restarts} times, not once"),
        (bool(lost), f"member effects missing {len(lost)}: {shown(lost)}"),
        (bool(doubled), f"member effects doubled: {shown(doubled)}"),
        (bool(strays), f"effects of no member: {shown(strays)}"),
        (bool(unexplained), f"reruns no SIGKILL explains: {unexplained[:SHOWN]}"),
        (len(callbacks) != 1, f"the callback ran {len(callbacks)} times: {callback_runs}"),
        (
            any(row[0] != callback_id for row in callbacks),
            f"callback runs of another job than {callback_id}: {callbacks}",
        ),
        (
            any(seen != MEMBERS for *_, seen, _, _ in callbacks),
            f"the callback ran before all {MEMBERS} effects: {callback_runs}",
        ),
        (
            any(parents != MEMBERS or not ok for *_, parents, ok in callbacks),
            f"the callback's parent_results() were not the {MEMBERS} members': {callback_runs}",
        ),
        (outcome != MEMBERS, f"the flow's result is {outcome!r}, not {MEMBERS}"),
        (bool(hung), f"hung flow: state {info.state}, jobs {dict(jobs_by_state)}"),
        (bool(left), f"left in Redis: {left}"),
        (bool(fleet.exits), f"workers exited on their own: {fleet.exits}"),
    ]
    failures = [message for failed, message in checks if failed]
    if failures:
        failures += fleet.errors()[:SHOWN]
    assert not failures, f"{SEED_ENV}={seed} replays this run\n" + "\n".join(failures)
    with psycopg.connect(DSN, autocommit=True) as conn:  # a passing run's rows go
        for table in TABLES:
            delete = sql.SQL("DELETE FROM {} WHERE run = %s").format(sql.Identifier(table))
            conn.execute(delete, (run_id,))
