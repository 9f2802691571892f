"""What a Redis crash or failover loses or doubles: ``python -m benchmarks.persistence``.

Each scenario runs on private ``redis-server`` processes (free ports, a temporary
directory; the shared server on 6379 is never touched), with one in-process worker
(concurrency 8, visibility timeout 1 s) and a producer in the same event loop that
enqueues ``--jobs`` jobs of each of three kinds, one of each kind per call, at about
each of ``--rates`` jobs/s in turn (150: the worker keeps up; 1500: a backlog builds up),
retrying a call that failed (same job ids) until it is acknowledged:

- **plain**: a sync task whose effect is an ``INSERT`` into PostgreSQL;
- **Redis claim**: the same task with ``idempotent=True`` (claim and done marker in Redis);
- **PostgreSQL claim**: the ``INSERT`` and ``lockgate.postgres.claim`` in one transaction.

Every run of a task writes a row in PostgreSQL (``persist_effects``, outside the Redis
under test), marked whether it was an effect (always, except a PostgreSQL-claim run
that found its claim taken). The fault comes once the producer has had half of its jobs
acknowledged, so jobs are being enqueued, run and acknowledged when it strikes:

- ``aof-always``, ``aof-everysec``: ``appendonly yes`` with that ``appendfsync``;
  SIGKILL, restart from the AOF at once;
- ``rdb``: no AOF; ``BGSAVE`` at a quarter of the jobs, SIGKILL at half, restart from
  that snapshot;
- ``failover``: a primary, one replica and three Sentinels (``tests/clusters.py``,
  ``down-after-milliseconds`` 1000), the app on the ``redis+sentinel://`` URL; SIGKILL
  of the primary, the Sentinels promote the replica, the old node is started again (empty,
  no persistence) as a replica of the new primary, as an operator would;
- ``failover-wait``: the same, with ``WAIT 1 1000`` in the same pipeline as every
  enqueue and settle call (a harness-only patch of the script runner; lockgate has no
  option for it: see docs/reliability.md);
- ``failover-min-replicas``: the same as ``failover``, with ``min-replicas-to-write 1``
  (``min-replicas-max-lag 10``) on both nodes.

Once the producer is done and every acknowledged job has an effect, or none came for
2 s, the worker stops and a new one serves for 3 s (it reclaims what the first left
pending, as a restart of the worker would). Then, per kind: **lost** (enqueue
acknowledged, no effect), **doubled** (two effects or more), **ran again** (more than
one run; for the PostgreSQL claim, the second run found the claim and did nothing).

The WAIT cost: on a plain primary and replica, ``--cost-jobs`` no-op async jobs are
enqueued (batches of 100) and drained by a burst worker at concurrency 32, without and
with WAIT, in turn, ``--trials`` times; the median jobs/s of each.

``--smoke``: 30 jobs of each kind, one trial, a quick WAIT cost, docs left alone.
Otherwise the measured section of ``docs/reliability.md`` is written (between its
markers).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import redis

from benchmarks import machine
from benchmarks.report import markdown_rows
from lockgate import App, LockgateError, Worker, WorkerConfig
from lockgate.backend import lua as scripts
from lockgate.integrations.postgres import claim, init_schema

if TYPE_CHECKING:
    from clusters import Node

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
DOCS = REPO / "docs" / "reliability.md"
BEGIN = "<!-- persistence: begin (python -m benchmarks.persistence writes this) -->"
END = "<!-- persistence: end -->"
DSN = os.environ.get("LOCKGATE_PG_DSN", "host=127.0.0.1 dbname=test user=postgres")
KINDS = ("plain", "redis", "pg")
KIND_LABELS = {"plain": "plain", "redis": "Redis claim", "pg": "PostgreSQL claim"}
CONCURRENCY = 8
VISIBILITY = 1.0
QUIET = 2.0  # no new effect for this long: the rest is lost
SWEEP = 3.0  # a second worker's serving time, to reclaim what the first left pending
WAIT_TIMEOUT_MS = 1000
WAITED = frozenset({"enqueue_stream", "settle_stream"})  # the calls followed by WAIT
STALL = 0.5  # how far the replica falls behind before the primary is killed
START_TIMEOUT = 30.0
POLL = 0.05
log = logging.getLogger("benchmarks.persistence")

SCENARIOS = {
    "aof-always": "AOF `appendfsync always`, SIGKILL, restart from the AOF",
    "aof-everysec": "AOF `appendfsync everysec`, SIGKILL, restart from the AOF",
    "rdb": "RDB only: `BGSAVE` at 1/4, SIGKILL at 1/2, restart from that snapshot",
    "failover-nolag": "primary + replica + 3 Sentinels (async replication), SIGKILL the "
    "primary; the replica promoted",
    "failover": "the same, the replica's link held 0.5 s just before the kill (what it "
    "held is dropped)",
    "failover-wait": "`failover`, with `WAIT 1 1000` after every enqueue and settle call; "
    "a short WAIT counts as a failed call, sent again",
    "failover-min-replicas": "`failover`, with `min-replicas-to-write 1` on both nodes",
}


def tests_path() -> None:
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))


# -- PostgreSQL: the effects, outside the Redis under test --------------------------------


def prepare_tables() -> None:
    init_schema(DSN)
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS persist_effects (run text, kind text, n int, "
            "effect bool, at timestamptz DEFAULT clock_timestamp())"
        )


_local = threading.local()


def connection() -> psycopg.Connection[Any]:
    """The calling thread's own PostgreSQL connection (the tasks run in pool threads)."""
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = psycopg.connect(DSN, autocommit=True)
        _local.conn = conn
    return conn


def record(run: str, kind: str, n: int) -> None:
    conn = connection()
    with conn.transaction():
        effect = kind != "pg" or claim(conn, f"persist:{run}:{n}")
        conn.execute("INSERT INTO persist_effects VALUES (%s, %s, %s, %s)", (run, kind, n, effect))


def effect_count(run: str) -> tuple[int, int]:
    """(jobs with an effect, rows) of a run so far."""
    with psycopg.connect(DSN) as conn:
        row = conn.execute(
            "SELECT count(DISTINCT (kind, n)) FILTER (WHERE effect), count(*) "
            "FROM persist_effects WHERE run = %s",
            (run,),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def tally(run: str, acked: dict[str, set[int]]) -> dict[str, dict[str, int]]:
    """Per kind: acked, lost, doubled, ran again."""
    with psycopg.connect(DSN) as conn:
        rows = conn.execute(
            "SELECT kind, n, count(*) FILTER (WHERE effect), count(*) "
            "FROM persist_effects WHERE run = %s GROUP BY kind, n",
            (run,),
        ).fetchall()
    effects = {(kind, n): (int(e), int(r)) for kind, n, e, r in rows}
    out: dict[str, dict[str, int]] = {}
    for kind in KINDS:
        mine = [effects.get((kind, n), (0, 0)) for n in acked[kind]]
        out[kind] = {
            "acked": len(acked[kind]),
            "lost": sum(1 for e, _ in mine if e == 0),
            "doubled": sum(1 for e, _ in mine if e > 1),
            "again": sum(1 for _, r in mine if r > 1),
        }
    return out


# -- servers -------------------------------------------------------------------------------


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = START_TIMEOUT) -> None:
    tests_path()
    from clusters import wait_for as poll

    poll(predicate, what, timeout)


class Standalone:
    """One private server with the given persistence, killed and restarted from disk."""

    def __init__(self, options: Sequence[str], snapshot: bool) -> None:
        tests_path()
        from clusters import Node, free_cluster_port

        self.root = Path(tempfile.mkdtemp(prefix="lockgate-persist-"))
        self.node: Node = Node(free_cluster_port(set()), self.root)
        self.options = tuple(options)
        self.snapshot = snapshot
        self.binary = shutil.which("redis-server") or "redis-server"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.node.port}/0"

    def start(self) -> None:
        self.node.start(self.binary, *self.options)
        wait_for(self.node.answers, "the server answers")

    def close(self) -> None:
        self.node.signal(signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)

    def events(self) -> list[tuple[float, Callable[[], None]]]:
        crash = (0.5, self.crash)
        return [(0.25, self.save), crash] if self.snapshot else [crash]

    def save(self) -> None:
        client = self.node.client()
        try:
            client.bgsave()
            wait_for(lambda: int(client.info("persistence")["rdb_bgsave_in_progress"]) == 0,
                     "the snapshot")  # fmt: skip
        finally:
            client.close()

    def crash(self) -> None:
        self.node.signal(signal.SIGKILL)
        self.start()  # loads the AOF or the snapshot before it answers


class Link:
    """A TCP relay in front of the primary that can hold its replication stream, as a
    congested link would: after :meth:`hold`, what the primary sends on a connection
    that spoke ``REPLCONF`` (the replica's) is kept back, so the replica and its
    acknowledgements fall behind while clients are served as before; :meth:`cut` drops
    it with every connection. The Sentinels and the replica know the primary by this
    address, so a Sentinel never "fixes" the replica to bypass it.

    SIGSTOP of the replica would not do: the kernel still takes the stream into the
    stopped process's socket buffer, and the replica reads it all once continued."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.held = threading.Event()
        self.sockets: list[socket.socket] = []  # downstream, upstream, downstream, ...
        self.replicas: set[socket.socket] = set()  # downstream sockets of replicas
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self.listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                return
            self.sockets += [downstream, upstream]
            replication = threading.Event()
            for args in ((upstream, downstream, replication), (downstream, upstream, None)):
                threading.Thread(target=self._pump, args=args, daemon=True).start()

    def _pump(
        self, source: socket.socket, sink: socket.socket, holdable: threading.Event | None
    ) -> None:
        held = bytearray()
        try:
            while data := source.recv(65536):
                if holdable is None:  # downstream to the primary: spot the replica
                    if b"REPLCONF" in data.upper():
                        self._mark(sink)
                elif self.held.is_set() and sink in self.replicas:
                    held += data  # never sent: lost with the link
                    continue
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def _mark(self, upstream: socket.socket) -> None:
        index = self.sockets.index(upstream)
        self.replicas = {*self.replicas, self.sockets[index - 1]}

    def hold(self) -> None:
        self.held.set()

    def cut(self) -> None:
        self.listener.close()
        for sock in self.sockets:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class Replicated:
    """A primary, one replica and three Sentinels; the primary is SIGKILLed.

    The replica and the Sentinels reach the primary through a :class:`Link`."""

    service = "persist"

    def __init__(self, min_replicas: bool, stall: float) -> None:
        tests_path()
        from clusters import Node, free_cluster_port

        self.root = Path(tempfile.mkdtemp(prefix="lockgate-persist-"))
        self.binary = shutil.which("redis-server") or "redis-server"
        taken: set[int] = set()

        def node(name: str) -> Node:
            port = free_cluster_port(taken)
            taken.add(port)
            return Node(port, self.root / name)

        self.primary, self.replica = node("primary"), node("replica")
        self.sentinels = [node(f"sentinel-{i}") for i in range(3)]
        self.min_replicas = min_replicas
        self.stall = stall
        self.link = Link(self.primary.port)

    @property
    def url(self) -> str:
        hosts = ",".join(sentinel.address for sentinel in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}"

    def start(self) -> None:
        from clusters import replicated

        extra = ("--min-replicas-to-write", "1") if self.min_replicas else ()
        self.primary.start(self.binary, *extra)
        wait_for(self.primary.answers, "the primary answers")
        self.replica.start(self.binary, "--replicaof", "127.0.0.1", str(self.link.port), *extra)
        wait_for(lambda: _linked(self.replica) and replicated(self.primary, self.replica),
                 "the replica")  # fmt: skip
        for sentinel in self.sentinels:
            sentinel.directory.mkdir(parents=True)
            config = sentinel.directory / "sentinel.conf"
            config.write_text(
                f"port {sentinel.port}\nbind 127.0.0.1\ndir {sentinel.directory}\n"
                f"sentinel monitor {self.service} 127.0.0.1 {self.link.port} 2\n"
                f"sentinel down-after-milliseconds {self.service} 1000\n"
                f"sentinel failover-timeout {self.service} 5000\n"
            )
            sentinel.process = subprocess.Popen(
                [self.binary, str(config), "--sentinel", "--logfile",
                 str(sentinel.directory / "log")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        wait_for(self._sentinels_agree, "the Sentinels see each other and the replica")

    def _sentinels_agree(self) -> bool:
        for sentinel in self.sentinels:
            client = sentinel.client()
            try:
                master = client.sentinel_master(self.service)
            finally:
                client.close()
            if int(master["num-other-sentinels"]) < 2 or int(master["num-slaves"]) < 1:
                return False
        return True

    def named_primary(self) -> int:
        client = self.sentinels[0].client()
        try:
            return int(client.sentinel_get_master_addr_by_name(self.service)[1])
        finally:
            client.close()

    def close(self) -> None:
        self.link.cut()
        for node in (*self.sentinels, self.primary, self.replica):
            node.signal(signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)

    def events(self) -> list[tuple[float, Callable[[], None]]]:
        return [(0.5, self.crash)]

    def crash(self) -> None:
        from clusters import replicated

        if self.stall:  # the replica falls behind, as over a congested link
            self.link.hold()
            time.sleep(self.stall)
        self.primary.signal(signal.SIGKILL)
        self.link.cut()  # what it held is lost with the primary
        wait_for(lambda: self.named_primary() == self.replica.port,
                 "the Sentinels promoted the replica")  # fmt: skip
        extra = ("--min-replicas-to-write", "1") if self.min_replicas else ()
        old = self.primary
        old.start(self.binary, "--replicaof", "127.0.0.1", str(self.replica.port), *extra)
        wait_for(lambda: _linked(old) and replicated(self.replica, old), "the old primary")
        if self.min_replicas:  # the primary counts its good replicas once a second
            wait_for(lambda: _good_replicas(self.replica) >= 1, "a good replica")


def servers(name: str) -> Standalone | Replicated:
    if name == "aof-always":
        return Standalone(("--appendonly", "yes", "--appendfsync", "always"), snapshot=False)
    if name == "aof-everysec":
        return Standalone(("--appendonly", "yes", "--appendfsync", "everysec"), snapshot=False)
    if name == "rdb":
        return Standalone((), snapshot=True)
    stall = 0.0 if name == "failover-nolag" else STALL
    return Replicated(min_replicas=name == "failover-min-replicas", stall=stall)


# -- WAIT, as an option would do it (harness only) ----------------------------------------


@dataclass
class WaitStats:
    calls: int = 0
    short: int = 0  # WAIT returned fewer replicas than asked (its timeout passed)


@contextmanager
def waiting(replicas: int, stats: WaitStats) -> Iterator[None]:
    """Follow every pipeline holding an enqueue or a settle call with ``WAIT replicas``,
    in the same pipeline (WAIT counts the writes of its own connection)."""
    send, run = scripts.AsyncScripts._send_pipeline, scripts.AsyncScripts.run

    async def send_waited(self: scripts.AsyncScripts, calls: Sequence[scripts.ScriptCall]) -> Any:
        if not any(call.script in WAITED for call in calls):
            return await send(self, calls)
        async with self._client.pipeline(transaction=False) as pipe:
            for call in calls:
                scripts._fcall(pipe, call)
            pipe.execute_command("WAIT", replicas, WAIT_TIMEOUT_MS)
            replies = list(await pipe.execute(raise_on_error=False))
        stats.calls += 1
        if not isinstance(replies[-1], int) or replies[-1] < replicas:
            stats.short += 1  # applied on the primary alone: sent again, as a failed call
            raise redis.ResponseError(f"NOREPLICAS WAIT {replicas}: {replies[-1]!r}")
        return replies[:-1]

    async def run_waited(self: scripts.AsyncScripts, call: scripts.ScriptCall) -> Any:
        if call.script not in WAITED:
            return await run(self, call)
        (reply,) = await self.run_each([call])
        if isinstance(reply, BaseException):
            raise reply
        return reply

    scripts.AsyncScripts._send_pipeline = send_waited  # type: ignore[method-assign]
    scripts.AsyncScripts.run = run_waited  # type: ignore[method-assign]
    try:
        yield
    finally:
        scripts.AsyncScripts._send_pipeline = send  # type: ignore[method-assign]
        scripts.AsyncScripts.run = run  # type: ignore[method-assign]


# -- one trial -----------------------------------------------------------------------------


def build(url: str, run: str) -> App:
    app = App(url, namespace=uuid.uuid4().hex)

    @app.task(name="plain", retries=5, backoff=0.05)
    def plain(n: int) -> None:
        record(run, "plain", n)

    @app.task(name="redis", idempotent=True, retries=5, backoff=0.05)
    def redis_claim(n: int) -> None:
        record(run, "redis", n)

    @app.task(name="pg", retries=5, backoff=0.05)
    def pg_claim(n: int) -> None:
        record(run, "pg", n)

    return app


async def produce(
    app: App, jobs: int, rate: float, acked: dict[str, set[int]], at: Callable[[float], None]
) -> None:
    """Enqueue one job of each kind per call, paced; a failed call is sent again."""
    started = time.monotonic()
    for n in range(jobs):
        batch = [app.tasks[kind].message(n, job_id=f"{kind}-{n}") for kind in KINDS]
        while True:
            try:
                await app.enqueue_many_async(batch)
                break
            except LockgateError:
                await asyncio.sleep(0.05)
        for kind in KINDS:
            acked[kind].add(n)
        at((n + 1) / jobs)
        ahead = started + 3 * (n + 1) / rate - time.monotonic()
        if ahead > 0:
            await asyncio.sleep(ahead)


async def until_quiet(run: str, expected: int, quiet: float) -> None:
    """Return once ``expected`` jobs have an effect, or no run came for ``quiet`` s."""
    last, seen = time.monotonic(), -1
    while True:
        done, rows = await asyncio.to_thread(effect_count, run)
        if done >= expected:
            return
        if rows != seen:
            last, seen = time.monotonic(), rows
        elif time.monotonic() - last > quiet:
            return
        await asyncio.sleep(0.1)


CLAIM_LEASE = [30.0]  # the worker's claim lease (--claim-lease); lockgate's default


async def serve(app: App, during: Callable[[], Awaitable[None]]) -> None:
    config = WorkerConfig(
        concurrency=CONCURRENCY, visibility_timeout=VISIBILITY, claim_lease=CLAIM_LEASE[0]
    )
    worker = Worker(app, config)
    serving = asyncio.create_task(worker.run())
    try:
        await during()
    finally:
        worker.request_stop()
        await asyncio.wait_for(serving, 60)


@dataclass
class Trial:
    scenario: str
    counts: dict[str, dict[str, int]]
    seconds: float
    wait: WaitStats = field(default_factory=WaitStats)


async def trial(scenario: str, jobs: int, rate: float, quiet: float, sweep_for: float) -> Trial:
    run = f"{scenario}:{uuid.uuid4().hex[:12]}"
    setup = servers(scenario)
    stats = WaitStats()
    started = time.monotonic()
    setup.start()
    acked: dict[str, set[int]] = {kind: set() for kind in KINDS}
    events = setup.events()
    faults: list[asyncio.Task[None]] = []

    def at(progress: float) -> None:
        while events and progress >= events[0][0]:
            _, event = events.pop(0)
            previous = faults[-1] if faults else None
            faults.append(asyncio.create_task(after(previous, event)))

    async def after(previous: asyncio.Task[None] | None, event: Callable[[], None]) -> None:
        if previous is not None:
            await previous
        await asyncio.to_thread(event)

    async def first() -> None:
        await produce(app, jobs, rate, acked, at)
        await asyncio.gather(*faults)
        await until_quiet(run, 3 * jobs, quiet)

    async def sweep() -> None:
        await asyncio.sleep(sweep_for)

    try:
        with waiting(1, stats) if scenario == "failover-wait" else _nothing():
            app = build(setup.url, run)
            try:
                await serve(app, first)
                await serve(app, sweep)
            finally:
                await app.aclose()
                app.close()
    finally:
        setup.close()
    return Trial(scenario, tally(run, acked), time.monotonic() - started, stats)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


# -- what WAIT costs -----------------------------------------------------------------------


@contextmanager
def replicated_pair() -> Iterator[Node]:
    """A primary and one replica, no Sentinel; yields the primary."""
    tests_path()
    from clusters import Node, free_cluster_port, replicated

    root = Path(tempfile.mkdtemp(prefix="lockgate-persist-"))
    binary = shutil.which("redis-server") or "redis-server"
    primary = Node(free_cluster_port(set()), root / "primary")
    replica = Node(free_cluster_port({primary.port}), root / "replica")
    try:
        primary.start(binary)
        wait_for(primary.answers, "the primary answers")
        replica.start(binary, "--replicaof", "127.0.0.1", str(primary.port))
        wait_for(lambda: replicated(primary, replica) and _linked(replica), "the replica")
        yield primary
    finally:
        for node in (replica, primary):
            node.signal(signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


def _good_replicas(primary: Node) -> int:
    client = primary.client()
    try:
        return int(client.info("replication").get("min_slaves_good_slaves", 0))
    finally:
        client.close()


def _linked(replica: Node) -> bool:
    client = replica.client()
    try:
        return client.info("replication").get("master_link_status") == "up"
    finally:
        client.close()


async def drain_rate(url: str, jobs: int, wait: bool) -> tuple[float, float]:
    """(enqueue jobs/s, drain jobs/s) of ``jobs`` no-op async jobs, with or without WAIT."""
    stats = WaitStats()
    with waiting(1, stats) if wait else _nothing():
        app = App(url, namespace=uuid.uuid4().hex)

        @app.task
        async def noop(n: int) -> None:
            pass

        started = time.monotonic()
        for first in range(0, jobs, 100):
            await app.enqueue_many_async([noop.message(n) for n in range(first, first + 100)])
        enqueue = jobs / (time.monotonic() - started)
        started = time.monotonic()
        await Worker(app, WorkerConfig(concurrency=32)).run(burst=True)
        drain = jobs / (time.monotonic() - started)
        await app.aclose()
        app.close()
    return enqueue, drain


async def wait_cost(jobs: int, trials: int) -> dict[str, tuple[float, float]]:
    """Median (enqueue, drain) jobs/s without and with WAIT, in turn on one pair."""
    found: dict[str, list[tuple[float, float]]] = {"no WAIT": [], "WAIT 1": []}
    with replicated_pair() as primary:
        url = f"redis://127.0.0.1:{primary.port}/0"
        await drain_rate(url, jobs, wait=False)  # warm-up: libraries loaded, caches filled
        for _ in range(trials):
            found["no WAIT"].append(await drain_rate(url, jobs, wait=False))
            found["WAIT 1"].append(await drain_rate(url, jobs, wait=True))
    return {
        label: (statistics.median(e for e, _ in runs), statistics.median(d for _, d in runs))
        for label, runs in found.items()
    }


# -- the table -----------------------------------------------------------------------------

HEADERS = (
    "scenario", "job kind", "acked jobs", "lost", "doubled", "ran again",
)  # fmt: skip


def cell(values: list[int]) -> str:
    """A figure over the trials: their sum, and each trial's in brackets when several."""
    total = sum(values)
    return f"{total} ({' + '.join(map(str, values))})" if len(values) > 1 else str(total)


def table(trials: dict[str, list[Trial]]) -> str:
    body = []
    for scenario, found in trials.items():
        for kind in KINDS:
            counts = [t.counts[kind] for t in found]
            body.append([
                f"`{scenario}`" if kind == KINDS[0] else "", KIND_LABELS[kind],
                str(sum(c["acked"] for c in counts)),
                cell([c["lost"] for c in counts]), cell([c["doubled"] for c in counts]),
                cell([c["again"] for c in counts]),
            ])  # fmt: skip
    return markdown_rows(HEADERS, body)


def cost_table(cost: dict[str, tuple[float, float]]) -> str:
    rows = [[label, f"{e:,.0f}", f"{d:,.0f}"] for label, (e, d) in cost.items()]
    return markdown_rows(("primary + 1 replica", "enqueue jobs/s", "drain jobs/s"), rows)


def section(
    runs: dict[float, dict[str, list[Trial]]], cost: dict[str, tuple[float, float]],
    settings: argparse.Namespace, about: dict[str, Any],
) -> str:  # fmt: skip
    load = " / ".join(str(x) for x in about["load_average"])
    names = settings.names
    rates = ",".join(f"{rate:g}" for rate in runs)
    steady = next(iter(runs))
    parts = []
    for rate, trials in runs.items():
        waits = [t.wait for t in trials.get("failover-wait", [])]
        calls, short = sum(w.calls for w in waits), sum(w.short for w in waits)
        what = "the worker keeps up" if rate == steady else "a backlog builds up"
        parts += [
            f"**Enqueued at about {rate:g} jobs/s** ({what}):", "", table(trials), "",
            *([f"In `failover-wait`, {short} of {calls} pipelines' `WAIT` came back short "
               f"(no replica had it within 1 s) and were sent again.", ""] if waits else []),
        ]  # fmt: skip
    return "\n".join([
        BEGIN, "",
        f"Measured {about['date']} with `python -m benchmarks.persistence --jobs "
        f"{settings.jobs} --trials {settings.trials} --rates {rates}` (lockgate "
        f"{about['lockgate']}, {about['redis']}, PostgreSQL 15; {about['nproc']} cores of "
        f"a shared VM, {about['cpu']}, load average at start {load}). Per scenario and "
        f"rate, {settings.trials} trial(s) of {settings.jobs} jobs of each kind, enqueued "
        f"while one worker (concurrency {CONCURRENCY}, about 150-300 jobs/s here) runs "
        f"them; the fault strikes once half the jobs are acknowledged. A cell is the sum "
        f"over the trials, each trial's figure in brackets. **Lost**: enqueue "
        f"acknowledged, no effect ever. **Doubled**: the effect happened twice or more. "
        f"**Ran again**: the task ran more than once (for the PostgreSQL claim the later "
        f"run found the claim and did nothing).",
        "",
        "| scenario | what happens |",
        "|---|---|",
        *(f"| `{name}` | {SCENARIOS[name]} |" for name in names),
        "",
        *parts,
        f"What `WAIT 1` costs, no-op jobs on a primary and one replica over loopback (no "
        f"fault), {settings.cost_jobs} jobs, median of {settings.trials} runs in turn:", "",
        cost_table(cost), "",
        END,
    ])  # fmt: skip


def write_section(text: str, path: Path = DOCS) -> None:
    content = path.read_text()
    begin, end = content.find(BEGIN), content.find(END)
    if begin < 0 or end < 0:
        raise RuntimeError(f"{path} lacks the markers {BEGIN!r} ... {END!r}")
    path.write_text(content[:begin] + text + content[end + len(END) :])


def redis_version() -> str:
    out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    version = next((w.split("=", 1)[1] for w in out.split() if w.startswith("v=")), "?")
    return f"redis-server {version}"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.persistence",
        description="What a Redis crash or failover loses or doubles, per job kind.",
    )
    parser.add_argument("--jobs", type=int, default=200, help="jobs of each kind (200)")
    parser.add_argument("--rates", default="150,1500", help="enqueue jobs/s, each (150,1500)")
    parser.add_argument("--trials", type=int, default=3, help="trials per scenario (3)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="which, by name")
    parser.add_argument("--cost-jobs", type=int, default=3000, help="jobs of the WAIT cost")
    parser.add_argument("--claim-lease", type=float, default=30.0, help="claim lease s (30)")
    parser.add_argument("--smoke", action="store_true", help="tiny and fast, docs untouched")
    parser.add_argument("--no-write", action="store_true", help="leave the docs untouched")
    settings = parser.parse_args(argv)
    settings.quiet, settings.sweep = QUIET, SWEEP
    if settings.smoke:
        settings.jobs, settings.trials, settings.cost_jobs = 30, 1, 300
        settings.rates, settings.quiet, settings.sweep = "300", 1.0, 1.5
    settings.rate_list = [float(rate) for rate in settings.rates.split(",")]
    settings.names = [name for name in settings.scenarios.split(",") if name]
    unknown = set(settings.names) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    return settings


def main(argv: list[str] | None = None) -> None:
    settings = parse(argv)
    CLAIM_LEASE[0] = settings.claim_lease
    logging.basicConfig(level=logging.CRITICAL)  # the outages' errors are expected
    about = {**machine.describe(), "redis": redis_version()}
    prepare_tables()
    runs = {rate: {name: list[Trial]() for name in settings.names} for rate in settings.rate_list}
    for n in range(settings.trials):
        for rate, trials in runs.items():
            for name in settings.names:
                found = asyncio.run(
                    trial(name, settings.jobs, rate, settings.quiet, settings.sweep)
                )
                trials[name].append(found)
                summary = ", ".join(
                    f"{kind} {c['lost']} lost {c['doubled']} doubled {c['again']} again"
                    for kind, c in found.counts.items()
                )
                print(f"trial {n + 1} {name} at {rate:g}/s ({found.seconds:.1f} s): {summary}",
                      flush=True)  # fmt: skip
    started = time.monotonic()
    cost = asyncio.run(wait_cost(settings.cost_jobs, settings.trials))
    print(f"WAIT cost in {time.monotonic() - started:.1f} s")
    for rate, trials in runs.items():
        print(f"\nenqueued at {rate:g} jobs/s\n" + table(trials))
    print("\n" + cost_table(cost))
    if not (settings.smoke or settings.no_write):
        write_section(section(runs, cost, settings, about))
        print(f"\nwrote the measured table in {os.path.relpath(DOCS)}")


if __name__ == "__main__":
    main()
