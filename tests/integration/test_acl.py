"""lockgate as a restricted ACL user: only its namespace's keys and only the commands it
sends, on a private redis-server (never the shared one, whose users are not ours).

:data:`COMMANDS` is the list of "An ACL user" in docs/operations.md (without the
sorted backend's five, :data:`STREAMS_COMMANDS`, for the default backend). The tests
prove it is enough (jobs run exactly once, and ``ACL LOG`` records no refusal but the
optional ``CONFIG GET``), that lockgate sends every command on it (PING only after 30 s
idle), that the user is really restricted, and what a user missing a command sees.
Redis checks the commands a Function calls against the calling user too, so the
scripts' commands are on the list.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis
from cli_runs import cli_app_in, invoke, one_error_line

from conftest import finish, running, unacked_reads, wait_until
from faults.support import PrivateRedis, Runs, once
from lockgate import AccessDenied, App, RetryableError, Worker, WorkerConfig, current_job
from lockgate.backend.keys import GROUP
from lockgate.ops.history import task_table
from lockgate.ops.inspect import queue_stats
from lockgate.ops.queues import purge

SPEC = "cli_app:app"
PASSWORD = "secret"
RUN_TIMEOUT = 60  # loose: a bound against hangs
# Every command lockgate sends, for both backends, and nothing else. CONFIG GET is left
# out on purpose: the worker's eviction-policy
# check is advice and is skipped when refused, and CONFIG GET would show the user every
# setting of the server.
COMMANDS = (
    # redis-py's health check of a connection idle for 30 s (the first contact is HELLO,
    # which no ACL refuses: no INFO)
    "+ping",
    # lockgate's scripts: one Functions library, loaded by the first client to miss it
    "+function|load", "+fcall", "+fcall_ro",
    # sent directly: the idle wait, dead-letter inspection, counters, cooldowns
    "+xread", "+xlen", "+xrange", "+xrevrange", "+xdel", "+get", "+set",
    # called by the scripts
    "+xadd", "+xreadgroup", "+xack", "+xclaim", "+xpending", "+xtrim", "+xgroup|create",
    "+xgroup|delconsumer", "+xinfo|stream", "+xinfo|groups", "+xinfo|consumers",
    "+exists", "+del", "+incrby", "+pexpire", "+pexpireat", "+pttl", "+time",
    "+zadd", "+zrem", "+zcard", "+zscore", "+zrange", "+zrangebyscore",
    "+zremrangebyscore", "+hset", "+hget", "+hdel",
    # the recent ends per task: pushed and trimmed by the settle scripts, read by
    # lockgate.ops.history (the dashboard's task pages)
    "+lpush", "+ltrim", "+lrange",
    # called by the sorted backend's scripts only
    "+zpopmin", "+hincrby",
)  # fmt: skip
SORTED_ONLY = ("+zpopmin", "+hincrby")
STREAMS_COMMANDS = tuple(c for c in COMMANDS if c not in SORTED_ONLY)
# Sent by a worker's and a claim's background work only: reclaim, the sweep of gone
# consumers, lease renewal.
BACKGROUND = ("+xclaim", "+xinfo|consumers", "+xgroup|delconsumer", "+pexpire")
# Sent once a task's recent ends pass 1,100 (and by a partitioned namespace's wake-ups).
LONG_RUN = ("+ltrim",)
OPTIONAL = {"config|get"}  # refused without harm (see COMMANDS)


def acl_rules(namespace: str, commands: Sequence[str] = COMMANDS) -> list[str]:
    """The ACL SETUSER rules of a user of one namespace (the documented line)."""
    pattern = f"~lockgate:{{{namespace}}}:*"
    return ["on", f">{PASSWORD}", pattern, "resetchannels", "-@all", *commands]


def without(command: str) -> tuple[str, ...]:
    assert command in COMMANDS
    return tuple(c for c in COMMANDS if c != command)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    """The module's private redis-server; ``server.client`` is its default (admin) user."""
    private = PrivateRedis(tmp_path_factory.mktemp("acl"), {})
    try:
        yield private.start()
    finally:
        private.close()


def add_user(
    server: PrivateRedis, name: str, namespace: str, commands: Sequence[str] = COMMANDS
) -> str:
    """Create (or reset) ACL user ``name``; returns a URL that logs in as it. The ACL log
    is cleared, so the test sees only its own refusals."""
    server.client.execute_command("ACL", "SETUSER", name, "reset", *acl_rules(namespace, commands))
    server.client.acl_log_reset()
    return f"redis://{name}:{PASSWORD}@127.0.0.1:{server.port}/0"


def uncalled(server: PrivateRedis, commands: Sequence[str]) -> set[str]:
    """Which of ``commands`` the server has not run since its stats were reset."""
    stats = server.client.info("commandstats")
    return {c for c in commands if not stats.get(f"cmdstat_{c[1:]}", {}).get("calls")}


def refusals(server: PrivateRedis) -> list[str]:
    """What the ACL log says was refused (but the optional commands), as ``reason:object``."""
    entries = server.client.acl_log()
    return sorted({f"{e['reason']}:{e['object']}" for e in entries if e["object"] not in OPTIONAL})


@pytest.fixture
def fresh_namespace(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh namespace, which ``cli_app`` (imported afresh by the CLI) takes too."""
    with cli_app_in(uuid.uuid4().hex, monkeypatch) as namespace:
        yield namespace


async def close(app: App) -> None:
    await app.aclose()
    app.close()


# --- the documented user is enough --------------------------------------------------------


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_jobs_run_exactly_once_as_the_restricted_user(
    server: PrivateRedis, fresh_namespace: str, backend: str
) -> None:
    commands = COMMANDS if backend == "sorted" else STREAMS_COMMANDS
    url = add_user(server, "worker", fresh_namespace, commands)
    app = App(redis_url=url, namespace=fresh_namespace, backend=backend)
    runs = Runs()
    server.client.function_flush()  # the library is loaded as this user too
    server.client.config_resetstat()

    @app.task
    async def record() -> None:
        runs.record(current_job().job_id)

    @app.task
    def record_sync() -> None:
        runs.record(current_job().job_id)

    @app.task(idempotent=True)
    async def record_once() -> None:
        runs.record(current_job().job_id)

    @app.task
    async def slow() -> None:  # runs past the worker's look for cancel requests
        await asyncio.sleep(0.4)
        runs.record(current_job().job_id)

    limits: dict[str, Any] = {"key_concurrency": 1, "key_rate_limit": "100/s"}

    @app.task(key_by="tenant", **limits)
    async def keyed(tenant: str) -> None:  # fair shares, a slot, a limiter
        runs.record(current_job().job_id)

    @app.task(retries=2)
    async def flaky() -> None:
        runs.record(current_job().job_id)
        if current_job().attempt == 1:
            raise RetryableError("not yet", delay=0.05)

    @app.task(retries=0)
    async def doomed() -> None:
        runs.record(current_job().job_id)
        raise ValueError("card declined")

    try:
        assert record.enqueue(job_id="sync").created
        assert (await record.enqueue_async(job_id="async")).created
        messages = [record.message(job_id=f"many-{n}") for n in range(5)]
        assert all(r.created for r in await app.enqueue_many_async(messages))
        # Due later than a short wait (worker.SHORT_WAIT): the idle worker blocks on XREAD.
        assert record.enqueue(job_id="delayed", delay=0.4).created
        assert record_sync.enqueue(job_id="in-a-thread").created
        assert record_once.enqueue(job_id="idempotent").created
        assert flaky.enqueue(job_id="flaky").created
        assert doomed.enqueue(job_id="doomed").created
        for n, tenant in enumerate("aab"):
            assert keyed.enqueue(tenant, job_id=f"keyed-{n}").created
        assert keyed.enqueue("c", job_id="keyed-cancelled").created
        assert app.cancel("keyed-cancelled") and app.job("keyed-cancelled").key == "c"
        busiest = await app.store.busiest_keys(app.queues, 10, {})
        assert [(row.key, row.waiting) for row in busiest] == [("a", 2), ("b", 1)]
        with app.idempotent(f"claim-{backend}"):  # a claim outside any job
            pass
        assert app.incr_once("orders", "request-1", 2) == (True, 2)
        assert app.incr_once("orders", "request-1", 2) == (False, 2)  # counted once
        assert app.counter("orders") == 2
        assert app.cooldown("mail", 60) and not app.cooldown("mail", 60)
        worker = Worker(app, WorkerConfig(concurrency=4, idle_wait=1.0))
        await asyncio.wait_for(worker.run(burst=True), RUN_TIMEOUT)
        # Alone, so the run above still waits idle for the delayed job (XREAD).
        assert slow.enqueue(job_id="slow").created
        worker = Worker(app, WorkerConfig(concurrency=4, idle_wait=1.0))
        await asyncio.wait_for(worker.run(burst=True), RUN_TIMEOUT)
        # A status read, then a purge of a job under an ended one's id (its old record goes).
        assert (await app.job_async("sync")).status == "done"
        again = record.enqueue(job_id="sync")
        assert again.created and await purge(app, record.queue) == 1
        assert (await app.job_async("sync")).status == "unknown"
        stats = await queue_stats(app)
        table = {row.task: row for row in await task_table(app)}
    finally:
        await close(app)

    assert table["doomed"].dead == 1 and table["flaky"].retried == 1
    plain = ["sync", "async", *(f"many-{n}" for n in range(5)), "delayed", "in-a-thread", "slow"]
    plain += [f"keyed-{n}" for n in range(3)]
    assert runs.counts() == {**once([*plain, "idempotent", "doomed"]), "flaky": 2}
    assert all(row.waiting == row.pending == row.delayed == 0 for row in stats.levels)
    assert stats.dead_letters == 1

    listed = await asyncio.to_thread(invoke, "dlq", "--url", url, SPEC, "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert [letter["job_id"] for letter in json.loads(listed.stdout)] == ["doomed"]
    cli_stats = await asyncio.to_thread(invoke, "stats", SPEC, "--url", url, "--json")
    assert cli_stats.exit_code == 0, cli_stats.output
    assert json.loads(cli_stats.stdout)["dead_letters"] == 1
    purged = await asyncio.to_thread(invoke, "dlq", "--url", url, SPEC, "purge", "--yes")
    assert purged.exit_code == 0, purged.output
    assert "purged 1 dead letters" in purged.stdout
    assert refusals(server) == []
    # Nothing on the list is there for nothing: this flow sends all but PING (a health
    # check after 30 s idle) and the background work's (test_reclaim_the_consumer_...).
    if backend == "sorted":
        assert uncalled(server, SORTED_ONLY) == set()
    else:
        assert uncalled(server, STREAMS_COMMANDS) - {"+ping"} == {*BACKGROUND, *LONG_RUN}


# A partitioned namespace's user also needs its tags' keys and the wake-up lists' commands.
PARTITIONED = ("+blpop", "+rpush", *LONG_RUN)
# What workflows add (docs/operations.md, "An ACL user"): the flow scripts' set, list
# and hash commands, and the reads of App.flow and FlowResult.result.
FLOWS = (
    "+sadd", "+srem", "+scard", "+smembers", "+hlen", "+hkeys", "+hgetall", "+hmget",
    "+hincrby", "+llen", "+lpop", "+rpush", "+rename", "+persist",
)  # fmt: skip


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_flows_run_as_the_restricted_user_with_the_flow_commands(
    server: PrivateRedis, fresh_namespace: str, backend: str
) -> None:
    """A chord, a dead member replayed, a cancelled flow and the flow's page, as the
    documented user with the flow commands: nothing refused, each of them used."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from lockgate import chain, group
    from lockgate.dashboard import create_app
    from lockgate.ops import deadletter

    commands = (*(COMMANDS if backend == "sorted" else STREAMS_COMMANDS), *FLOWS)
    url = add_user(server, "flows", fresh_namespace, tuple(dict.fromkeys(commands)))
    app = App(redis_url=url, namespace=fresh_namespace, backend=backend)
    broken = {"yes": True}
    server.client.config_resetstat()

    @app.task(retries=0)
    async def member(n: int) -> int:
        if n == 3 and broken["yes"]:
            raise ValueError("not yet")
        return n

    @app.task
    async def total() -> int:
        return sum(current_job().parent_results())

    try:
        flow = group(*(member.message(n) for n in range(5))).then(total.message())
        result = await app.enqueue_flow_async(flow, flow_id="chord")
        doomed = await app.enqueue_flow_async(chain(member.message(0), total.message()))
        assert await app.cancel_flow_async(doomed.flow_id) == 2
        worker = Worker(app, WorkerConfig(concurrency=4, idle_wait=1.0))
        await asyncio.wait_for(worker.run(burst=True), RUN_TIMEOUT)
        assert (await app.flow_async("chord")).state == "failed"
        broken["yes"] = False
        letters = [x for x in deadletter.list_dead(app) if x.job_id == "chord.3"]
        assert [r.outcome for r in deadletter.replay(app, letters)] == ["enqueued"]
        again = Worker(app, WorkerConfig(concurrency=4, idle_wait=1.0))
        await asyncio.wait_for(again.run(burst=True), RUN_TIMEOUT)
        assert await result.result_async(timeout=10) == 10
        with TestClient(
            create_app(app, read_only=True), base_url="http://127.0.0.1:8700",
            client=("127.0.0.1", 50000),
        ) as client:  # fmt: skip
            assert client.get("/flows/chord").status_code == 200
    finally:
        await close(app)
    assert refusals(server) == []
    assert uncalled(server, FLOWS) == set()


async def test_a_traced_flow_keeps_its_links_as_the_restricted_user(
    server: PrivateRedis, fresh_namespace: str
) -> None:
    """Tracing's flow links (``lockgate.otel``) need nothing past the flow commands: each
    run keeps its span context and the chain's next run links to it, nothing refused."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from lockgate import chain
    from lockgate.otel import LockgateInstrumentor

    commands = tuple(dict.fromkeys((*STREAMS_COMMANDS, *FLOWS)))
    app = App(redis_url=add_user(server, "traced", fresh_namespace, commands),
              namespace=fresh_namespace, backend="streams")  # fmt: skip
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    LockgateInstrumentor().instrument(tracer_provider=provider)

    @app.task
    async def step(n: int) -> int:
        return n

    try:
        await app.enqueue_flow_async(chain(step.message(1), step.message(2)))
        worker = Worker(app, WorkerConfig(idle_wait=1.0))
        await asyncio.wait_for(worker.run(burst=True), RUN_TIMEOUT)
    finally:
        LockgateInstrumentor().uninstrument()
        provider.shutdown()
        await close(app)
    runs = [s for s in exporter.get_finished_spans() if s.name == "process default"]
    first, second = sorted(runs, key=lambda s: s.start_time or 0)
    assert [link.context.span_id for link in second.links] == [first.context.span_id]
    assert refusals(server) == []


async def test_a_partitioned_namespace_runs_as_the_restricted_user(
    server: PrivateRedis, fresh_namespace: str
) -> None:
    commands = (*STREAMS_COMMANDS, *PARTITIONED)
    url = add_user(server, "worker", fresh_namespace, commands)
    server.client.execute_command("ACL", "SETUSER", "worker", f"~lockgate:{{{fresh_namespace}/*")
    app = App(redis_url=url, namespace=fresh_namespace, partitions=4)
    runs = Runs()
    server.client.config_resetstat()

    @app.task(idempotent=True)
    async def record() -> None:
        runs.record(current_job().job_id)

    @app.task(retries=1)
    async def flaky() -> None:
        runs.record(current_job().job_id)
        if current_job().attempt == 1:
            raise RetryableError("not yet", delay=0.05)

    @app.task(retries=0)
    async def doomed() -> None:
        raise ValueError("card declined")

    try:
        ids = [f"job-{n}" for n in range(12)]
        assert all(r.created for r in app.enqueue_many([record.message(job_id=i) for i in ids]))
        assert record.enqueue(job_id="delayed", delay=0.4).created
        assert flaky.enqueue(job_id="flaky").created
        assert doomed.enqueue(job_id="doomed").created
        with app.idempotent("claim-p"):
            pass
        assert app.incr_once("orders", "request-1", 2) == (True, 2)
        assert app.cooldown("mail", 60) and not app.cooldown("mail", 60)
        worker = Worker(app, WorkerConfig(concurrency=4, idle_wait=1.0))
        await asyncio.wait_for(worker.run(burst=True), RUN_TIMEOUT)
        # A status read, then a purge of a job under an ended one's id (its old record goes).
        assert (await app.job_async("job-0")).status == "done"
        again = record.enqueue(job_id="job-0")
        assert again.created and await purge(app, record.queue) == 1
        assert (await app.job_async("job-0")).status == "unknown"
        stats = await queue_stats(app)
    finally:
        await close(app)
    assert runs.counts() == {**once([*ids, "delayed"]), "flaky": 2}
    assert stats.dead_letters == 1
    assert refusals(server) == []
    assert uncalled(server, PARTITIONED) == set()


def test_an_enqueue_that_cannot_wake_workers_still_enqueues(
    server: PrivateRedis, fresh_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The wake-up follows jobs that landed: its failure (here RPUSH refused) is logged,
    never raised, or a caller would send the jobs again."""
    commands = (*STREAMS_COMMANDS, "+blpop", "+ltrim")
    url = add_user(server, "worker", fresh_namespace, commands)
    server.client.execute_command("ACL", "SETUSER", "worker", f"~lockgate:{{{fresh_namespace}/*")
    app = App(redis_url=url, namespace=fresh_namespace, partitions=4)

    @app.task
    async def record() -> None: ...

    try:
        with caplog.at_level(logging.WARNING, logger="lockgate.backend.store"):
            sent = app.enqueue_many([record.message(job_id=f"j{n}") for n in range(6)])
        assert all(r.created for r in sent)
        assert [app.job(f"j{n}").status for n in range(6)] == ["waiting"] * 6
        assert "could not wake idle workers" in caplog.text
        assert refusals(server) == ["command:rpush"]
    finally:
        app.close()


def test_a_refused_queue_names_write_costs_nothing_after_the_first_contact(
    server: PrivateRedis, fresh_namespace: str
) -> None:
    """The first contact's queue names (a ZADD) are best effort: refused, the partition
    check still passes once, and no later call repeats the contact."""
    url = add_user(server, "worker", fresh_namespace, without("+zadd"))
    app = App(redis_url=url, namespace=fresh_namespace, backend="streams")

    @app.task
    async def record() -> None: ...

    try:
        for n in range(3):
            assert record.enqueue(job_id=f"j{n}").created
        assert refusals(server) == ["command:zadd"]
        (entry,) = server.client.acl_log()
        assert int(entry["count"]) == 1  # refused once: the contact was not made again
    finally:
        app.close()


async def test_reclaim_the_consumer_sweep_and_lease_renewal_as_the_restricted_user(
    server: PrivateRedis, fresh_namespace: str
) -> None:
    """What a worker and a claim do in the background, with the documented user: a job
    that a gone consumer left is reclaimed, the gone consumer is forgotten, and a long
    claim's lease is renewed."""
    url = add_user(server, "worker", fresh_namespace, STREAMS_COMMANDS)
    app = App(redis_url=url, namespace=fresh_namespace)
    runs = Runs()

    @app.task
    def record() -> None:  # a reclaimed job runs in a child process: Runs sees it
        runs.record(current_job().job_id)

    server.client.config_resetstat()
    try:
        with app.idempotent("long", lease=0.3):  # renewed every 0.1 s while it lasts
            await wait_until(lambda: not uncalled(server, ["+pexpire"]), message="a renewal")
        record.enqueue(job_id="orphan")
        stream = app.keys.stream("default", "normal")
        unacked_reads(server.client, stream, consumer="ghost")

        def ghost_forgotten() -> bool:
            consumers = server.client.xinfo_consumers(stream, GROUP)
            return all(c["name"] != b"ghost" for c in consumers)

        worker = Worker(app, WorkerConfig(concurrency=2, idle_wait=1.0, visibility_timeout=0.2))
        async with running(worker):
            await wait_until(lambda: runs.ran_all(["orphan"]), message="the orphan ran")
            # Swept once idle for 10 s (the least a worker waits before forgetting one).
            await wait_until(ghost_forgotten, message="the gone consumer forgotten")
    finally:
        await close(app)
    assert runs.counts() == once(["orphan"])
    assert refusals(server) == []
    assert uncalled(server, BACKGROUND) == set()


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_every_dashboard_page_and_button_works_as_the_restricted_user(
    server: PrivateRedis, fresh_namespace: str, backend: str
) -> None:
    """The dashboard may run as the workers' user: each page (with a waiting, a delayed,
    a dead and a running job to show) and each button, and no command is refused."""
    pytest.importorskip("starlette")
    from dashboard_client import act
    from starlette.testclient import TestClient

    from lockgate.dashboard import create_app

    commands = COMMANDS if backend == "sorted" else STREAMS_COMMANDS
    url = add_user(server, "dashboard", fresh_namespace, commands)
    app = App(redis_url=url, namespace=fresh_namespace, backend=backend)
    release = asyncio.Event()

    @app.task(retries=0)
    async def doomed() -> None:
        raise ValueError("card declined")

    @app.task(queue="held")
    async def held() -> None:
        await release.wait()

    @app.task
    async def later() -> None: ...

    try:
        doomed.enqueue(job_id="doomed")
        await asyncio.wait_for(Worker(app, WorkerConfig(concurrency=1)).run(burst=True), 60)
        later.enqueue(job_id="waiting")
        later.enqueue(job_id="delayed", delay=300)
        worker = Worker(app, WorkerConfig(concurrency=1, idle_wait=1.0, queues=("held",)))
        level = "*" if backend == "sorted" else "normal"  # a queue's page (of every level)
        server.client.acl_log_reset()
        async with running(worker):
            try:
                held.enqueue(job_id="running")  # the one queue this worker reads
                await wait_until(lambda: app.job("running").status == "running")
                with TestClient(
                    create_app(app), base_url="http://127.0.0.1:8700", client=("127.0.0.1", 50000)
                ) as client:
                    pages = [
                        "/",
                        "/dead",
                        "/delayed",
                        "/jobs?id=running",
                        "/jobs?id=delayed",
                        "/tasks",
                        "/tasks/doomed?outcome=dead",
                        "/running",
                        "/jobs?id=doomed",
                        f"/queues/default/{level}",
                        f"/queues/held/{level}",
                    ]
                    letter = client.get("/dead").text.split('href="/dead/', 1)[1].split('"', 1)[0]
                    pages.append(f"/dead/{letter}")
                    for path in pages:
                        response = client.get(path)
                        assert response.status_code == 200, (path, response.text[-2000:])
                    assert 'data-job="delayed"' in client.get("/delayed").text
                    assert 'data-job="running"' in client.get("/running").text
                    assert 'data-job="waiting"' in client.get(f"/queues/default/{level}").text
                    assert 'id="job-letter"' in client.get("/jobs?id=doomed").text
                    assert 'data-job="doomed"' in client.get("/tasks/doomed").text
                    assert "card declined" in client.get(f"/dead/{letter}").text
                    for action, fields in [
                        ("pause", {"queue": "default"}),
                        ("resume", {"queue": "default"}),
                        ("cancel", {"job_id": "running"}),
                        ("replay", {"entry_id": letter}),
                        ("purge-queue", {"queue": "default"}),
                        ("purge-dead", {}),
                    ]:
                        done = act(client, action, **fields)
                        assert done.status_code == 303, (action, done.text[-2000:])
                # Seen by the worker once this loop is free again (the TestClient's calls
                # block it): the run is cancelled, never released.
                await wait_until(lambda: app.job("running").status == "cancelled")
            finally:
                release.set()  # a failed check: let the worker stop without its grace period
    finally:
        await close(app)
    assert refusals(server) == []


# --- the user is restricted ---------------------------------------------------------------


async def test_keys_and_commands_outside_the_rules_are_refused(
    server: PrivateRedis, fresh_namespace: str
) -> None:
    url = add_user(server, "worker", fresh_namespace)
    client = redis.Redis.from_url(url)
    try:
        assert client.set(f"lockgate:{{{fresh_namespace}}}:test:mine", 1)
        for key in ("elsewhere", f"lockgate:{{{uuid.uuid4().hex}}}:job:x"):
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.set(key, 1)
        for command in (("KEYS", "*"), ("FLUSHALL",), ("PUBLISH", "lockgate", "x")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.execute_command(*command)
    finally:
        client.close()

    # lockgate itself, on another namespace: its scripts' keys are refused.
    other = App(redis_url=url, namespace=uuid.uuid4().hex)
    task = other.task(name="record")(lambda: None)
    try:
        with pytest.raises(AccessDenied):
            task.enqueue()
        with pytest.raises(AccessDenied):
            await task.enqueue_async()
    finally:
        await close(other)


# --- a user missing a command -------------------------------------------------------------


async def test_without_the_history_commands_jobs_settle_and_no_history_is_kept(
    server: PrivateRedis, fresh_namespace: str
) -> None:
    """0.3's documented user (no +lpush, +ltrim, +lrange): every job still settles once
    (the settle scripts' history push is refused and skipped), nothing is kept."""
    commands = tuple(c for c in STREAMS_COMMANDS if c not in ("+lpush", "+ltrim", "+lrange"))
    url = add_user(server, "no-history", fresh_namespace, commands)
    app = App(redis_url=url, namespace=fresh_namespace)
    runs = Runs()

    @app.task(retries=0)
    async def record(fail: bool) -> None:
        runs.record(current_job().job_id)
        if fail:
            raise ValueError("declined")

    try:
        record.enqueue(False, job_id="ok")
        record.enqueue(True, job_id="bad")
        await asyncio.wait_for(Worker(app, WorkerConfig(concurrency=2)).run(burst=True), 60)
        assert (await app.job_async("ok")).status == "done"
        assert (await app.job_async("bad")).status == "dead"
    finally:
        await close(app)
    assert runs.counts() == once(["ok", "bad"])
    assert not server.client.exists(f"lockgate:{{{fresh_namespace}}}:ends")
    assert {"command:lpush"} <= set(refusals(server))


async def test_without_function_load_producers_workers_and_the_cli_get_access_denied(
    server: PrivateRedis, fresh_namespace: str
) -> None:
    server.client.function_flush()  # a server that has not seen this lockgate yet
    url = add_user(server, "no-function-load", fresh_namespace, without("+function|load"))
    app = App(redis_url=url, namespace=fresh_namespace)
    task = app.task(name="record")(lambda: None)
    try:
        with pytest.raises(AccessDenied, match="function"):
            task.enqueue()
        with pytest.raises(AccessDenied, match="function"):
            await task.enqueue_async()
        worker = Worker(app, WorkerConfig(idle_wait=1.0))
        with pytest.raises(AccessDenied, match="function"):
            await asyncio.wait_for(worker.run(burst=True), RUN_TIMEOUT)
    finally:
        await close(app)

    result = await asyncio.to_thread(invoke, "stats", SPEC, "--url", url)
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert "function" in line
    assert PASSWORD not in result.output


def test_a_command_refused_inside_a_script_is_access_denied_for_a_producer(
    server: PrivateRedis, fresh_namespace: str
) -> None:
    url = add_user(server, "no-xadd", fresh_namespace, without("+xadd"))
    app = App(redis_url=url, namespace=fresh_namespace)
    task = app.task(name="record")(lambda: None)
    try:
        with pytest.raises(AccessDenied):
            task.enqueue()
    finally:
        app.close()


@pytest.mark.parametrize(
    ("refused", "idempotent"),
    [("+xack", False), ("+zscore", True)],
    ids=["settle-without-xack", "claim-without-zscore"],
)
async def test_a_worker_whose_user_lacks_a_script_command_stops_with_access_denied(
    server: PrivateRedis,
    fresh_namespace: str,
    caplog: pytest.LogCaptureFixture,
    refused: str,
    idempotent: bool,
) -> None:
    """No retry mends an ACL: a command refused inside a function (a settle's XACK, a
    claim's done-marker lookup) stops the worker with AccessDenied, the job left pending
    for a worker that may, instead of a retry logged forever or a job parked silently."""
    url = add_user(server, f"no-{refused[1:]}", fresh_namespace, without(refused))
    app = App(redis_url=url, namespace=fresh_namespace)
    task = app.task(name="record", idempotent=idempotent)(lambda: None)
    try:
        task.enqueue()
        worker = Worker(app, WorkerConfig(idle_wait=1.0, grace_period=1.0))
        run = asyncio.create_task(worker.run(burst=True))

        def retries() -> list[str]:
            return [
                r.getMessage() for r in caplog.records
                if r.levelno >= logging.ERROR and "trying again" in r.getMessage()
            ]  # fmt: skip

        try:
            # Either it stops (as it should), or it retries a refusal no retry can mend.
            await wait_until(lambda: run.done() or retries(), message="a stop or a retry")
            assert not retries(), f"the worker retries: {retries()[0]}"
            await wait_until(run.done, message="the worker stops")
            assert isinstance(run.exception(), AccessDenied)
        finally:
            if not run.done():
                worker.request_stop()
                await finish(worker, run)
    finally:
        await close(app)


@pytest.mark.parametrize("page", ["docs/operations.md"])
def test_the_documented_acl_line_is_the_tested_one(page: str) -> None:
    """The line users copy grants exactly what these tests prove is enough."""
    root = Path(__file__).resolve().parents[2]
    rules = acl_rules("shop")
    line = " ".join(["ACL SETUSER worker", *rules]).replace(f">{PASSWORD}", ">secret")
    assert line in (root / page).read_text()
