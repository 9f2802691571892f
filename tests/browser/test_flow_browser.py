"""The dashboard's flow pages in a real browser: headless Chromium against a real uvicorn
server, with a real worker running a chord to its end and a flow whose member dies.

The chord's page lists its jobs and what its callback waits on; from the failed flow's
page a click on the dead job's letter shows why it died, and a click on a job leads to
its page, which links back to the flow. The screenshots of both flow pages are saved to
build/artifacts/flow-chord.png and build/artifacts/flow-failed.png; the copies the docs
may show are docs/images/flow-chord.png and docs/images/flow-failed.png (copy the
artifacts there to refresh them).

The server, the worker thread, the browser and the waits are those of
test_dashboard_browser.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from test_dashboard_browser import Server, WorkerThread, click, text_of, wait_for
from test_dashboard_browser import browser as browser  # the fixture, re-exported

from conftest import wait_until_sync
from lockgate import App, current_job, group

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "build" / "artifacts"
MEMBERS = 8


def pipeline(redis_url: str, namespace: str) -> App:
    """Thumbnails are made side by side, then an album of them; one photo is broken."""
    app = App(redis_url=redis_url, namespace=namespace)

    @app.task(retries=0)
    def thumbnail(photo: str) -> str:
        if photo.startswith("broken"):
            raise ValueError(f"cannot decode {photo}: not a JPEG")
        return f"thumbs/{photo}"

    @app.task
    def album(name: str) -> int:
        return len(current_job().parent_results())

    return app


def save(browser: WebDriver, name: str) -> None:
    path = ARTIFACTS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(path))
    assert path.stat().st_size > 10_000


def test_a_finished_chord_and_a_failed_flow_and_their_links(
    redis_url: str, namespace: str, browser: WebDriver
) -> None:
    app = pipeline(redis_url, namespace)
    thumbnail, album = app.tasks["thumbnail"], app.tasks["album"]
    server: Server | None = None
    worker: WorkerThread | None = None
    try:
        photos = [thumbnail.message(f"IMG_{n:04}.jpg") for n in range(MEMBERS)]
        app.enqueue_flow(group(*photos).then(album.message("summer")), flow_id="album-summer")
        broken = [thumbnail.message("IMG_0100.jpg"), thumbnail.message("broken-0101.jpg"),
                  thumbnail.message("IMG_0102.jpg")]  # fmt: skip
        app.enqueue_flow(group(*broken).then(album.message("winter")), flow_id="album-winter")
        worker = WorkerThread(app, queues=("default",))
        wait_until_sync(lambda: app.flow("album-summer").state == "done", message="chord done")
        wait_until_sync(lambda: app.flow("album-winter").state == "failed", message="failed")
        server = Server(app)

        browser.get(f"{server.url}/flows/album-summer")
        assert wait_for(browser, text_of("#flow-state"), "the flow's state") == "done"
        job_rows = browser.find_elements(By.CSS_SELECTOR, "tr.flow-job")
        assert len(job_rows) == MEMBERS + 1
        callback = f'tr[data-job="album-summer.{MEMBERS}"] td.waits-on'
        assert text_of(callback)(browser).endswith(f"+{MEMBERS - 6} more")
        save(browser, "flow-chord.png")

        # The lookup form in the navigation's page leads to the failed flow.
        browser.get(f"{server.url}/flows")
        field = wait_for(browser, lambda d: d.find_element(By.CSS_SELECTOR, "main input"), "form")
        field.send_keys("album-winter")
        click(browser, "main form button")
        assert wait_for(browser, text_of("#flow-state"), "the failed flow") == "failed"
        dead = 'tr[data-job="album-winter.1"]'
        assert text_of(f"{dead} .status")(browser) == "dead"
        assert text_of('tr[data-job="album-winter.3"] .status')(browser) == "waiting"
        assert not browser.find_elements(By.CSS_SELECTOR, 'tr[data-job="album-winter.3"] a')
        save(browser, "flow-failed.png")

        click(browser, f"{dead} td.letter-cell a")
        error = wait_for(browser, lambda d: "not a JPEG" in d.page_source, "the dead letter")
        assert error
        browser.back()
        click(browser, 'tr[data-job="album-winter.0"] td a')
        assert wait_for(browser, text_of("#job-status"), "the job's page") == "done"
        click(browser, "#job-flow")
        assert wait_for(browser, text_of("#flow-state"), "the flow again") == "failed"
        assert browser.current_url == f"{server.url}/flows/album-winter"
    finally:
        if worker is not None:
            worker.stop()
        if server is not None:
            server.stop()
        app.close()
