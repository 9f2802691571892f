"""The job page's own lookups: a dead job's letter among many around its end, a running
job's worker among many runs, and masking by the viewer's declaration (issue 28)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from lockgate import App
from lockgate.backend import windows

BASE_MS = 1_700_000_000_000


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
