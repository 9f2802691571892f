"""Every code block in the docs runs, or is marked as a fragment (see ``blocks.py``).

One test per page: its fences are checked, then its python blocks run in order as one
script in a fresh interpreter, from the repository root, against the private server
(``$LOCKGATE_REDIS_URL``) and PostgreSQL (``$DATABASE_URL``). One test per Python file a
page includes: it runs on its own. A failure names the page and line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .blocks import DocsError, expand, includes, parse, relative, script, traceback_on_page
from .conftest import ROOT, DocsRun

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))


def _included_scripts() -> list[str]:
    found: set[str] = set()
    for page in PAGES:
        try:
            found.update(path for path in includes(page, ROOT) if path.endswith(".py"))
        except DocsError:
            continue  # test_page reports it
    return sorted(found)


def test_pages_found() -> None:
    assert len(PAGES) > 1, f"no pages under {DOCS}"


@pytest.mark.parametrize("page", PAGES, ids=[relative(p, DOCS) for p in PAGES])
def test_page(page: Path, docs_run: DocsRun, tmp_path: Path) -> None:
    try:
        lines = expand(page, ROOT)
    except DocsError as e:
        pytest.fail(str(e), pytrace=False)
    blocks, problems = parse(lines)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
    source, origins = script(blocks)
    if not source.strip():
        return  # nothing to run: prose, fragments, directives
    path = tmp_path / f"{page.stem}_blocks.py"
    path.write_text(source, encoding="utf-8")
    result = docs_run.run([str(path)])
    if result.returncode != 0:
        name = relative(page, ROOT)
        stderr = traceback_on_page(result.stderr, str(path), origins)
        pytest.fail(
            f"the python blocks of {name} exited {result.returncode}\n"
            f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{stderr}",
            pytrace=False,
        )


@pytest.mark.parametrize("included", _included_scripts())
def test_included_script_runs(included: str, docs_run: DocsRun) -> None:
    """A script shown by ``--8<--`` runs on its own (``python -m`` for a module)."""
    module = included.removesuffix(".py").replace("/", ".")
    is_module = (ROOT / included).parent.joinpath("__init__.py").exists()
    result = docs_run.run(["-m", module] if is_module else [included])
    assert result.returncode == 0, (
        f"{included} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    )
