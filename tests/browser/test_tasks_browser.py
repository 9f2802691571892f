"""The task pages in headless Chromium (see test_dashboard_browser.py for the set-up): a
real worker ends jobs done, retried and dead; ``/tasks`` shows each task's figures and
last error, a click on a task's dead count opens its recent ends filtered to dead, and a
click on an end opens its job's page. Screenshots of both pages are saved to
build/artifacts/tasks.png and task.png (docs/images/ has the copies the docs show)."""

from __future__ import annotations

from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from test_dashboard_browser import Server, WorkerThread, click, text_of, wait_for
from test_dashboard_browser import browser as browser  # the fixture, re-exported

from conftest import wait_until_sync
from lockgate import App, current_job

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "artifacts"


def shop(redis_url: str, namespace: str) -> App:
    """Charges succeed, invoices fail on their first attempt, e-mails to nobody die."""
    app = App(redis_url=redis_url, namespace=namespace)

    @app.task(queue="default")
    def charge(order: str) -> str:
        return order

    @app.task(queue="mail", retries=2, backoff=0.05)
    def send_invoice(order: str) -> None:
        if current_job().attempt == 1:
            raise ConnectionError(f"SMTP server busy, invoice {order} not sent")

    @app.task(queue="mail", retries=0)
    def send_receipt(to: str) -> None:
        raise ValueError(f"no e-mail address on file for customer {to}")

    return app


def test_the_task_table_and_a_tasks_recent_ends_by_clicking(
    redis_url: str, namespace: str, browser: WebDriver
) -> None:
    app = shop(redis_url, namespace)
    server: Server | None = None
    worker: WorkerThread | None = None
    try:
        worker = WorkerThread(app, queues=("default", "mail"))
        for n in range(40):
            app.tasks["charge"].enqueue(f"C{n}")
        for n in range(6):
            app.tasks["send_invoice"].enqueue(f"I{n}", job_id=f"invoice-I{n}")
        for name in ("ada", "bob", "cy"):
            app.tasks["send_receipt"].enqueue(name, job_id=f"receipt-{name}")
        wait_until_sync(
            lambda: (
                all(app.job(f"invoice-I{n}").status == "done" for n in range(6))
                and app.job("receipt-cy").status == "dead"
            ),
            message="the invoices done, the receipts dead",
        )
        server = Server(app)

        browser.get(f"{server.url}/tasks")
        row = 'tr.task-row[data-task="{}"]'
        wait_for(browser, text_of(row.format("charge")), "the charges' row")
        assert text_of(row.format("charge") + " td.done-rate")(browser) not in ("", "0")
        assert text_of(row.format("send_receipt") + " td.failed-rate")(browser) != "0"
        last = text_of(row.format("send_receipt") + " td.last-error")(browser)
        assert "ValueError: no e-mail address on file for customer" in last
        invoices = text_of(row.format("send_invoice") + " td.last-error")(browser)
        assert "ConnectionError: SMTP server busy" in invoices
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(ARTIFACTS / "tasks.png"))

        click(browser, row.format("send_invoice") + ' a[href$="outcome=retried"]')
        wait_for(browser, text_of("tr.end"), "the invoices' retried ends")
        ends = browser.find_elements(By.CSS_SELECTOR, "tr.end")
        assert len(ends) == 6
        assert {e.get_attribute("data-outcome") for e in ends} == {"retried"}
        browser.get(f"{server.url}/tasks/send_invoice")
        wait_for(browser, text_of("tr.end"), "every invoice end")
        found = browser.find_elements(By.CSS_SELECTOR, "tr.end")
        outcomes = [e.get_attribute("data-outcome") for e in found]
        assert sorted(outcomes) == ["done"] * 6 + ["retried"] * 6
        assert browser.save_screenshot(str(ARTIFACTS / "task.png"))

        click(browser, 'tr.end[data-job="invoice-I3"] a')
        assert wait_for(browser, text_of("#job-status"), "the job's status") == "done"
        for name in ("tasks.png", "task.png"):
            assert (ARTIFACTS / name).stat().st_size > 10_000
    finally:
        if worker is not None:
            worker.stop()
        if server is not None:
            server.stop()
        app.close()
