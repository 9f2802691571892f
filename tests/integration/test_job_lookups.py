"""The job page's own lookups: a dead job's letter among many around its end, a running
job's worker among many runs, and masking by the viewer's declaration (issue 28)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from types import ModuleType

import pytest
import redis
from cli_runs import cli_app_module, invoke
from test_dashboard import Serve
from test_dashboard import serve as serve  # the fixture, re-exported

from conftest import drain, running, wait_until, worker_for
from lockgate import App
from lockgate.backend import windows
from lockgate.core.masking import MASK
from lockgate.ops.deadletter import list_dead
from lockgate.ops.jobs import RUNNING_PAGE, job_page

BASE_MS = 1_700_000_000_000
SPEC = "secret_app:app"
CARD, EMAIL, DECLINED = "tok_4242_secret", "someone@example.com", "tok_9999_secret"


def letter(rclient: redis.Redis, dead: str, ms: int, job_id: str) -> str:
    entry = rclient.xadd(dead, {"job_id": job_id, "error": f"boom {job_id}"}, id=f"{ms}-*")
    return entry.decode() if isinstance(entry, bytes) else str(entry)


@pytest.mark.parametrize(
    ("ours_at", "ended_at", "others"),
    [
        (60_000, 60_000, range(0, 60_000, 200)),  # 300 letters in the 2 minutes before
        (60_000, 60_001, range(0, 60_000, 200)),  # its end stamped a little later
        (60_000, 65_000, range(60_000, 62_500, 10)),  # 250 after it: its worker's clock ahead
        (60_000, 55_000, range(55_000, 60_000, 20)),  # 250 before it: settled late
    ],
)
async def test_a_dead_letter_is_found_among_many_around_its_end(
    make_app: Callable[..., App], rclient: redis.Redis, ours_at: int, ended_at: int,
    others: range,
) -> None:  # fmt: skip
    app = make_app()
    dead = app.store.layout.parts[0].dead()
    ours = ""
    for ms in sorted([*others, ours_at]):
        if ms == ours_at and not ours:
            ours = letter(rclient, dead, BASE_MS + ms, "ours")
        else:
            letter(rclient, dead, BASE_MS + ms, f"other-{ms}")
    found = await windows.dead_letter_of(app.store, "ours", BASE_MS + ended_at)
    assert found is not None
    assert found[0] == ours and found[1]["error"] == "boom ours"
    assert await windows.dead_letter_of(app.store, "nobody", BASE_MS + ended_at) is None


@pytest.fixture
def viewer(redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """``secret_app``: an App that declares ``charge`` and ``refuse`` with secret_args."""
    with cli_app_module(redis_url, namespace, monkeypatch, "secret_app") as module:
        yield module


async def test_the_viewers_declaration_masks_jobs_enqueued_without_the_flag(
    make_app: Callable[..., App], viewer: ModuleType, serve: Serve
) -> None:
    producer = make_app()  # an older producer: its tasks lack secret_args

    @producer.task(keep_result=60)
    def charge(card: str, email: str) -> str:
        return f"charged {card} for {email}"

    @producer.task(retries=0)
    def refuse(card: str) -> None:
        raise ValueError("card declined")

    charge.enqueue(CARD, email=EMAIL, job_id="c1")
    refuse.enqueue(DECLINED, job_id="r1")
    client = serve(viewer.app)
    level = producer.default_priority
    for path in (f"/queues/default/{level}", "/jobs?id=c1", "/jobs?id=r1"):
        shown = client.get(path).text
        assert CARD not in shown and DECLINED not in shown and MASK in shown, path
    await drain(producer)
    assert producer.job("c1").result == f"charged {CARD} for {EMAIL}"
    (letter,) = list_dead(viewer.app)
    assert letter.secret and DECLINED not in letter.job and DECLINED in letter.stored
    for path in ("/dead", f"/dead/{letter.id}", "/jobs?id=c1", "/jobs?id=r1"):
        shown = client.get(path).text
        assert CARD not in shown and DECLINED not in shown, path
    fields = json.loads((await asyncio.to_thread(invoke, "job", SPEC, "c1", "--json")).stdout)
    assert fields["result"] == MASK
    listed = await asyncio.to_thread(invoke, "dlq", SPEC, "list", "--json")
    assert DECLINED not in listed.stdout and json.loads(listed.stdout)[0]["secret"] is True


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_a_running_jobs_page_finds_its_own_run_among_many(
    make_app: Callable[..., App], backend: str
) -> None:
    app = make_app(backend=backend)
    release, started = asyncio.Event(), []

    @app.task(queue="busy")
    async def hold(n: int) -> None:
        started.append(n)
        await release.wait()

    total = RUNNING_PAGE + 10
    app.enqueue_many([hold.message(n, job_id=f"h{n:03}") for n in range(total)])
    worker = worker_for(app, concurrency=total, queues=("busy",))
    try:
        async with running(worker):
            await wait_until(lambda: len(started) == total)
            pages = [await job_page(app, f"h{n:03}", time.time()) for n in range(total)]
            assert [page.info.status for page in pages] == ["running"] * total
            assert [page.running.worker if page.running else "" for page in pages] == [
                worker.name
            ] * total
            assert all(page.running and page.running.id == page.info.id for page in pages)
            release.set()
    finally:
        release.set()
