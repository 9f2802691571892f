"""The dashboard (lockgate.dashboard) through Starlette's TestClient, against real Redis.

Access: no token, a wrong token, a login cookie, the bearer header; CSRF on every POST; the
confirmation step; read-only mode. Data: the pages show what a real worker left behind
(counts, dead letters, delayed jobs, job statuses), on both backends; the buttons replay,
purge, pause, resume and cancel.
"""

from __future__ import annotations

import html
import importlib.metadata
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from dashboard_client import act, csrf_of
from fastapi import FastAPI
from starlette.testclient import TestClient
from starlette.types import ASGIApp

from conftest import running, wait_until, worker_for
from free_ports import free_port
from lockgate import App, Worker
from lockgate.dashboard import actions, create_app
from lockgate.dashboard.security import csrf_token, derive_key, login_cookie
from lockgate.ops import queues
from lockgate.ops.deadletter import count_dead, list_dead, replay

BACKENDS = ["streams", "sorted"]
TOKEN = "s3cret-dashboard-token"
HERE = Path(__file__).parent

Serve = Callable[..., TestClient]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Start a TestClient (its lifespan included) for a dashboard; all closed at the end."""
    clients: list[TestClient] = []

    def start(app: App | ASGIApp, *, address: str = "127.0.0.1", **options: object) -> TestClient:
        asgi = create_app(app, **options) if isinstance(app, App) else app  # type: ignore[arg-type]
        # From this machine, naming it: a dashboard without a token serves nothing else.
        client = TestClient(asgi, base_url="http://127.0.0.1:8700", client=(address, 50000))
        client.__enter__()
        clients.append(client)
        return client

    yield start
    for client in clients:
        client.__exit__(None, None, None)


def shop(make_app: Callable[..., App], backend: str = "streams", partitions: int = 1) -> App:
    app = make_app(backend=backend, partitions=partitions)

    @app.task(queue="mail", priority="low", keep_result=60, dead_on=(ValueError,))
    def send_invoice(order: str) -> None:
        raise ValueError(f"no address for {order}")

    @app.task(queue="default")
    def charge(order: str) -> str:
        return order

    return app


async def dead_lettered(app: App, *orders: str) -> None:
    """Enqueue failing invoices and let a worker dead-letter them."""
    task = app.tasks["send_invoice"]
    for order in orders:
        task.enqueue(order, job_id=f"invoice-{order}")
    await worker_for(app, concurrency=2).run(burst=True)
    assert count_dead(app) == len(orders)


def cell(page: str, css_class: str, queue: str, level: str) -> int:
    """The number in one cell of the overview's queue table."""
    body = page.split(f'data-queue="{queue}"', 1)[1].split("</tbody>", 1)[0]
    row = body.split(f'data-level="{level}"', 1)[1].split("</tr>", 1)[0]
    found = re.search(rf'class="n {css_class}">(\d+)<', row)
    assert found, row
    return int(found.group(1))


# access


async def test_without_a_token_every_page_is_open(
    make_app: Callable[..., App], serve: Serve
) -> None:
    client = serve(shop(make_app))
    for path in ("/", "/dead", "/delayed", "/running", "/jobs", "/queues/mail/low"):
        assert client.get(path).status_code == 200, path
    assert client.get("/jobs?id=nope").status_code == 404  # a page saying so
    assert "Log out" not in client.get("/").text


async def test_without_a_token_only_local_requests_naming_this_machine_are_served(
    make_app: Callable[..., App],
) -> None:
    asgi = create_app(shop(make_app))
    # A page elsewhere rebinding its name to 127.0.0.1 (its Host names another site), and
    # a client on another machine (the dashboard mounted in a public app): both refused.
    rebound = TestClient(asgi, base_url="http://evil.example", client=("127.0.0.1", 50000))
    remote = TestClient(asgi, base_url="http://127.0.0.1:8700", client=("203.0.113.9", 50000))
    local = TestClient(asgi, base_url="http://localhost:8700", client=("::1", 50000))
    with rebound, remote, local:
        assert rebound.get("/").status_code == 401
        assert remote.get("/").status_code == 401
        assert rebound.post("/do/purge-dead", data={"confirm": "yes"}).status_code in (401, 403)
        assert local.get("/").status_code == 200


async def test_with_a_token_a_request_without_it_gets_401(
    make_app: Callable[..., App], serve: Serve
) -> None:
    client = serve(shop(make_app), token=TOKEN)
    for path in ("/", "/dead", "/dead/1-0", "/delayed", "/jobs?id=x"):
        page = client.get(path)
        assert page.status_code == 401, path
        assert page.headers["www-authenticate"].startswith("Bearer")
        assert 'action="/login"' in page.text  # a browser gets the login form
        assert "queue-name" not in page.text
    assert client.post("/do/purge-dead", data={}).status_code == 401
    assert client.get("/static/dashboard.css").status_code == 200  # no secrets in it


async def test_a_wrong_token_gets_401(make_app: Callable[..., App], serve: Serve) -> None:
    client = serve(shop(make_app), token=TOKEN)
    for header in (f"Bearer {TOKEN}x", "Bearer x", f"Basic {TOKEN}", TOKEN):
        assert client.get("/", headers={"Authorization": header}).status_code == 401, header
    client.cookies.set("lockgate_dashboard_login", "1.abc")
    assert client.get("/").status_code == 401
    login = client.get("/login")
    wrong = client.post("/login", data={"csrf": csrf_of(login), "token": "nope"})
    assert wrong.status_code == 401
    assert "wrong token" in wrong.text
    assert client.get("/").status_code == 401


async def test_the_bearer_header_or_the_login_cookie_lets_in(
    make_app: Callable[..., App], serve: Serve
) -> None:
    client = serve(shop(make_app), token=TOKEN)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert client.get("/", headers=bearer).status_code == 200
    login = client.get("/login")
    assert login.status_code == 200
    done = client.post(
        "/login", data={"csrf": csrf_of(login), "token": TOKEN}, follow_redirects=False
    )
    assert done.status_code == 303
    cookie = client.cookies["lockgate_dashboard_login"]
    assert TOKEN not in cookie
    set_cookie = done.headers["set-cookie"].lower()
    assert "httponly" in set_cookie and "samesite=strict" in set_cookie
    page = client.get("/")
    assert page.status_code == 200 and "Log out" in page.text
    assert TOKEN not in page.text
    client.get("/logout")
    assert client.get("/").status_code == 401


async def test_ten_wrong_tokens_hold_a_client_back_but_not_a_logged_in_browser(
    make_app: Callable[..., App], serve: Serve
) -> None:
    dashboard = create_app(shop(make_app), token=TOKEN)
    browser = serve(dashboard)
    login = browser.get("/login")
    logged_in = browser.post(
        "/login", data={"csrf": csrf_of(login), "token": TOKEN}, follow_redirects=False
    )
    assert logged_in.status_code == 303
    guesser = serve(dashboard)  # the same address
    for n in range(9):
        assert guesser.get("/", headers={"Authorization": f"Bearer guess-{n}"}).status_code == 401
    form = guesser.get("/")  # no token sent: the login page, nothing counted
    wrong = guesser.post("/login", data={"csrf": csrf_of(form), "token": "guess-9"})
    assert wrong.status_code == 401  # the tenth
    right = {"Authorization": f"Bearer {TOKEN}"}
    held = guesser.get("/", headers=right)  # the right token, not even checked
    assert held.status_code == 429, held.text
    assert 0 < int(held.headers["retry-after"]) <= 60
    assert "too many wrong tokens" in held.text
    refused = guesser.post("/login", data={"csrf": csrf_of(form), "token": TOKEN})
    assert refused.status_code == 429
    # Before the CSRF check too: a 403 against a 429 would tell a forged form's guess.
    assert guesser.post("/login", data={"csrf": "0" * 64, "token": TOKEN}).status_code == 429
    assert "lockgate_dashboard_login" not in refused.headers.get("set-cookie", "")
    assert guesser.get("/login", headers=right).status_code == 429
    assert browser.get("/").status_code == 200  # a session is not held back
    assert serve(dashboard, address="10.0.0.9").get("/", headers=right).status_code == 200


async def test_nothing_made_from_the_token_alone_passes_or_tests_a_guess(
    make_app: Callable[..., App], serve: Serve
) -> None:
    """The MAC key needs the namespace's secret in Redis as well as the token: a login
    page's CSRF token cannot be checked against guesses offline, and a cookie made from
    a guess is refused. Dashboards of one namespace share the secret (and the cookies)."""
    app = shop(make_app)
    client = serve(app, token=TOKEN)
    login = client.get("/login")
    session = client.cookies["lockgate_dashboard_csrf"]
    token_alone = derive_key(TOKEN)  # a key made of the token alone
    assert csrf_of(login) != csrf_token(token_alone, session)
    forged = serve(app, token=TOKEN)
    forged.cookies.set("lockgate_dashboard_login", login_cookie(token_alone, time.time()))
    assert forged.get("/").status_code == 401
    done = client.post("/login", data={"csrf": csrf_of(login), "token": TOKEN},
                       follow_redirects=False)  # fmt: skip
    assert done.status_code == 303
    cookie = client.cookies["lockgate_dashboard_login"]
    other_process = serve(app, token=TOKEN)
    other_process.cookies.set("lockgate_dashboard_login", cookie)
    assert other_process.get("/").status_code == 200
    elsewhere = make_app(namespace=f"{app.namespace}-elsewhere")
    try:
        other_namespace = serve(elsewhere, token=TOKEN)
        other_namespace.cookies.set("lockgate_dashboard_login", cookie)
        assert other_namespace.get("/").status_code == 401
    finally:
        elsewhere.client().delete(elsewhere.store.keys.dashboard_secret())


async def test_the_login_form_needs_its_csrf_token(
    make_app: Callable[..., App], serve: Serve
) -> None:
    client = serve(shop(make_app), token=TOKEN)
    client.get("/login")
    assert client.post("/login", data={"token": TOKEN}).status_code == 403
    assert client.get("/").status_code == 401


async def test_a_post_without_a_valid_csrf_token_gets_403(
    make_app: Callable[..., App], serve: Serve
) -> None:
    app = shop(make_app)
    await dead_lettered(app, "A1")
    client = serve(app)
    good = csrf_of(client.get("/"))
    assert client.post("/do/purge-dead", data={"confirm": "yes"}).status_code == 403
    bad = "0" * len(good)
    assert client.post("/do/purge-dead", data={"csrf": bad, "confirm": "yes"}).status_code == 403
    # A token of another browser (another CSRF cookie) does not fit this one's cookie.
    other = serve(app)
    theirs = csrf_of(other.get("/"))
    assert theirs != good
    assert client.post("/do/purge-dead", data={"csrf": theirs, "confirm": "yes"}).status_code == 403
    # The right token without its cookie.
    client.cookies.clear()
    assert client.post("/do/purge-dead", data={"csrf": good, "confirm": "yes"}).status_code == 403
    assert count_dead(app) == 1


async def test_every_action_asks_for_confirmation_first(
    make_app: Callable[..., App], serve: Serve
) -> None:
    app = shop(make_app)
    await dead_lettered(app, "A1", "A2")
    client = serve(app)
    asked = act(client, "purge-dead", confirm=False)
    assert asked.status_code == 200
    assert "Delete all 2 dead letters?" in html.unescape(asked.text)
    assert count_dead(app) == 2
    done = act(client, "purge-dead")
    assert done.status_code == 303
    assert count_dead(app) == 0
    page = client.get(done.headers["location"])
    assert "purged 2 dead letters" in page.text  # the flash, shown once
    assert "purged 2 dead letters" not in client.get("/dead").text


async def test_read_only_shows_no_buttons_and_refuses_every_post(
    make_app: Callable[..., App], serve: Serve
) -> None:
    app = shop(make_app)
    await dead_lettered(app, "A1")
    letter = list_dead(app)[0]
    app.tasks["charge"].enqueue("B1", job_id="charge-B1")
    client = serve(app, read_only=True)
    for path in ("/", "/dead", f"/dead/{letter.id}", "/delayed", "/jobs?id=charge-B1"):
        page = client.get(path)
        assert page.status_code == 200, path
        assert 'method="post"' not in page.text, path
        assert "data-action=" not in page.text, path
        assert "read-only" in page.text
    for action, fields in (
        ("replay", {"entry_id": letter.id}),
        ("purge-dead", {}),
        ("pause", {"queue": "mail"}),
        ("cancel", {"job_id": "charge-B1"}),
    ):
        refused = client.post(f"/do/{action}", data={"confirm": "yes", **fields})
        assert refused.status_code == 403, action
    assert count_dead(app) == 1
    assert app.job("charge-B1").status == "waiting"


async def test_read_only_with_a_token_still_lets_log_in(
    make_app: Callable[..., App], serve: Serve
) -> None:
    client = serve(shop(make_app), token=TOKEN, read_only=True)
    login = client.get("/login")
    assert client.post("/login", data={"csrf": csrf_of(login), "token": TOKEN}).status_code == 200
    assert client.post("/do/purge-dead", data={"csrf": csrf_of(login)}).status_code == 403


async def test_responses_forbid_framing_and_foreign_scripts(
    make_app: Callable[..., App], serve: Serve
) -> None:
    page = serve(shop(make_app)).get("/")
    assert page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"
    assert "<script src=" in page.text and "<script>" not in page.text


# data


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_overview_shows_the_counts(
    make_app: Callable[..., App], serve: Serve, backend: str
) -> None:
    app = shop(make_app, backend)
    await dead_lettered(app, "A1")
    charge = app.tasks["charge"]
    for n in range(3):
        charge.enqueue(f"C{n}", priority="critical")
    charge.enqueue("late", delay=300)
    page = serve(app).get("/").text
    level = "critical" if backend == "streams" else "*"
    assert cell(page, "waiting", "default", level) == 3
    assert cell(page, "delayed", "default", "normal" if backend == "streams" else "*") == 1
    assert cell(page, "dead", "mail", "low" if backend == "streams" else "*") == 1
    assert cell(page, "running", "default", level) == 0
    assert "<b>1</b> dead letters" in page
    assert "<b>1</b> delayed" in page
    assert "<svg" in page


async def test_the_overview_lists_the_busiest_fairness_keys(
    make_app: Callable[..., App], serve: Serve
) -> None:
    app = shop(make_app)

    @app.task(priority="low", key_by="tenant", key_concurrency=3)
    def export(tenant: str, n: int) -> None: ...

    assert 'id="keys"' not in serve(app).get("/").text  # no keyed job: no table
    app.enqueue_many([export.message(t, n) for t, jobs in (("acme", 5), ("<b>x", 2))
                      for n in range(jobs)])  # fmt: skip
    page = serve(app).get("/").text
    table = page.split('id="keys"', 1)[1].split("</table>", 1)[0]
    rows = table.split('class="key-row"')[1:]
    waiting = [re.findall(r'class="n waiting">(\d+)<', row) for row in rows]
    assert waiting == [["5"], ["2"]]
    assert "&lt;b&gt;x" in table and "<b>x" not in table  # a key is text, escaped


def row_of(page: str, queue: str, level: str) -> str:
    body = page.split(f'data-queue="{queue}"', 1)[1].split("</tbody>", 1)[0]
    return body.split(f'data-level="{level}"', 1)[1].split("</tr>", 1)[0]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_throughput_and_wait_times_show_once_jobs_ran(
    make_app: Callable[..., App], serve: Serve, backend: str
) -> None:
    app = shop(make_app, backend)
    for n in range(5):
        app.tasks["charge"].enqueue(f"C{n}")
    await dead_lettered(app, "A1")  # the worker runs the charges too, and flushes at its stop
    page = serve(app).get("/").text
    charges = row_of(page, "default", "normal" if backend == "streams" else "*")
    invoices = row_of(page, "mail", "low" if backend == "streams" else "*")
    done = re.search(r'class="n done-rate">([0-9.e-]+)<', charges)
    failed = re.search(r'class="n failed-rate">([0-9.e-]+)<', invoices)
    assert done and float(done.group(1)) > 0, charges
    assert failed and float(failed.group(1)) > 0, invoices
    assert "<svg" in charges and 'aria-label="wait p50 and p99' in charges
    idle = row_of(page, "default", "critical") if backend == "streams" else None
    assert idle is None or "<svg" not in idle  # no job started there: no chart
    summary = page.split('id="queues"', 1)[0]
    assert "<polyline" in summary or "<circle" in summary  # the jobs/s chart drew a point


async def test_live_workers_are_listed_and_a_stopped_one_disappears(
    make_app: Callable[..., App], serve: Serve
) -> None:
    app = shop(make_app)
    client = serve(app)
    assert 'id="no-workers"' in client.get("/").text
    worker = worker_for(app, concurrency=3)
    async with running(worker):
        await wait_until(lambda: f'data-name="{worker.name}"' in client.get("/").text)
        row = client.get("/").text.split(f'data-name="{worker.name}"', 1)[1].split("</tr>")[0]
        cells = re.findall(r"<td[^>]*>([^<]*)</td>", row)
        assert cells[1] == socket.gethostname()
        assert cells[2] == str(os.getpid())
        assert cells[3] == "mail, default"
        assert cells[4] == "3"
        assert cells[7].endswith(" ago")
        assert cells[8] == importlib.metadata.version("lockgate")
    page = client.get("/").text
    assert worker.name not in page
    assert 'id="no-workers"' in page


@pytest.mark.parametrize(
    ("backend", "partitions"), [*((backend, 1) for backend in BACKENDS), ("streams", 4)]
)
async def test_dead_letters_are_listed_shown_and_replayed_one_by_one(
    make_app: Callable[..., App], serve: Serve, backend: str, partitions: int
) -> None:
    app = shop(make_app, backend, partitions)
    await dead_lettered(app, "A1", "A2")
    client = serve(app)
    listing = client.get("/dead").text
    letters = {letter.job_id: letter for letter in list_dead(app)}
    assert all(f'data-job="{job_id}"' in listing for job_id in letters)
    assert "ValueError: no address for A1" in listing
    letter = letters["invoice-A1"]
    assert f'href="/dead/{letter.id}"' in listing  # '<partition>/<entry id>' when partitioned
    shown = client.get(f"/dead/{letter.id}").text
    assert "Traceback" in shown and "no address for A1" in shown
    assert client.get("/dead/99-0").status_code == 404
    asked = act(client, "replay", confirm=False, entry_id=letter.id)
    assert f"Replay dead letter {letter.id} (job invoice-A1" in asked.text
    done = act(client, "replay", entry_id=letter.id)
    assert done.status_code == 303 and done.headers["location"] == "/dead"
    assert [lt.job_id for lt in list_dead(app)] == ["invoice-A2"]
    assert app.job("invoice-A1").status == "waiting"
    assert "replayed 1 of 1 dead letters" in client.get("/dead").text
    assert act(client, "replay", entry_id="1-1").status_code == 400


async def test_a_replay_counts_only_the_letters_it_enqueued(
    make_app: Callable[..., App],
) -> None:
    """Letters another replay took meanwhile are counted apart, not as replayed here."""
    app = shop(make_app)
    await dead_lettered(app, "A1", "A2", "A3")
    letters = list_dead(app)  # the listing the button's action works from
    assert [r.outcome for r in replay(app, letters[:2])] == ["enqueued"] * 2  # someone else
    said = await actions._replayed(app, letters)
    assert said == "replayed 1 of 3 dead letters (2 gone: replayed or removed by someone else)"
    assert count_dead(app) == 0
    assert {app.job(f"invoice-{o}").status for o in ("A1", "A2", "A3")} == {"waiting"}


async def test_dead_letters_are_replayed_by_task_and_all_and_purged(
    make_app: Callable[..., App], serve: Serve
) -> None:
    app = shop(make_app)
    await dead_lettered(app, "A1", "A2")
    client = serve(app)
    assert "send_invoice (2)" in client.get("/dead").text
    assert act(client, "replay-task", task="charge").status_code == 303
    assert count_dead(app) == 2
    assert act(client, "replay-task", task="send_invoice").status_code == 303
    assert count_dead(app) == 0
    await worker_for(app, concurrency=2).run(burst=True)
    assert count_dead(app) == 2
    assert act(client, "replay-all").status_code == 303
    assert count_dead(app) == 0
    assert {app.job(f"invoice-{o}").status for o in ("A1", "A2")} == {"waiting"}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_delayed_jobs_are_listed(
    make_app: Callable[..., App], serve: Serve, backend: str
) -> None:
    app = shop(make_app, backend)
    client = serve(app)
    assert "No delayed jobs." in client.get("/delayed").text
    before = time.time()
    app.tasks["charge"].enqueue("later", delay=120, job_id="charge-later")
    app.tasks["send_invoice"].enqueue("sooner", delay=60, job_id="invoice-sooner")
    page = client.get("/delayed").text
    assert page.index('data-job="invoice-sooner"') < page.index('data-job="charge-later"')
    assert "mail/low" in page or "mail/*" in page
    due = time.strftime("%Y-%m-%d %H:%M", time.gmtime(before + 60))
    assert due in page or time.strftime("%Y-%m-%d %H:%M", time.gmtime(before + 61)) in page


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_job_is_looked_up_by_id(
    make_app: Callable[..., App], serve: Serve, backend: str
) -> None:
    app = shop(make_app, backend)
    await dead_lettered(app, "A1")
    app.tasks["charge"].enqueue("B1", job_id="charge-B1")
    client = serve(app)
    dead = client.get("/jobs", params={"id": "invoice-A1"}).text
    assert 'id="job-status">dead<' in dead
    assert "ValueError: no address for A1" in dead
    assert "send_invoice" in dead
    waiting = client.get("/jobs", params={"id": "charge-B1"}).text
    assert 'id="job-status">waiting<' in waiting
    assert 'data-action="cancel"' in waiting
    unknown = client.get("/jobs", params={"id": "<nobody>"}).text
    assert 'id="job-status">unknown<' in unknown
    assert "&lt;nobody&gt;" in unknown and "<nobody>" not in unknown
    done = act(client, "cancel", job_id="charge-B1")
    assert done.status_code == 303
    assert done.headers["location"] == "/jobs?id=charge-B1"
    assert app.job("charge-B1").status == "cancelled"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_queue_is_paused_resumed_and_purged(
    make_app: Callable[..., App], serve: Serve, backend: str
) -> None:
    app = shop(make_app, backend)
    client = serve(app)
    asked = act(client, "pause", confirm=False, queue="default")
    assert "Pause queue default?" in asked.text
    assert act(client, "pause", queue="default").status_code == 303
    assert await queues.paused(app) == {"default"}
    page = client.get("/").text
    head = page.split('data-queue="default"', 1)[1].split("</tr>", 1)[0]
    assert "paused" in head and 'data-action="resume"' in head
    assert "paused queue default" in page
    charge = app.tasks["charge"]
    for n in range(3):
        charge.enqueue(f"C{n}", job_id=f"charge-C{n}")  # a paused queue takes jobs
    charge.enqueue("C9", job_id="charge-C9", priority="critical")
    level = "critical" if backend == "streams" else "*"
    assert cell(client.get("/").text, "waiting", "default", level) == (1 if level != "*" else 4)
    if backend == "streams":
        asked = act(client, "purge-queue", confirm=False, queue="default", level="critical")
        assert "Delete the 1 waiting jobs of queue default, level critical?" in asked.text
        assert act(client, "purge-queue", queue="default", level="critical").status_code == 303
        assert app.job("charge-C9").status == "unknown"
        assert app.job("charge-C0").status == "waiting"
    asked = act(client, "purge-queue", confirm=False, queue="default")
    assert "waiting jobs of queue default?" in asked.text
    assert act(client, "purge-queue", queue="default").status_code == 303
    assert "purged" in client.get("/").text
    assert [app.job(f"charge-C{n}").status for n in range(3)] == ["unknown"] * 3
    assert act(client, "resume", queue="default").status_code == 303
    assert await queues.paused(app) == set()
    assert 'data-action="pause"' in client.get("/").text


async def test_an_unknown_action_or_queue_is_refused(
    make_app: Callable[..., App], serve: Serve
) -> None:
    client = serve(shop(make_app))
    assert act(client, "flush-all").status_code == 404
    assert act(client, "pause").status_code == 400  # no queue
    assert act(client, "pause", queue="nosuch").status_code == 400
    assert act(client, "purge-queue", queue="mail", level="urgent").status_code == 400


async def test_an_unreachable_redis_is_one_line_on_a_503(serve: Serve, namespace: str) -> None:
    app = App(redis_url="redis://127.0.0.1:1/0", namespace=namespace)
    try:
        page = serve(app).get("/")
        assert page.status_code == 503
        assert "ConnectionFailed" in page.text
    finally:
        app.close()


async def test_mounted_in_fastapi_links_and_cookies_stay_under_the_mount(
    make_app: Callable[..., App], serve: Serve
) -> None:
    app = shop(make_app)
    await dead_lettered(app, "A1")
    api = FastAPI()
    api.mount("/ops/jobs", create_app(app, token=TOKEN))
    client = serve(api)
    assert client.get("/ops/jobs/").status_code == 401
    login = client.get("/ops/jobs/login")
    assert 'action="/ops/jobs/login"' in login.text
    done = client.post(
        "/ops/jobs/login", data={"csrf": csrf_of(login), "token": TOKEN}, follow_redirects=False
    )
    assert done.headers["location"] == "/ops/jobs/"
    assert "path=/ops/jobs" in done.headers["set-cookie"].lower()
    page = client.get("/ops/jobs/dead")
    assert page.status_code == 200
    assert 'href="/ops/jobs/static/dashboard.css"' in page.text
    assert 'action="/ops/jobs/do/replay"' in page.text
    letter = list_dead(app)[0]
    first = client.post("/ops/jobs/do/replay", data={"csrf": csrf_of(page), "entry_id": letter.id})
    data = {"csrf": csrf_of(first), "entry_id": letter.id, "confirm": "yes"}
    replayed = client.post("/ops/jobs/do/replay", data=data, follow_redirects=False)
    assert replayed.headers["location"] == "/ops/jobs/dead"
    assert count_dead(app) == 0


# the command


def test_the_command_refuses_a_public_address_without_a_token() -> None:
    env = {k: v for k, v in os.environ.items() if k != "LOCKGATE_DASHBOARD_TOKEN"}
    done = subprocess.run(
        [sys.executable, "-m", "lockgate", "dashboard", "cli_app:app", "--host", "0.0.0.0"],
        capture_output=True, text=True, timeout=30, cwd=HERE, env=env,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: refusing"), done.stderr


def test_the_command_serves_and_never_logs_the_token(redis_url: str, namespace: str) -> None:
    port = free_port()
    env = {**os.environ, "LOCKGATE_DASHBOARD_TOKEN": TOKEN, "LOCKGATE_REDIS_URL": redis_url,
           "LOCKGATE_TEST_NAMESPACE": namespace}  # fmt: skip
    argv = [sys.executable, "-m", "lockgate", "dashboard", "cli_app:app", "--port", str(port)]
    with subprocess.Popen(
        argv, cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as server:
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
                deadline = time.monotonic() + 20
                while True:
                    try:
                        first = http.get(f"/?token={TOKEN}")
                        break
                    except httpx.TransportError:
                        assert server.poll() is None and time.monotonic() < deadline
                        time.sleep(0.05)
                assert first.status_code == 401  # the token is no query parameter
                ok = http.get("/", headers={"Authorization": f"Bearer {TOKEN}"})
                assert ok.status_code == 200
        finally:
            server.terminate()
            output, _ = server.communicate(timeout=20)
    assert f"127.0.0.1:{port}" in output
    assert '"GET /?token=*** HTTP/1.1" 401' in output
    assert TOKEN not in output


async def test_a_worker_runs_what_the_dashboard_replayed(
    make_app: Callable[..., App], serve: Serve
) -> None:
    app = shop(make_app)
    await dead_lettered(app, "A1")
    client = serve(app)
    assert act(client, "replay-all").status_code == 303
    worker: Worker = worker_for(app)
    async with running(worker):
        await wait_until(lambda: count_dead(app) == 1)  # it fails again, and dies again
    assert app.job("invoice-A1").attempts == 1


@pytest.mark.parametrize("missing", ["starlette", "jinja2", "uvicorn"])
def test_without_the_extra_the_command_is_one_line_naming_it(missing: str) -> None:
    # A core install, as the child interpreter sees it: the module cannot be imported.
    code = (
        f"import sys; sys.modules[{missing!r}] = None\n"
        "from lockgate.cli import main; main(['dashboard', 'cli_app:app'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=HERE
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: {'lockgate dashboard' if missing == 'uvicorn' else 'lockgate.dashboard'} "
        f"needs {missing}, which is not installed: pip install 'lockgate[dashboard]'"
    ]


def test_without_the_extra_the_import_names_it() -> None:
    code = (
        "import sys; sys.modules['starlette'] = None\n"
        "from lockgate import MissingExtra\n"
        "try:\n"
        "    from lockgate.dashboard import create_app\n"
        "except MissingExtra as e:\n"
        "    print(e.extra, e.missing)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["dashboard", "starlette"]
