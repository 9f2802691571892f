"""The dashboard's job pages (lockgate.dashboard.jobs) through Starlette's TestClient,
against real Redis and real workers: a queue's waiting jobs page by page, the running
jobs with their worker and cancel button, a job's page (arguments, worker, timings,
traceback, dead letter), masking of secret jobs, read-only mode, 404s, queues that appear
without a restart, put-back reasons, and that no page reads more than its window.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from dashboard_client import act
from starlette.testclient import TestClient
from test_acl import server as server  # a private server: its command counts are ours
from test_dashboard import Serve
from test_dashboard import serve as serve  # the fixture, re-exported

from conftest import running, wait_until, worker_for
from faults.support import PrivateRedis
from lockgate import App
from lockgate.backend.broker import Outgoing
from lockgate.backend.registry import WorkerInfo, decode, entry_fields
from lockgate.core import codec
from lockgate.core.codec import Job
from lockgate.core.masking import MASK
from lockgate.dashboard import create_app
from lockgate.ops.jobs import PAGE, put_back_reason, shown_args

BACKENDS = ["streams", "sorted"]


def level_of(app: App, level: str) -> str:
    return "*" if app.backend == "sorted" else level


def job_ids(page: str, row_class: str) -> list[str]:
    return re.findall(rf'<tr class="{row_class}" data-job="([^"]+)"', page)


def put(app: App, job: Job, delay_ms: int = 0) -> None:
    """Enqueue a ready-made job (a secret one without its task's option)."""
    plan = app.store.broker.plan_enqueue([Outgoing(job, codec.encode(job), delay_ms)])
    assert app.store.enqueue(plan, [job.id]) == [True]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_waiting_jobs_are_listed_a_page_at_a_time(
    make_app: Callable[..., App], serve: Serve, backend: str
) -> None:
    app = make_app(backend=backend)

    @app.task(queue="mail")
    def send(to: str, body: str) -> None: ...

    total = PAGE * 2 + 7
    app.enqueue_many([send.message(f"u{n}@x", "y" * 200, job_id=f"m{n:03}") for n in range(total)])
    client = serve(app)
    path = f"/queues/mail/{level_of(app, 'normal')}"
    seen: list[str] = []
    page = client.get(path)
    pages = 0
    while True:
        assert page.status_code == 200, page.text[-1000:]
        seen += job_ids(page.text, "waiting-job")
        pages += 1
        found = re.search(r'id="next" href="\?after=([^"]+)"', page.text)
        if found is None:
            break
        page = client.get(f"{path}?after={found.group(1)}")
    assert pages == 3
    assert seen == [f"m{n:03}" for n in range(total)]  # in the order they are taken
    first = html.unescape(client.get(path).text)
    assert '["u0@x","' + "y" * 10 in first  # arguments, cut to a width
    assert "y" * 100 not in first


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_secret_jobs_arguments_and_result_are_masked_on_every_page(
    make_app: Callable[..., App], serve: Serve, backend: str
) -> None:
    app = make_app(backend=backend)
    release = asyncio.Event()

    @app.task(queue="pay", keep_result=60, secret_args=True)
    async def charge(card: str, cvv: str) -> str:
        await release.wait()
        return card

    level = app.default_priority
    for job_id in ("s-wait", "s-run"):
        put(app, Job(id=job_id, task="charge", queue="pay", level=level, args=["4111-card"],
                     kwargs={"cvv": "123"}, secret=True, enqueued=1.0))  # fmt: skip
    client = serve(app)
    pages = [f"/queues/pay/{level_of(app, level)}", "/jobs?id=s-wait", "/jobs?id=s-run"]
    for path in pages:
        text = client.get(path).text
        assert "4111-card" not in text and "123" not in text.replace("1230", ""), path
        assert MASK in text, path
    worker = worker_for(app, concurrency=1, queues=("pay",))
    async with running(worker):
        await wait_until(lambda: app.job("s-wait").status == "running")
        for path in ("/running", "/jobs?id=s-wait"):
            text = client.get(path).text
            assert "4111-card" not in text and MASK in text, path
        release.set()
        await wait_until(lambda: app.job("s-run").status == "done")
    assert app.job("s-run").result == "4111-card"  # the task got the real argument
    text = client.get("/jobs?id=s-run").text
    assert "4111-card" not in text and MASK in text


def test_shown_args_cuts_and_masks() -> None:
    job = Job(id="j", task="t", queue="q", level="normal", args=[1, "x" * 100], kwargs={"k": 2})
    assert shown_args(job, None) == '[1,"' + "x" * 100 + '"] {"k":2}'
    assert len(shown_args(job, 20)) == 20 and shown_args(job, 20).endswith("…")
    secret = Job(id="j", task="t", queue="q", level="normal", args=[1], kwargs={"k": 2},
                 secret=True)  # fmt: skip
    assert shown_args(secret) == f'["{MASK}"] {{"k":"{MASK}"}}'


def test_a_registry_entry_names_its_runs_with_their_starts() -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    info = WorkerInfo("w", "h", 1, ("q",), 4, 2, now, now, "0.4", (("a", 1.5), ("b", 2.0)))
    fields = json.loads(entry_fields(info))
    assert fields["jobs"] == [["a", 1500], ["b", 2000]]
    fields.update(started_at=now.timestamp(), last_heartbeat=now.timestamp())
    assert decode(json.dumps(fields)) == info
    del fields["jobs"]  # an entry of a worker that runs nothing, or of an older one
    assert decode(json.dumps(fields)) == replace(info, jobs=())


def test_put_back_reasons() -> None:
    base = {"id": "j", "task": "t", "queue": "q", "level": "normal"}
    assert put_back_reason(Job(**base, rate_reserved=True)).startswith("rate limited")
    assert put_back_reason(Job(**base, key_reserved=True)).startswith("rate limited")
    assert put_back_reason(Job(**base, waits=2)) == "claim busy: put back 2 times"
    assert put_back_reason(Job(**base, attempt=3)) == "retry: attempt 3"
    assert put_back_reason(Job(**base)) == "scheduled"


def busy(app: App) -> list[str]:
    return [f"c{n}" for n in range(3) if app.job(f"c{n}").status == "running"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_running_jobs_show_their_worker_and_a_cancel_button(
    make_app: Callable[..., App], serve: Serve, backend: str
) -> None:
    app = make_app(backend=backend)
    release = asyncio.Event()

    @app.task(queue="slow")
    async def crunch(n: int) -> None:
        await release.wait()

    for n in range(3):
        crunch.enqueue(n, job_id=f"c{n}")
    client = serve(app)
    read_only = serve(app, read_only=True)
    assert "No job is running" in client.get("/running").text
    worker = worker_for(app, concurrency=2, queues=("slow",))
    try:
        async with running(worker):
            await wait_until(
                lambda: sum(app.job(f"c{n}").status == "running" for n in range(3)) == 2
            )
            page = client.get("/running").text
            ids = job_ids(page, "running-job")
            assert sorted(ids) == sorted(
                f"c{n}" for n in range(3) if app.job(f"c{n}").status == "running"
            )
            assert worker.name in page
            assert 'data-action="cancel"' in page
            assert 'data-action="cancel"' not in read_only.get("/running").text
            job_page = client.get(f"/jobs?id={ids[0]}").text
            assert worker.name in job_page

            def started() -> str:  # the streams backend's: from the worker's heartbeat
                found = re.search(
                    r'id="job-started">([^<]+)<', client.get(f"/jobs?id={ids[0]}").text
                )
                return found.group(1) if found else ""

            await wait_until(lambda: re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", started()))
            assert " ago" in client.get("/running").text.split(f'data-job="{ids[0]}"', 1)[1]
            assert act(client, "cancel", job_id=ids[0]).status_code == 303
            await wait_until(lambda: app.job(ids[0]).status == "cancelled")
            release.set()
    finally:
        release.set()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_dead_jobs_page_shows_its_error_traceback_and_dead_letter(
    make_app: Callable[..., App], serve: Serve, backend: str
) -> None:
    app = make_app(backend=backend)

    @app.task(retries=0)
    def doomed(order: str) -> None:
        raise ValueError(f"no address for {order}")

    doomed.enqueue("A1", job_id="dead-1")
    await worker_for(app).run(burst=True)
    client = serve(app)
    page = client.get("/jobs?id=dead-1")
    assert page.status_code == 200
    assert "no address for A1" in page.text
    assert 'id="job-traceback"' in page.text and "ValueError" in page.text
    letter = re.search(r'id="job-letter" href="/dead/([^"]+)"', page.text)
    assert letter is not None
    assert "no address for A1" in client.get(f"/dead/{letter.group(1)}").text


async def test_unknown_ids_queues_and_levels_are_404(
    make_app: Callable[..., App], serve: Serve
) -> None:
    app = make_app()

    @app.task
    def noop() -> None: ...

    client = serve(app)
    assert client.get("/jobs?id=nope").status_code == 404
    assert client.get("/queues/nowhere/normal").status_code == 404
    assert client.get("/queues/default/urgent").status_code == 404
    assert client.get("/queues/default/normal").status_code == 200
    assert client.get("/jobs").status_code == 200  # the lookup form


async def test_a_queue_shows_as_soon_as_a_worker_serves_it(
    make_app: Callable[..., App], serve: Serve
) -> None:
    dashboard_app = make_app()

    @dashboard_app.task
    def noop() -> None: ...

    client = serve(dashboard_app)
    assert 'data-queue="late"' not in client.get("/").text
    worker_app = make_app()

    @worker_app.task(queue="late")
    def later() -> None: ...

    later.enqueue(job_id="late-1")
    async with running(worker_for(worker_app, queues=("late",))):
        await wait_until(lambda: worker_app.job("late-1").status == "done")
        await wait_until(lambda: 'data-queue="late"' in client.get("/").text)
    assert client.get("/queues/late/normal").status_code == 200


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_queue_shows_as_soon_as_a_producer_enqueues_in_it(
    make_app: Callable[..., App], serve: Serve, backend: str
) -> None:
    # No worker serves it and no job ran in it: its jobs only wait (a new queue deployed
    # before its workers), which is when an operator most needs to see it.
    dashboard_app = make_app(backend=backend)

    @dashboard_app.task
    def noop() -> None: ...

    client = serve(dashboard_app)
    assert 'data-queue="fresh"' not in client.get("/").text
    producer_app = make_app(backend=backend)

    @producer_app.task(queue="fresh")
    def report() -> None: ...

    report.enqueue(job_id="fresh-1")
    assert 'data-queue="fresh"' in client.get("/").text
    page = client.get(f"/queues/fresh/{level_of(producer_app, 'normal')}")
    assert page.status_code == 200
    assert job_ids(page.text, "waiting-job") == ["fresh-1"]


async def test_keyed_jobs_are_listed_by_lane(make_app: Callable[..., App], serve: Serve) -> None:
    app = make_app()

    @app.task(key_by=lambda shop, n: shop)
    def sync_shop(shop: str, n: int) -> None: ...

    for shop in ("north", "south"):
        for n in range(3):
            sync_shop.enqueue(shop, n, job_id=f"{shop}-{n}")
    page = serve(app).get("/queues/default/normal").text
    assert sorted(re.findall(r'<tr class="lane" data-key="([^"]+)" data-job="([^"]+)"', page)) == [
        ("north", "north-0"), ("south", "south-0"),
    ]  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_delayed_page_says_why_a_job_waits(
    make_app: Callable[..., App], serve: Serve, backend: str
) -> None:
    app = make_app(backend=backend)

    @app.task
    def later() -> None: ...

    later.enqueue(job_id="planned", delay=600)
    level = app.default_priority
    put(
        app,
        Job(id="limited", task="later", queue="default", level=level, rate_reserved=True),
        600_000,
    )
    page = serve(app).get("/delayed").text
    assert "scheduled" in page.split('data-job="planned"', 1)[1].split("</tr>", 1)[0]
    assert "rate limited" in page.split('data-job="limited"', 1)[1].split("</tr>", 1)[0]
    job_page = serve(app).get("/jobs?id=planned").text
    assert 'id="job-put-back">scheduled<' in job_page


@pytest.mark.parametrize("backend", BACKENDS)
async def test_no_page_reads_more_than_its_window(server: PrivateRedis, backend: str) -> None:
    """On a queue of 3,000 jobs a page lists 50 and sends a few dozen commands, the same
    as on a queue of 60: one HGET per job listed at most, never a command per job queued."""
    app = App(redis_url=server.url, namespace=uuid.uuid4().hex, backend=backend)

    @app.task
    def work(n: int) -> None: ...

    level = level_of(app, "normal")
    calls = []
    try:
        with TestClient(create_app(app), base_url="http://127.0.0.1:8700",
                        client=("127.0.0.1", 50000)) as client:  # fmt: skip
            for total in (60, 3000):
                app.enqueue_many([work.message(n) for n in range(total - len(calls) * 60)])
                for path in (f"/queues/default/{level}", "/running", "/"):
                    assert client.get(path).status_code == 200  # the first: scripts loaded
                server.client.config_resetstat()
                page = client.get(f"/queues/default/{level}").text
                assert len(job_ids(page, "waiting-job")) == PAGE
                stats = server.client.info("commandstats")
                calls.append({name: row["calls"] for name, row in stats.items()})
    finally:
        await app.aclose()
        app.close()
    short, long = calls
    assert short == long  # the very same commands, as often
    assert sum(long.values()) <= PAGE + 10, long
