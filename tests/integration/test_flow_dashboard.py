"""The dashboard's flow pages (``/flows/{id}``, ``/flows?id=``) and the flow link of a job's
page, through Starlette's TestClient against real Redis and real workers, on both
backends: a finished chord, a failed flow with its dead letter linked, a cancelled one,
an unknown id, ids that need escaping, read-only mode, a token, a mount, and the
documented ACL user.
"""

from __future__ import annotations

import asyncio
import html
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from markupsafe import escape
from starlette.testclient import TestClient
from starlette.types import ASGIApp
from test_acl import COMMANDS, STREAMS_COMMANDS, add_user, refusals

from conftest import worker_for
from faults.support import PrivateRedis
from lockgate import App, FlowResult, JobFailed, chain, current_job, group
from lockgate.dashboard import create_app
from lockgate.ops import flows
from lockgate.ops.deadletter import list_dead

BACKENDS = ["streams", "sorted"]
TOKEN = "s3cret-dashboard-token"
MEMBERS = 10  # a chord's members: more than the page lists of what its callback waits on

Serve = Callable[..., TestClient]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Start a TestClient (its lifespan included) for a dashboard; all closed at the end."""
    clients: list[TestClient] = []

    def start(app: App | ASGIApp, **options: object) -> TestClient:
        asgi = create_app(app, **options) if isinstance(app, App) else app  # type: ignore[arg-type]
        client = TestClient(asgi, base_url="http://127.0.0.1:8700", client=("127.0.0.1", 50000))
        client.__enter__()
        clients.append(client)
        return client

    yield start
    for client in clients:
        client.__exit__(None, None, None)


def flow_app(make_app: Callable[..., App], backend: str = "streams") -> App:
    """Members square their number; ``broken`` ones fail for good; a callback sums."""
    app = make_app(backend=backend)

    @app.task(retries=0)
    async def member(n: int, broken: bool = False) -> int:
        if broken:
            raise ValueError(f"member {n} is broken")
        return n * n

    @app.task
    async def total() -> int:
        return sum(current_job().parent_results())  # type: ignore[arg-type]

    return app


async def chord(app: App, flow_id: str, broken: tuple[int, ...] = ()) -> FlowResult:
    """A group of members, then the callback; run by a burst worker until nothing is left."""
    members = [app.tasks["member"].message(n, n in broken) for n in range(MEMBERS)]
    result = await app.enqueue_flow_async(
        group(*members).then(app.tasks["total"].message()), flow_id=flow_id
    )
    await worker_for(app, concurrency=4).run(burst=True)
    return result


def rows(page: str) -> dict[str, str]:
    """The flow table's rows: job id -> the row's HTML."""
    body = page.split('id="flow-jobs"', 1)[1].split("</tbody>", 1)[0]
    found = re.findall(r'<tr class="flow-job" data-job="([^"]*)"(.*?)</tr>', body, re.S)
    return {html.unescape(job): row for job, row in found}


def flow_state(page: str) -> str:
    found = re.search(r'id="flow-state">([^<]*)<', page)
    assert found, page[-3000:]
    return found.group(1)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_finished_chord_shows_its_jobs_and_who_waits_on_whom(
    make_app: Callable[..., App], serve: Serve, backend: str
) -> None:
    app = flow_app(make_app, backend)
    result = await chord(app, "chord-1")
    assert await result.result_async(timeout=10) == sum(n * n for n in range(MEMBERS))
    page = serve(app).get("/flows/chord-1")
    assert page.status_code == 200, page.text
    assert flow_state(page.text) == "done"
    assert f"{MEMBERS + 1}: {MEMBERS + 1} done" in page.text
    table = rows(page.text)
    assert list(table) == [f"chord-1.{n}" for n in range(MEMBERS + 1)]
    for job_id, row in table.items():
        assert f'href="/jobs?id={job_id}"' in row, row  # every job ran: each has a page
        assert '<span class="status done">done</span>' in row
    assert ">-</td>" in table["chord-1.0"]  # a member waits on nothing
    callback = table[f"chord-1.{MEMBERS}"]
    assert "chord-1.0, chord-1.1, chord-1.2, chord-1.3, chord-1.4, chord-1.5 … +4 more" in callback
    every = ", ".join(f"chord-1.{n}" for n in range(MEMBERS))
    assert f'title="{every}"' in callback
    assert 'data-refresh="' in page.text  # a running flow's page refreshes itself
    assert 'href="/flows" class="here">Flows<' in page.text


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_failed_flow_links_each_dead_job_to_its_dead_letter(
    make_app: Callable[..., App], serve: Serve, backend: str
) -> None:
    app = flow_app(make_app, backend)
    result = await chord(app, "failing", broken=(3, 7))
    with pytest.raises(JobFailed):
        await result.result_async(timeout=10)
    client = serve(app)
    page = client.get("/flows/failing")
    assert page.status_code == 200, page.text
    assert flow_state(page.text) == "failed"
    assert "replaying its dead letter resumes the flow" in page.text
    table = rows(page.text)
    dead = await asyncio.to_thread(list_dead, app, 10)
    letters = {letter.job_id: letter.id for letter in dead}
    assert set(letters) == {"failing.3", "failing.7"}
    for job_id, letter in letters.items():
        assert f'<a href="/dead/{letter}">{letter}</a>' in table[job_id]
        assert "member 3 is broken" in client.get(f"/dead/{letters['failing.3']}").text
    assert "/dead/" not in table["failing.0"]
    callback = table[f"failing.{MEMBERS}"]
    assert '<span class="status waiting">waiting</span>' in callback
    assert "/jobs?id=" not in callback  # held back by its dead parents: never queued
    assert "missing-letters" not in page.text


async def test_a_cancelled_flow_and_its_held_jobs(
    make_app: Callable[..., App], serve: Serve
) -> None:
    app = flow_app(make_app)
    member = app.tasks["member"]
    await app.enqueue_flow_async(chain(member.message(1), member.message(2)), flow_id="stopped")
    assert await app.cancel_flow_async("stopped") >= 1
    page = serve(app).get("/flows/stopped")
    assert page.status_code == 200
    assert flow_state(page.text) == "cancelled"
    table = rows(page.text)
    assert '<span class="status cancelled">cancelled</span>' in table["stopped.0"]
    held = (await app.flow_async("stopped")).jobs[1].state  # as App.flow tells it
    assert f'<span class="status {held}">{held}</span>' in table["stopped.1"]
    assert 'href="/jobs?id=stopped.0"' in table["stopped.0"]  # was queued: has a record
    assert "/jobs?id=" not in table["stopped.1"]  # held until the cancel: never queued


async def test_an_unknown_flow_is_a_404_with_the_lookup_form(
    make_app: Callable[..., App], serve: Serve
) -> None:
    client = serve(flow_app(make_app))
    page = client.get("/flows/never-enqueued")
    assert page.status_code == 404
    assert 'id="no-flow"' in page.text and "flow_ttl" in page.text
    assert 'name="id" value="never-enqueued"' in page.text
    empty = client.get("/flows")
    assert empty.status_code == 200
    assert 'action="/flows"' in empty.text and "Flow lookup" in empty.text
    assert client.get("/flows/", follow_redirects=False).headers["location"] == "/flows"
    assert client.get("/", follow_redirects=True).text.count('href="/flows"') == 1  # the nav


async def test_the_lookup_form_goes_to_the_flow_page_whatever_its_id_holds(
    make_app: Callable[..., App], serve: Serve
) -> None:
    """An id with a slash, a question mark, a hash, spaces and markup is quoted on the way
    there and escaped on the page. (Task names cannot hold markup; a percent sign is left
    out: the TestClient decodes a path twice, a real server once.)"""
    app = flow_app(make_app)
    flow_id = 'a/b?c#d <b>"x"</b>&'
    await app.enqueue_flow_async(app.tasks["member"].message(2), flow_id=flow_id)
    client = serve(app)
    moved = client.get("/flows", params={"id": f"  {flow_id} "}, follow_redirects=False)
    assert moved.status_code == 303
    assert moved.headers["location"] == ("/flows/a%2Fb%3Fc%23d%20%3Cb%3E%22x%22%3C%2Fb%3E%26")
    page = client.get(moved.headers["location"])
    assert page.status_code == 200, page.text
    assert flow_state(page.text) == "waiting"
    assert "<b>" not in page.text
    assert str(escape(flow_id)) in page.text
    assert list(rows(page.text)) == [f"{flow_id}.0"]


async def test_a_job_page_links_to_its_flow_and_only_a_flow_job_does(
    make_app: Callable[..., App], serve: Serve
) -> None:
    app = flow_app(make_app)
    await chord(app, "linked")
    app.tasks["member"].enqueue(1, job_id="plain.1")  # a flow's form, and no flow
    app.tasks["member"].enqueue(1, job_id="linked.77")  # past the flow's last job
    client = serve(app)
    page = client.get("/jobs", params={"id": "linked.3"})
    assert '<a id="job-flow" href="/flows/linked">linked</a>' in page.text
    for other in ("plain.1", "linked.77", "linked", "linked.03", "nope"):
        page = client.get("/jobs", params={"id": other})
        assert page.status_code == (200 if other in ("plain.1", "linked.77") else 404), other
        assert 'id="job-flow"' not in page.text, other


async def test_read_only_and_token_protected_flow_pages(
    make_app: Callable[..., App], serve: Serve
) -> None:
    app = flow_app(make_app)
    await chord(app, "ro", broken=(1,))
    read_only = serve(app, read_only=True).get("/flows/ro")
    assert read_only.status_code == 200
    assert 'method="post"' not in read_only.text
    assert 'href="/dead/' in read_only.text  # the letter is there to read, not to replay
    guarded = serve(app, token=TOKEN)
    for path in ("/flows/ro", "/flows?id=ro", "/flows"):
        refused = guarded.get(path, follow_redirects=False)
        assert refused.status_code == 401, path
        assert "flow-jobs" not in refused.text
    allowed = guarded.get("/flows/ro", headers={"Authorization": f"Bearer {TOKEN}"})
    assert allowed.status_code == 200 and flow_state(allowed.text) == "failed"


async def test_mounted_the_flow_links_stay_under_the_mount(
    make_app: Callable[..., App], serve: Serve
) -> None:
    app = flow_app(make_app)
    await chord(app, "mounted")
    api = FastAPI()
    api.mount("/ops", create_app(app))
    client = serve(api)
    moved = client.get("/ops/flows?id=mounted", follow_redirects=False)
    assert moved.headers["location"] == "/ops/flows/mounted"
    page = client.get("/ops/flows/mounted")
    assert 'href="/ops/jobs?id=mounted.0"' in page.text
    assert 'href="/ops/flows" class="here"' in page.text
    assert 'action="/ops/flows"' in page.text


async def test_dead_letters_are_searched_among_a_bounded_number(
    make_app: Callable[..., App],
) -> None:
    """A dead job whose letter is newer than the letters searched shows none, and the view
    says the search was cut short; with room enough it is found."""
    app = flow_app(make_app)
    member = app.tasks["member"]
    for n in range(3):  # older letters, of no flow
        member.enqueue(n, True, job_id=f"lonely-{n}")
    await worker_for(app).run(burst=True)
    await chord(app, "late", broken=(5,))
    short = await asyncio.to_thread(flows.flow_view, app, "late", 2)
    assert short.letters_searched == 2 and not short.letters_complete
    assert short.missing_letters == 1
    full = await asyncio.to_thread(flows.flow_view, app, "late", 100)
    assert full.letters_complete and full.missing_letters == 0
    (dead,) = [row for row in full.jobs if row.job.state == "dead"]
    assert dead.job.id == "late.5" and dead.letter is not None
    assert full.as_dict()["jobs"][5]["dead_letter"] == dead.letter


def test_split_job_id() -> None:
    assert flows.split_job_id("f.3") == ("f", 3)
    assert flows.split_job_id("a.b.12") == ("a.b", 12)
    for not_of_a_flow in ("f", ".3", "f.", "f.x", "f.03", "f.+3", "f.٣", "f.-1"):
        assert flows.split_job_id(not_of_a_flow) is None, not_of_a_flow


# --- the documented ACL user ----------------------------------------------------------------


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    private = PrivateRedis(tmp_path_factory.mktemp("flow-acl"), {})
    try:
        yield private.start()
    finally:
        private.close()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_as_the_documented_acl_user_a_job_of_a_flow_still_has_its_page(
    acl_server: PrivateRedis, backend: str, tmp_path: Path
) -> None:
    """The dashboard as the user of "An ACL user" (docs/operations.md): the flow's records
    are read with commands that line does not grant (HGETALL, SMEMBERS, HKEYS, HMGET,
    SCARD), so a flow page is a one-line 503 naming the refusal, and a job's page shows
    the job without its flow link."""
    namespace = uuid.uuid4().hex
    commands = COMMANDS if backend == "sorted" else STREAMS_COMMANDS
    url = add_user(acl_server, "flows", namespace, commands)
    admin = App(redis_url=acl_server.url, namespace=namespace, backend=backend)
    limited = App(redis_url=url, namespace=namespace, backend=backend)
    try:

        @admin.task
        async def step() -> None: ...

        # Enqueued as the server's admin: the flow scripts' commands are not granted either.
        admin.enqueue_flow(chain(step.message(), step.message()), flow_id="acl")
        acl_server.client.acl_log_reset()
        with TestClient(
            create_app(limited, read_only=True), base_url="http://127.0.0.1:8700",
            client=("127.0.0.1", 50000),
        ) as client:  # fmt: skip
            job = client.get("/jobs?id=acl.0")
            assert job.status_code == 200, job.text
            assert '<span class="status waiting" id="job-status">waiting</span>' in job.text
            assert 'id="job-flow"' not in job.text
            flow = client.get("/flows/acl")
            assert flow.status_code == 503
            assert "AccessDenied" in flow.text
        # The job page's one cheap read (HMGET), then the flow page's reads: nothing else.
        assert refusals(acl_server) == [
            "command:hgetall", "command:hkeys", "command:hmget", "command:scard",
            "command:smembers",
        ]  # fmt: skip
    finally:
        admin.close()
        limited.close()
        await admin.aclose()
        await limited.aclose()
