"""Every script in examples/ runs as the docs say (``python -m examples.NAME``) and
prints what it promises: one effect per order, however often the job ran."""

from __future__ import annotations

import pytest

from docs.conftest import ROOT, DocsRun

# The last line each example prints: the once-only effect it demonstrates.
EXPECTED = {
    "payment": "order A1: 1 payment(s)",
    "email": "outbox: ['order A1 confirmed']",
    "otp": "codes sent to: ['u1', 'u2']",
    "view_counter": "article A1: 4 views",
    "complete_order": "side effects: ['db', 'email', 'inventory']",
    # A refused payment rolled back with its enqueue_on_commit: no row, no job, no charge.
    "fastapi_app": "payment charged 1 time(s); refused payments stored: 0",
    "django_app": "order A1: 1 charge(s); refused order B2: 0 row(s)",  # a package
}


def test_every_example_is_checked_here_or_by_its_page() -> None:
    found = {p.stem for p in (ROOT / "examples").glob("*.py") if p.stem != "__init__"}
    found |= {p.parent.name for p in (ROOT / "examples").glob("*/__main__.py")}
    assert found == {*EXPECTED, "quickstart"}  # quickstart: tests/docs/test_quickstart.py


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_and_has_its_effect_once(name: str, docs_run: DocsRun) -> None:
    result = docs_run.run(["-m", f"examples.{name}"])
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert result.stdout.strip().splitlines()[-1] == EXPECTED[name]
