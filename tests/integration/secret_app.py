"""The app of the secret_args tests (test_secret_args.py), for the CLI to import:
``LOCKGATE_REDIS_URL`` picks the server and ``LOCKGATE_TEST_NAMESPACE`` the namespace."""

from __future__ import annotations

import os

from lockgate import App, current_job

app = App(namespace=os.environ.get("LOCKGATE_TEST_NAMESPACE", "secret-test"))


@app.task(secret_args=True, keep_result=60)
def charge(card: str, email: str) -> str:
    """Returns what it was given: the test sees the real arguments arrived."""
    current_job().set_progress(0.5, "half")
    return f"charged {card} for {email}"


@app.task(secret_args=True, retries=0)
def refuse(card: str) -> None:
    """Dies at once (its error names no argument)."""
    raise ValueError("card declined")


@app.task(keep_result=60)
def plain(card: str) -> str:
    """Not secret: shown as it is."""
    return card
