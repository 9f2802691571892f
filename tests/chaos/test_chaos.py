"""Chaos: workers SIGKILLed at random, poison jobs, flaky jobs and a Redis crash, at once.

2,000 jobs over three levels; 3 worker processes, a random one SIGKILLed every 20-60
finished jobs and replaced; one SIGKILL and restart of a private Redis (AOF, fsync
always) part way, down for 0.8 s (shorter than the visibility timeout: no live worker's
job may run twice); 2% poison jobs that kill their worker; 10% that raise RetryableError
once. Half the other jobs record their effect through the PostgreSQL claim (``effect``),
half through lockgate's Redis claim alone (``redis_only``: ``idempotent=True``, a plain
INSERT).

One seed drives every random choice: each job's task, flakiness, level and run time
(a Redis-only job works 0-200 ms, so some are under way when Redis dies), when Redis is
killed, which worker is killed and when. It is printed first (``chaos seed=N``) and
``LOCKGATE_CHAOS_SEED=N`` replays it; the machine's timing still varies, so a replay
repeats the plan and the kill schedule, not every interleaving.

No deadline: the run ends when no job is left in any stream or delayed set, and fails
when for ``STALL`` seconds no job finished (an effect or a dead letter) and the queues did
not shrink. The Redis restart starts that clock afresh; the per-test timeout is a backstop.

At the end every poison job is dead-lettered and nothing else, and nothing is pending,
waiting or delayed. A job without its outcome is "unfinished" when it is still queued,
pending or delayed, and "lost" when it is nowhere. PostgreSQL-claim effects exist exactly
once. A Redis-only claim has an inherent window (the worker killed after the effect
committed, before the done marker was written), so there each extra effect must follow a
SIGKILL of the worker that made the previous one, dead before the rerun started; any
other duplicate fails the test (e.g. a done marker dropped with an ack that failed across
the Redis restart). Random kills pause from ``CALM`` jobs before the restart until
``QUIET`` seconds after it, so warm workers meet the crash and such a duplicate cannot
hide behind a later kill of its worker (a poison job can still kill it: the test then
counts it as explained, the conservative side).

It runs twice (``where``): on one embedded server with one partition, and with
``partitions=4`` on a local Redis Cluster of 3 primaries, each with AOF, fsync always, and
no replica (the workers learn the count from ``LOCKGATE_TEST_PARTITIONS``). There the
Redis crash is a SIGKILL and restart of one primary, the one serving the most of the
namespace's partitions: jobs in the other partitions live on through it.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from chaos_servers import OUTAGE, SEED_ENV, Server, chaos_seed, serving

from lockgate import App, Message
from lockgate.backend.keys import GROUP
from lockgate.backend.partitions import partition_of
from lockgate.core import codec
from lockgate.errors import SerializationError
from lockgate.integrations.postgres import init_schema

pytestmark = pytest.mark.chaos

DSN = os.environ.get("LOCKGATE_PG_DSN", "host=127.0.0.1 dbname=test user=postgres")
PARTITIONS_ENV = "LOCKGATE_TEST_PARTITIONS"  # read by chaos_app
LOG_LEVEL = os.environ.get("LOCKGATE_CHAOS_LOG_LEVEL", "WARNING")  # of the workers' logs
JOBS = 2_000
POISON = JOBS // 50  # 2%
FLAKY = JOBS // 10  # 10%, none of them poison
REDIS_ONLY = (JOBS - POISON) // 2
WORKERS = 3
VISIBILITY = 1.0
# An idempotent job's claim outlives the Redis outage (under 1 s for the embedded server,
# 2-3 s for a cluster primary, which waits out its rejoin delay: see Server.crash): the
# held-up settle lands before another worker may take the claim over.
CLAIM_LEASE = 5.0
# Redis stays down this long: shorter than the visibility timeout, longer than the gap
# the workers' liveness tolerates, so every running job's entry ages past the visibility
# timeout while its worker lives (lockgate.worker.liveness: none of them may run twice).
DOWN_FOR = 0.8 * VISIBILITY
KILL_GAP = (20, 60)  # jobs finished between two random kills
RESTART_AT = (0.3, 0.6)  # share of the jobs finished when Redis is killed
WORK = (0.0, 0.2)  # seconds a Redis-only job runs: some are under way when Redis dies
CALM = 100  # no random kill from this many jobs before the Redis restart ...
QUIET = 3 * VISIBILITY  # ... until this many seconds after it
STALL = 45.0  # fail when nothing finished and the queues did not shrink for this long
PACE = 0.05  # the supervisor's loop
SHOWN = 20  # ids listed per kind of failure
TRACE_EVERY = 5.0  # seconds between two points of the progress trace
HERE = Path(__file__).parent
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS chaos_effects (run text, n int)",
    "CREATE TABLE IF NOT EXISTS chaos_redis_only (id bigserial PRIMARY KEY, run text NOT NULL,"
    " n int NOT NULL, pid int NOT NULL, worker int NOT NULL, attempt int NOT NULL,"
    " started double precision NOT NULL)",
    "CREATE INDEX IF NOT EXISTS chaos_redis_only_run ON chaos_redis_only (run)",
    "CREATE TABLE IF NOT EXISTS chaos_deaths (run text NOT NULL, pid int NOT NULL,"
    " at double precision NOT NULL)",
)


@dataclass(frozen=True)
class Plan:
    """The seeded choices made before the run starts."""

    task: dict[int, str]  # job n -> "poison", "redis_only" or "effect"
    flaky: frozenset[int]
    level: dict[int, str]
    work: dict[int, float]  # seconds a Redis-only job runs before its effect
    restart_at: int  # jobs finished when Redis is killed

    @classmethod
    def draw(cls, rng: random.Random, levels: Sequence[str]) -> Plan:
        order = list(range(JOBS))
        rng.shuffle(order)
        task = dict.fromkeys(order[:POISON], "poison")
        task |= dict.fromkeys(order[POISON : POISON + REDIS_ONLY], "redis_only")
        task |= dict.fromkeys(order[POISON + REDIS_ONLY :], "effect")
        flaky = frozenset(rng.sample(order[POISON:], FLAKY))
        level = {n: rng.choice(levels) for n in range(JOBS)}
        work = {n: rng.uniform(*WORK) for n in range(JOBS)}
        return cls(task, flaky, level, work, round(JOBS * rng.uniform(*RESTART_AT)))

    @property
    def fingerprint(self) -> str:
        """A short digest of the plan: one seed, one fingerprint, on any machine."""
        drawn = [
            (n, self.task[n], n in self.flaky, self.level[n], self.work[n]) for n in range(JOBS)
        ]
        return hashlib.sha256(repr((drawn, self.restart_at)).encode()).hexdigest()[:12]

    def jobs(self, task: str) -> set[int]:
        return {n for n, name in self.task.items() if name == task}


class Fleet:
    """The worker processes: SIGKILLed at seeded random times, replaced when they die.

    ``killed`` maps the pid of every worker that died by SIGKILL to a time (``time.time``)
    when it was surely dead.
    """

    def __init__(self, env: dict[str, str], logs: Path, rng: random.Random) -> None:
        self.env, self.logs, self.rng = env, logs, rng
        self.procs: list[subprocess.Popen[bytes]] = []
        self.killed: dict[int, float] = {}
        self.random_kills = self.poisoned = 0
        self.exits: list[str] = []  # deaths by anything but SIGKILL
        self.next_kill = 0  # jobs finished
        self.held = 0.0  # no random kill before this time (monotonic)

    def spawn(self) -> subprocess.Popen[bytes]:
        command = [
            sys.executable, "-m", "lockgate", "--log-level", LOG_LEVEL, "worker", "chaos_app:app",
            "--concurrency", "4", "--visibility-timeout", str(VISIBILITY),
            "--claim-lease", str(CLAIM_LEASE), "--max-deliveries", "3", "--grace-period", "5",
        ]  # fmt: skip
        path = self.logs / f"worker-{time.monotonic_ns()}.log"
        with path.open("wb") as log:
            proc = subprocess.Popen(command, cwd=HERE, env=self.env, stdout=log, stderr=log)
        path.rename(self.logs / f"worker-{proc.pid}.log")  # the pids the report names
        return proc

    def start(self) -> None:
        self.procs = [self.spawn() for _ in range(WORKERS)]
        self.next_kill = self.rng.randint(*KILL_GAP)

    def hold_kills(self, seconds: float) -> None:
        self.held = time.monotonic() + seconds

    def tend(self, finished: int) -> None:
        """Replace the workers that died on their own; SIGKILL one when its time has come.

        Kills are paced by jobs finished, not by the clock: a slow machine gets as many
        kills per job as a fast one, and its workers get to work between them.
        """
        for i, proc in enumerate(self.procs):
            code = proc.poll()
            if code is None:
                continue
            if code == -signal.SIGKILL:  # a poison job
                self.poisoned += 1
                self.killed[proc.pid] = time.time()
            else:
                self.exits.append(f"pid {proc.pid} exit {code}")
            self.procs[i] = self.spawn()
        if finished < self.next_kill or time.monotonic() < self.held:
            return
        victim = self.rng.randrange(len(self.procs))
        proc = self.procs[victim]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.killed.setdefault(proc.pid, time.time())
        self.random_kills += 1
        self.procs[victim] = self.spawn()
        self.next_kill = finished + self.rng.randint(*KILL_GAP)

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class Watch:
    """Jobs finished and jobs left in Redis, read at each tick of the supervisor.

    Progress is a new high of finished jobs (distinct effects plus dead letters) or a new
    low of entries left in the streams and delayed sets, of every partition.
    """

    def __init__(self, app: App, client: Any, conn: psycopg.Connection[Any], run: str):
        self.client, self.conn, self.run = client, conn, run
        levels, parts = app.levels.names, app.store.layout.parts
        self.keys = (
            [keys.stream("default", level) for keys in parts for level in levels],
            [keys.delayed("default", level) for keys in parts for level in levels],
            [keys.dead() for keys in parts],
        )
        self.finished, self.left = 0, JOBS
        self.most_finished, self.least_left = 0, JOBS
        self.began = self.moved = time.monotonic()
        self.trace: list[str] = []  # "seconds:finished/left" every TRACE_EVERY seconds

    def read(self) -> None:
        row = self.conn.execute(
            "SELECT (SELECT count(DISTINCT n) FROM chaos_effects WHERE run = %(run)s)"
            " + (SELECT count(DISTINCT n) FROM chaos_redis_only WHERE run = %(run)s)",
            {"run": self.run},
        ).fetchone()
        assert row is not None
        streams, delayed, dead = self.keys
        try:
            with self.client.pipeline(transaction=False) as pipe:
                for key in dead + streams:
                    pipe.xlen(key)
                for key in delayed:
                    pipe.zcard(key)
                lengths = pipe.execute()
        except OUTAGE:
            return  # the server is restarting: keep the last counts
        dead_letters = sum(lengths[: len(dead)])
        self.finished, self.left = int(row[0]) + dead_letters, sum(lengths[len(dead) :])
        since = time.monotonic() - self.began
        if since >= TRACE_EVERY * len(self.trace):
            self.trace.append(f"{since:.0f}s:{self.finished}/{self.left}")
        if self.finished > self.most_finished or self.left < self.least_left:
            self.most_finished = max(self.most_finished, self.finished)
            self.least_left = min(self.least_left, self.left)
            self.moved = time.monotonic()

    def still(self) -> float:
        """Seconds since the last progress."""
        return time.monotonic() - self.moved

    def restart_clock(self) -> None:
        self.moved = time.monotonic()


@dataclass
class Run:
    """What the supervisor saw."""

    elapsed: float = 0.0
    restarts: int = 0
    downtime: float = 0.0
    restarted_at: int = 0  # jobs finished then
    restart_time: float = 0.0  # time.time() when Redis was killed
    crashed: str = ""  # what was killed and restarted
    partitions: int = 1  # of the namespace
    stalled: bool = False
    trace: list[str] = field(default_factory=list)  # "seconds:finished/left", now and then


def supervise(fleet: Fleet, watch: Watch, server: Server, app: App, plan: Plan) -> Run:
    """Kill and replace workers until no job is left in Redis or progress stops."""
    run = Run(partitions=server.partitions)
    started = time.monotonic()
    fleet.start()
    while True:
        fleet.tend(watch.finished)
        watch.read()
        if watch.left == 0:
            break
        if not run.restarts and watch.finished >= plan.restart_at - CALM:
            fleet.hold_kills(QUIET)  # busy workers, not fresh ones, meet the crash
        if not run.restarts and watch.finished >= plan.restart_at:
            down, run.restart_time = time.monotonic(), time.time()
            run.crashed = server.crash(app, DOWN_FOR)
            run.downtime = time.monotonic() - down
            run.restarts, run.restarted_at = 1, watch.finished
            watch.restart_clock()
            fleet.hold_kills(QUIET)
        if watch.still() > STALL:
            run.stalled = True
            break
        time.sleep(PACE)
    run.elapsed = time.monotonic() - started
    run.trace = watch.trace
    return run


@dataclass
class Queues:
    """Where job ids are in Redis at the end."""

    waiting: set[str]
    pending: set[str]
    delayed: set[str]
    dead: dict[str, str]  # job id -> reason
    strays: list[str]  # pending entries without a stream entry, undecodable entries


def job_id(raw: bytes | str) -> str:
    try:
        return codec.decode(raw).id
    except SerializationError:
        return f"<undecodable {raw[:40]!r}>"


def locate(client: Any, app: App) -> Queues:
    queues = Queues(set(), set(), set(), {}, [])
    parts = app.store.layout.parts
    for keys, level in itertools.product(parts, app.levels.names):
        stream = keys.stream("default", level)
        entries = {entry: job_id(fields[b"job"]) for entry, fields in client.xrange(stream)}
        pel = client.xpending_range(stream, GROUP, "-", "+", JOBS) if entries else []
        pending = {row["message_id"] for row in pel}
        queues.strays += [f"{stream} {entry!r}" for entry in pending - entries.keys()]
        queues.strays += [name for name in entries.values() if name.startswith("<")]
        queues.pending |= {entries[entry] for entry in pending & entries.keys()}
        queues.waiting |= {entries[entry] for entry in entries.keys() - pending}
        members = client.zrange(keys.delayed("default", level), 0, -1)
        queues.delayed |= {job_id(member) for member in members}
    for keys in parts:
        for _, fields in client.xrange(keys.dead()):
            queues.dead[fields[b"job_id"].decode()] = fields.get(b"reason", b"").decode()
    return queues


@dataclass(frozen=True)
class Effect:
    """One row of the Redis-only task: who ran job n, and when the run started."""

    n: int
    pid: int  # the process that ran it
    worker: int  # its worker: the same pid, or the parent of a forked child
    started: float


@dataclass
class Doubles:
    """Extra effects of the Redis-only task."""

    explained: int = 0
    unexplained: list[str] = field(default_factory=list)
    across_restart: int = 0  # unexplained ones whose runs straddle the Redis outage


def doubles(effects: list[Effect], killed: dict[int, float], run: Run, t0: float) -> Doubles:
    """Extra Redis-only effects: how many a SIGKILL explains, the others described.

    An extra effect is explained when the worker that made the effect before it (or the
    child it ran the job in) died by SIGKILL before the rerun started: it was killed
    between the effect and the done marker.
    """
    runs: dict[int, list[Effect]] = defaultdict(list)
    for effect in effects:
        runs[effect.n].append(effect)
    back = run.restart_time + run.downtime
    found = Doubles()
    for n, made in sorted(runs.items()):
        for before, again in itertools.pairwise(made):
            deaths = [killed[pid] for pid in (before.pid, before.worker) if pid in killed]
            if deaths and min(deaths) <= again.started:
                found.explained += 1
                continue
            across = before.started < back and again.started > run.restart_time
            found.across_restart += across
            death = f"killed at {min(deaths) - t0:.2f}s" if deaths else "never killed"
            found.unexplained.append(
                f"job-{n}: worker {before.worker} (pid {before.pid}) ran it at "
                f"{before.started - t0:.2f}s ({death}), worker {again.worker} (pid "
                f"{again.pid}) again at {again.started - t0:.2f}s"
                + (" (across the Redis restart)" if across else "")
            )
    return found


def enqueue(app: App, plan: Plan) -> None:
    @app.task(priority="normal")
    def effect(n: int, flaky: bool = False) -> None: ...

    @app.task(priority="normal", idempotent=True)
    def redis_only(n: int, flaky: bool = False, work: float = 0.0) -> None: ...

    @app.task(priority="normal")
    def poison(n: int) -> None: ...

    def message(n: int) -> Message:
        options: dict[str, Any] = {"priority": plan.level[n], "job_id": f"job-{n}"}
        if plan.task[n] == "poison":
            return poison.message(n, **options)
        if plan.task[n] == "effect":
            return effect.message(n, flaky=n in plan.flaky, **options)
        return redis_only.message(n, flaky=n in plan.flaky, work=plan.work[n], **options)

    app.enqueue_many([message(n) for n in range(JOBS)])


def missing(plan: Plan, done: set[int], queues: Queues) -> tuple[list[str], list[str]]:
    """Jobs without their outcome: (lost: found nowhere, unfinished: still in Redis).

    A poison job's outcome is its dead letter, any other job's is its effect. A job
    dead-lettered wrongly is neither: the dead-letter check reports it.
    """
    queued = queues.waiting | queues.pending | queues.delayed
    lost, unfinished = [], []
    for n in range(JOBS):
        name = f"job-{n}"
        reached = name in queues.dead if plan.task[n] == "poison" else n in done
        if reached:
            continue
        if name in queued:
            unfinished.append(name)
        elif name not in queues.dead:
            lost.append(name)
    return lost, unfinished


def described(name: str, reason: str, plan: Plan, done: set[int]) -> str:
    """A dead letter's reason, with the job's task and whether its effect was made."""
    n = int(name[4:]) if name.startswith("job-") and name[4:].isdigit() else -1
    if n not in plan.task:
        return reason
    return f"{plan.task[n]}, effect {'made' if n in done else 'none'}: {reason}"


def by_partition(names: Sequence[str], partitions: int) -> str:
    """How many of ``names`` (job ids) each partition holds, when there are several."""
    if partitions == 1 or not names:
        return ""
    count = Counter(partition_of(name, partitions) for name in names)
    return " (by partition: " + ", ".join(f"p{p} {n}" for p, n in sorted(count.items())) + ")"


def shown(ids: Sequence[str] | set[str]) -> str:
    listed = sorted(ids, key=lambda name: (len(name), name))
    more = f" (+{len(listed) - SHOWN} more)" if len(listed) > SHOWN else ""
    return f"[{', '.join(listed[:SHOWN])}]{more}"


@dataclass
class Effects:
    """What PostgreSQL recorded.

    ``counts``: effects per job of the PostgreSQL-claim task; ``redis_only``: the rows of
    the Redis-only task, in the order their runs started.
    """

    counts: dict[int, int]
    redis_only: list[Effect]

    @classmethod
    def read(cls, conn: psycopg.Connection[Any], run: str, killed: dict[int, float]) -> Effects:
        """Read them; a poison job's own note of its death refines ``killed``."""
        counts = dict(
            conn.execute(
                "SELECT n, count(*) FROM chaos_effects WHERE run = %s GROUP BY n", (run,)
            ).fetchall()
        )
        rows = conn.execute(
            "SELECT n, pid, worker, started FROM chaos_redis_only WHERE run = %s"
            " ORDER BY started, id",
            (run,),
        ).fetchall()
        deaths = conn.execute(
            "SELECT pid, min(at) FROM chaos_deaths WHERE run = %s GROUP BY pid", (run,)
        ).fetchall()
        for pid, at in deaths:
            killed[pid] = min(at, killed.get(pid, at))
        return cls(counts, [Effect(*row) for row in rows])


def judge(
    seed: int, plan: Plan, run: Run, fleet: Fleet, queues: Queues, effects: Effects, t0: float
) -> tuple[str, list[str]]:
    """The run's report, and what went wrong (empty when nothing did)."""
    poison = {f"job-{n}" for n in plan.jobs("poison")}
    done = set(effects.counts) | {effect.n for effect in effects.redis_only}
    lost, unfinished = missing(plan, done, queues)
    pg_doubles = sum(effects.counts.values()) - len(effects.counts)
    found = doubles(effects.redis_only, fleet.killed, run, t0)
    unexplained = found.unexplained
    lease = "longer" if run.downtime > VISIBILITY else "shorter"
    wrongly_dead = {
        name: described(name, reason, plan, done)
        for name, reason in queues.dead.items()
        if name not in poison
    }
    not_dead = poison - queues.dead.keys()
    left = queues.waiting | queues.pending | queues.delayed
    report = "\n  ".join(
        [
            f"chaos seed={seed} plan={plan.fingerprint}: {JOBS} jobs ({POISON} poison, "
            f"{FLAKY} flaky, {REDIS_ONLY} Redis-only, partitions={run.partitions}) in "
            f"{run.elapsed:.1f}s",
            f"{fleet.random_kills} random kills, {fleet.poisoned} workers killed by poison, "
            f"other exits {fleet.exits}",
            f"{run.restarts} Redis restart ({run.crashed}): planned at {plan.restart_at} jobs "
            f"finished, killed at {run.restart_time - t0:.2f}s with {run.restarted_at}, down "
            f"{run.downtime:.2f}s",
            f"progress (time:finished/left): {' '.join(run.trace)}",
            f"lost {len(lost)} {shown(lost)}; unfinished {len(unfinished)} {shown(unfinished)}"
            f"{by_partition(lost + unfinished, run.partitions)}",
            f"pending {len(queues.pending)}, waiting {len(queues.waiting)}, delayed "
            f"{len(queues.delayed)}, strays {len(queues.strays)}; dead-lettered "
            f"{len(queues.dead)} (poison {len(poison)})",
            f"PostgreSQL claim: {pg_doubles} duplicates; Redis-only claim: {found.explained} "
            f"duplicates explained by a SIGKILL, {len(unexplained)} unexplained "
            f"({found.across_restart} across the Redis outage, {lease} than the "
            f"{VISIBILITY:.0f} s visibility timeout)",
        ]
    )
    checks = [
        (run.stalled, f"no job finished and the queues did not shrink for {STALL:.0f}s"),
        (run.restarts != 1, f"Redis restarted {run.restarts} times, not once"),
        (bool(lost), f"lost {len(lost)}: {shown(lost)}"),
        (bool(unfinished), f"unfinished {len(unfinished)}: {shown(unfinished)}"),
        (bool(not_dead), f"poison jobs not dead-lettered: {shown(not_dead)}"),
        (
            bool(wrongly_dead),
            f"dead-lettered, not poison: {dict(list(wrongly_dead.items())[:SHOWN])}",
        ),
        (pg_doubles > 0, f"PostgreSQL-claim effects doubled: {pg_doubles}"),
        (bool(unexplained), f"Redis-only duplicates no SIGKILL explains: {unexplained[:SHOWN]}"),
        (
            bool(left or queues.strays),
            f"left in Redis: pending {shown(queues.pending)}, waiting {shown(queues.waiting)}, "
            f"delayed {shown(queues.delayed)}, strays {queues.strays[:SHOWN]}",
        ),
    ]
    return report, [message for failed, message in checks if failed]


@pytest.mark.parametrize("where", ["single", "cluster"], ids=["single-p1", "cluster-p4"])
@pytest.mark.timeout(600)  # a backstop: lack of progress fails the test long before
def test_chaos_nothing_lost_nothing_doubled(tmp_path: Path, where: str) -> None:
    seed = chaos_seed()
    run_id, namespace = uuid.uuid4().hex, f"chaos-{uuid.uuid4().hex[:8]}"
    print(f"\nchaos seed={seed} (replay: {SEED_ENV}={seed}; rows of run {run_id})", flush=True)
    rng = random.Random(seed)
    init_schema(DSN)
    with psycopg.connect(DSN, autocommit=True) as conn:
        for statement in SCHEMA:
            conn.execute(statement)
    t0 = time.time()
    with serving(where) as server, psycopg.connect(DSN, autocommit=True) as conn:
        app = App(redis_url=server.url, namespace=namespace, partitions=server.partitions)
        plan = Plan.draw(rng, app.levels.names)
        enqueue(app, plan)
        env = dict(os.environ, LOCKGATE_REDIS_URL=server.url, CHAOS_NAMESPACE=namespace,
                   CHAOS_RUN=run_id, CHAOS_DSN=DSN,
                   **{PARTITIONS_ENV: str(server.partitions)})  # fmt: skip
        client = server.client()
        fleet = Fleet(env, tmp_path, rng)
        try:
            run = supervise(fleet, Watch(app, client, conn, run_id), server, app, plan)
        finally:
            fleet.stop()
        queues = locate(client, app)
        client.close()
        app.close()
        effects = Effects.read(conn, run_id, fleet.killed)

    report, failures = judge(seed, plan, run, fleet, queues, effects, t0)
    print(report)
    assert not failures, f"{SEED_ENV}={seed} replays this run\n" + "\n".join(failures)
