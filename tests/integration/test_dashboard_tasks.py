"""The dashboard's task pages (Starlette's TestClient against real Redis and a real
worker): ``/tasks`` the per-task table, ``/tasks/{name}`` a task's recent ends with the
outcome filter, each end linking to its job's page; read-only mode and a token as well."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("starlette")

from test_dashboard import Serve
from test_dashboard import serve as serve  # the fixture, re-exported

from conftest import drain
from lockgate import App

TOKEN = "t" * 32


async def ended(make_app: Callable[..., App], **options: Any) -> App:
    """An app whose worker ended 3 charges done, one flaky invoice retried then done, and
    one mail dead."""
    app = make_app(**options)
    tries: dict[str, int] = {}

    @app.task(name="charge")
    def charge(order: str) -> str:
        return order

    @app.task(name="invoice", retries=1, backoff=0.01)
    def invoice(order: str) -> None:
        tries[order] = tries.get(order, 0) + 1
        if tries[order] == 1:
            raise ConnectionError(f"printer <offline> for {order}")

    @app.task(name="mail", retries=0)
    def mail(to: str) -> None:
        raise ValueError(f"no address for {to}")

    @app.task(name="idle")
    def idle() -> None: ...

    for n in range(3):
        charge.enqueue(f"o{n}", job_id=f"charge-{n}")
    invoice.enqueue("o9", job_id="invoice-9")
    mail.enqueue("bob", job_id="mail-bob")
    await drain(app)
    return app


def row_of(page: str, task: str) -> str:
    return page.split(f'data-task="{task}"', 1)[1].split("</tr>", 1)[0]


def ends_on(page: str) -> list[tuple[str, str]]:
    return re.findall(r'class="end" data-job="([^"]+)" data-outcome="([^"]+)"', page)


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_the_task_table_lists_every_task_with_its_figures(
    make_app: Callable[..., App], serve: Serve, backend: str
) -> None:
    client = serve(await ended(make_app, backend=backend))
    response = client.get("/tasks")
    assert response.status_code == 200
    page = response.text
    assert 'href="/tasks"' in page  # the nav links the page
    assert re.findall(r'data-task="([^"]+)"', page) == ["charge", "idle", "invoice", "mail"]
    charge = row_of(page, "charge")
    assert 'href="/tasks/charge?outcome=done">3<' in charge
    assert re.search(r'class="n done-rate">[0-9.]+<', charge)
    assert 'class="n failed-rate">0<' in charge
    assert re.search(r'class="n p50">\d+ ms<', charge)
    mail = row_of(page, "mail")
    assert 'href="/tasks/mail?outcome=dead">1<' in mail
    assert "ValueError: no address for bob" in html.unescape(mail)
    invoice = row_of(page, "invoice")
    assert 'href="/tasks/invoice?outcome=retried">1<' in invoice
    # The error's text is escaped, never markup.
    assert "printer &lt;offline&gt; for o9" in invoice
    idle = row_of(page, "idle")  # declared, never ended
    assert 'class="n done-rate">0<' in idle and 'class="n p50">-<' in idle


async def test_a_tasks_page_lists_its_ends_and_filters_them_by_outcome(
    make_app: Callable[..., App], serve: Serve
) -> None:
    client = serve(await ended(make_app))
    page = client.get("/tasks/invoice").text
    assert sorted(ends_on(page)) == [("invoice-9", "done"), ("invoice-9", "retried")]
    assert ends_on(page)[0] == ("invoice-9", "done")  # newest first
    assert 'href="/jobs?id=invoice-9"' in page
    retried = client.get("/tasks/invoice?outcome=retried").text
    assert ends_on(retried) == [("invoice-9", "retried")]
    assert "ConnectionError: printer &lt;offline&gt; for o9" in retried
    assert ends_on(client.get("/tasks/invoice?outcome=dead").text) == []
    assert 'id="no-ends"' in client.get("/tasks/invoice?outcome=dead").text
    charges = client.get("/tasks/charge?outcome=done").text
    assert sorted(ends_on(charges)) == [(f"charge-{n}", "done") for n in range(3)]


async def test_an_unknown_task_or_outcome_is_a_404(
    make_app: Callable[..., App], serve: Serve
) -> None:
    client = serve(await ended(make_app))
    assert client.get("/tasks/nobody").status_code == 404
    missing = client.get("/tasks/charge?outcome=lost")
    assert missing.status_code == 404 and "no outcome" in missing.text
    assert client.get("/tasks/idle").status_code == 200  # declared: an empty page


async def test_the_task_pages_work_read_only_and_behind_a_token(
    make_app: Callable[..., App], serve: Serve
) -> None:
    app = await ended(make_app)
    read_only = serve(app, read_only=True)
    assert read_only.get("/tasks").status_code == 200
    assert ends_on(read_only.get("/tasks/mail").text) == [("mail-bob", "dead")]
    guarded = serve(app, token=TOKEN)
    assert guarded.get("/tasks").status_code == 401
    assert guarded.get("/tasks/mail").status_code == 401
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert guarded.get("/tasks/mail", headers=bearer).status_code == 200


async def test_an_empty_namespace_has_an_empty_table(
    make_app: Callable[..., App], serve: Serve
) -> None:
    page = serve(make_app()).get("/tasks")
    assert page.status_code == 200 and 'id="no-tasks"' in page.text
