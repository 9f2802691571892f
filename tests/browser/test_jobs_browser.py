"""The dashboard's job pages in a real browser: headless Chromium against a real uvicorn
server, with a real worker running real jobs on the test's Redis.

A queue's waiting jobs page by page (a secret task's arguments masked, a keyed task's
lanes), the running jobs with their worker, progress and cancel button, a running job's
page, a dead job's page with its traceback and a link to its dead letter, the delayed
jobs with why each waits (a schedule, a rate-limited put-back), and the overview linking
to a queue's page. Each page's screenshot is saved to build/artifacts/ (jobs-*.png); the
copies the docs show are in docs/images/ (copy the artifacts there to refresh them).

The server, the worker thread, the browser and the waits are those of
test_dashboard_browser.py.
"""

from __future__ import annotations

import threading

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from test_dashboard_browser import Server, WorkerThread, click, text_of, wait_for
from test_dashboard_browser import browser as browser  # the fixture, re-exported
from test_flow_browser import save

from conftest import wait_until_sync
from lockgate import App, current_job
from lockgate.core.masking import MASK
from lockgate.ops.deadletter import count_dead

pytestmark = pytest.mark.browser


def shop(redis_url: str, namespace: str, release: threading.Event) -> App:
    """Invoices wait on a queue no worker serves; reports run until released, telling
    their progress; card charges are secret and rate limited; refunds fail."""
    app = App(redis_url=redis_url, namespace=namespace)

    @app.task(queue="mail", priority="low")
    def send_invoice(order: str, email: str, lines: list[str]) -> None:
        """Never runs here: no worker serves the mail queue."""

    @app.task(queue="mail", priority="low", key_by=lambda store, n: store)
    def sync_store(store: str, n: int) -> None:
        """Never runs here either: a keyed task, its jobs in their store's lane."""

    @app.task(queue="reports")
    def monthly_report(month: int) -> str:
        for page in range(1, 11):
            current_job().set_progress(page / 10, f"page {page} of 10")
            if page == 4 and not release.wait(60):
                raise TimeoutError("never released")
        return f"report-{month}.pdf"

    @app.task(queue="payments", secret_args=True, rate_limit="1/h")
    def charge(card_token: str, amount: int) -> None: ...

    @app.task(queue="payments", retries=0)
    def refund(order: str) -> None:
        raise ValueError(f"order {order} was never charged")

    return app


def test_every_job_page_with_a_real_worker(
    redis_url: str, namespace: str, browser: WebDriver
) -> None:
    release = threading.Event()
    app = shop(redis_url, namespace, release)
    server: Server | None = None
    worker: WorkerThread | None = None
    tasks = app.tasks
    try:
        for n in range(1, 61):
            lines = [f"item {i}: 2 x widget" for i in range(1, 4)]
            tasks["send_invoice"].enqueue(f"A{n:03}", f"buyer{n}@example.com", lines,
                                          job_id=f"invoice-A{n:03}")  # fmt: skip
        for store in ("berlin", "lisbon", "oslo"):
            for n in range(4):
                tasks["sync_store"].enqueue(store, n, job_id=f"sync-{store}-{n}")
        tasks["monthly_report"].enqueue(12, job_id="report-december")
        tasks["monthly_report"].enqueue(11, delay=3600, job_id="report-november")
        tasks["charge"].enqueue("tok_4242", 1999, job_id="charge-1")
        tasks["charge"].enqueue("tok_5555", 2999, job_id="charge-2")  # over the rate
        tasks["refund"].enqueue("B7", job_id="refund-B7")
        worker = WorkerThread(app, queues=("reports", "payments"))
        wait_until_sync(lambda: app.job("report-december").status == "running")
        wait_until_sync(lambda: count_dead(app) == 1, message="the refund dead-lettered")
        wait_until_sync(lambda: app.job("charge-2").status == "delayed", message="a put-back")
        server = Server(app)

        browser.get(f"{server.url}/")
        click(browser, 'tbody[data-queue="mail"] tr[data-level="low"] a.level-link')
        wait_for(browser, text_of("#waiting"), "the waiting jobs")
        rows = browser.find_elements(By.CSS_SELECTOR, "tr.waiting-job")
        assert len(rows) == 50
        assert rows[0].get_attribute("data-job") == "invoice-A001"
        lanes = browser.find_elements(By.CSS_SELECTOR, "tr.lane")
        assert sorted(lane.get_attribute("data-key") for lane in lanes) == [
            "berlin", "lisbon", "oslo",
        ]  # fmt: skip
        save(browser, "jobs-waiting.png")
        click(browser, "#next")
        wait_for(browser, lambda d: "invoice-A051" in text_of("#waiting")(d), "the next page")
        assert len(browser.find_elements(By.CSS_SELECTOR, "tr.waiting-job")) == 10

        browser.get(f"{server.url}/running")
        row = 'tr.running-job[data-job="report-december"]'
        wait_for(browser, lambda d: "40%" in text_of(f"{row} .progress-cell")(d), "40%")
        assert text_of(f"{row} .worker-cell")(browser) == worker.worker.name
        assert browser.find_elements(By.CSS_SELECTOR, f'{row} button[data-action="cancel"]')
        save(browser, "jobs-running.png")

        browser.get(f"{server.url}/jobs?id=report-december")
        assert wait_for(browser, text_of("#job-status"), "the status") == "running"
        assert text_of("#job-worker")(browser) == worker.worker.name
        assert text_of("#job-started")(browser) not in ("", "-")
        assert "page 4 of 10" in text_of("#job-progress")(browser)
        save(browser, "jobs-job-running.png")

        browser.get(f"{server.url}/jobs?id=refund-B7")
        assert wait_for(browser, text_of("#job-status"), "the status") == "dead"
        assert "order B7 was never charged" in text_of("#job-traceback")(browser)
        save(browser, "jobs-job-dead.png")
        click(browser, "#job-letter")
        wait_for(browser, lambda d: "Dead letter" in d.title, "the dead letter")

        browser.get(f"{server.url}/delayed")
        wait_for(browser, text_of('tr[data-job="charge-2"] .reason'), "the put-back")
        assert text_of('tr[data-job="charge-2"] .reason')(browser).startswith("rate limited")
        assert text_of('tr[data-job="report-november"] .reason')(browser) == "scheduled"
        save(browser, "jobs-delayed.png")

        browser.get(f"{server.url}/jobs?id=charge-2")
        assert wait_for(browser, text_of("#job-args"), "the arguments").startswith(
            f'["{MASK}","{MASK}"]'
        )
        assert "tok_5555" not in browser.page_source

        release.set()
        wait_until_sync(lambda: app.job("report-december").status == "done")
    finally:
        release.set()
        if worker is not None:
            worker.stop()
        if server is not None:
            server.stop()
        app.close()
