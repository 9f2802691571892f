"""Pressing the dashboard's buttons through Starlette's TestClient, as a browser would."""

from __future__ import annotations

import re

import httpx
from starlette.testclient import TestClient

CSRF = re.compile(r'name="csrf" value="([0-9a-f]+)"')


def csrf_of(page: httpx.Response) -> str:
    found = CSRF.search(page.text)
    assert found, page.text
    return found.group(1)


def act(client: TestClient, action: str, *, confirm: bool = True, **fields: str) -> httpx.Response:
    """Press a button: the POST with the page's CSRF token, then (``confirm``) the
    confirmation page's own POST. Returns the last response (not following redirects)."""
    token = csrf_of(client.get("/"))
    first = client.post(f"/do/{action}", data={"csrf": token, **fields}, follow_redirects=False)
    if not confirm or first.status_code != 200:
        return first
    assert 'name="confirm" value="yes"' in first.text
    data = {"csrf": csrf_of(first), "confirm": "yes", **fields}
    return client.post(f"/do/{action}", data=data, follow_redirects=False)
