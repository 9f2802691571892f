"""The dashboard in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, ``make browser``) driven by Selenium against a real uvicorn server,
with a real worker running real jobs on the test's Redis.

The overview shows the counts and the worker, and refreshes itself; a dead letter is
replayed by clicking (the button, then the confirmation) and the worker runs it. The
overview's screenshot is saved to build/artifacts/dashboard.png; the copy docs/operations.md
shows is docs/images/dashboard.png (copy the artifact there to refresh it).

Waits are explicit (WebDriverWait on what the page shows), never sleeps: the page's live
refresh may swap an element between finding and clicking it, so clicks are retried on a
stale element.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from selenium import webdriver
from selenium.common.exceptions import (
    ElementClickInterceptedException,
    StaleElementReferenceException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from conftest import WAIT_TIMEOUT, wait_until_sync
from lockgate import App, Worker, WorkerConfig, current_job
from lockgate.dashboard import create_app
from lockgate.ops.deadletter import count_dead

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
ARTIFACT = ROOT / "build" / "artifacts" / "dashboard.png"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
BROWSER_WAIT = 15.0  # loose: a bound against hangs on a busy machine, not a timing goal


def shop(redis_url: str, namespace: str) -> App:
    """The app of the test: invoices fail until they are "fixed", charges succeed, and
    reports wait on a queue no worker serves (counts that stay put)."""
    app = App(redis_url=redis_url, namespace=namespace)

    def fixed() -> bool:
        return bool(app.client().exists(f"{app.keys.prefix}:test:fixed"))

    @app.task(queue="mail", priority="low", keep_result=60, dead_on=(ValueError,))
    def send_invoice(order: str) -> str:
        if not fixed():
            raise ValueError(f"no address for {order}")
        return current_job().job_id

    @app.task(queue="default", priority="critical")
    def charge(order: str) -> str:
        return order

    @app.task(queue="reports", priority="low")
    def monthly_report(month: int) -> None:
        """Never runs here: no worker serves the reports queue."""

    return app


class WorkerThread:
    """A worker on its own event loop in a thread (the test's Selenium calls block)."""

    def __init__(self, app: App, queues: tuple[str, ...]) -> None:
        self.app = app
        self.worker = Worker(app, WorkerConfig(concurrency=2, idle_wait=0.5, queues=queues))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="worker", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            try:
                await self.worker.run()
            finally:
                await self.app.aclose()

        try:
            asyncio.run(main())
        except BaseException as e:  # reported by stop()
            self._error = e

    def stop(self) -> None:
        wait_until_sync(lambda: self._loop is not None or not self._thread.is_alive())
        if self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self.worker.request_stop)
        self._thread.join(WAIT_TIMEOUT)
        assert not self._thread.is_alive(), "the worker did not stop"
        if self._error is not None:
            raise self._error


class Server:
    """The dashboard on a real uvicorn server, on a free port, in a thread."""

    def __init__(self, app: App, **options: Any) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        config = uvicorn.Config(create_app(app, **options), log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )
        self._thread.start()
        wait_until_sync(
            lambda: self._server.started or not self._thread.is_alive(), message="uvicorn up"
        )
        assert self._server.started, "uvicorn did not start"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(WAIT_TIMEOUT)
        self._socket.close()
        assert not self._thread.is_alive(), "uvicorn did not stop"


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    """Headless Chromium through Debian's chromedriver (never a downloaded one)."""
    if not CHROMEDRIVER.exists():
        pytest.fail(f"{CHROMEDRIVER} is missing: run `make browser`", pytrace=False)
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1360,1100", "--hide-scrollbars"):  # fmt: skip
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(BROWSER_WAIT)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver: WebDriver, condition: Callable[[WebDriver], Any], what: str) -> Any:
    return WebDriverWait(
        driver, BROWSER_WAIT, ignored_exceptions=(StaleElementReferenceException,)
    ).until(condition, message=f"waiting for {what}")


def text_of(css: str) -> Callable[[WebDriver], str]:
    def read(driver: WebDriver) -> str:
        found = driver.find_elements(By.CSS_SELECTOR, css)
        return found[0].text if found else ""

    return read


def click(driver: WebDriver, css: str) -> None:
    """Click the element ``css`` names, again if the live refresh swapped it meanwhile."""

    def attempt(d: WebDriver) -> bool:
        try:
            d.find_element(By.CSS_SELECTOR, css).click()
        except (StaleElementReferenceException, ElementClickInterceptedException):
            return False
        return True

    wait_for(driver, attempt, f"a click on {css}")


def waiting_cell(queue: str, level: str) -> str:
    return f'tbody[data-queue="{queue}"] tr[data-level="{level}"] td.waiting'


def test_the_overview_counts_and_replaying_a_dead_letter_by_clicking(
    redis_url: str, namespace: str, browser: WebDriver
) -> None:
    app = shop(redis_url, namespace)
    server: Server | None = None
    worker: WorkerThread | None = None
    try:
        for month in range(1, 5):
            app.tasks["monthly_report"].enqueue(month)
        app.tasks["monthly_report"].enqueue(12, delay=3600)
        for order in ("A1", "A2", "A3"):
            app.tasks["send_invoice"].enqueue(order, job_id=f"invoice-{order}")
        worker = WorkerThread(app, queues=("default", "mail"))
        for n in range(20):
            app.tasks["charge"].enqueue(f"C{n}")
        wait_until_sync(lambda: count_dead(app) == 3, message="three dead letters")
        server = Server(app)

        browser.get(f"{server.url}/")
        wait_for(browser, lambda d: text_of(waiting_cell("reports", "low"))(d) == "4", "4 reports")
        assert text_of("#dead-total b")(browser) == "3"
        assert text_of("#delayed-total b")(browser) == "1"
        assert text_of('tbody[data-queue="mail"] tr[data-level="low"] td.dead')(browser) == "3"
        worker_row = f'tr.worker[data-name="{worker.worker.name}"]'
        wait_for(browser, text_of(worker_row), "the worker's row")
        assert text_of("#worker-total b")(browser) == "1"
        # The live refresh (live.js, allowed by the page's CSP) shows a new job unasked.
        app.tasks["monthly_report"].enqueue(5)
        wait_for(browser, lambda d: text_of(waiting_cell("reports", "low"))(d) == "5", "a refresh")

        browser.get(f"{server.url}/dead")
        wait_for(browser, text_of("#dead-count"), "the dead-letter count")
        assert text_of("#dead-count")(browser) == "3"
        app.client().set(f"{app.keys.prefix}:test:fixed", "1")  # the fix is deployed
        click(browser, 'tr[data-job="invoice-A2"] button[data-action="replay"]')
        question = wait_for(browser, text_of(".confirm .question"), "the confirmation")
        assert "invoice-A2" in question
        click(browser, "#confirm")
        flash = wait_for(browser, text_of("#flash"), "the replay's message")
        assert flash == "replayed 1 of 1 dead letters"
        wait_until_sync(lambda: app.job("invoice-A2").status == "done", message="A2 done")
        wait_for(browser, lambda d: text_of("#dead-count")(d) == "2", "2 dead letters left")
        assert not browser.find_elements(By.CSS_SELECTOR, 'tr[data-job="invoice-A2"]')

        browser.get(f"{server.url}/jobs?id=invoice-A2")
        assert wait_for(browser, text_of("#job-status"), "the job's status") == "done"

        browser.get(f"{server.url}/")
        wait_for(browser, lambda d: text_of("#dead-total b")(d) == "2", "the overview")
        # The worker sends its counts every 2 s; the page refreshes itself every 5 s.
        charges = 'tbody[data-queue="default"] tr[data-level="critical"] td.done-rate'
        wait_for(browser, lambda d: text_of(charges)(d) not in ("", "0"), "the charges' rate")
        ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(ARTIFACT))
        assert ARTIFACT.stat().st_size > 10_000
    finally:
        if worker is not None:
            worker.stop()
        if server is not None:
            server.stop()
        app.close()
