"""How ``blocks.py`` reads pages: fragments, fences, includes (no server needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .blocks import DocsError, expand, includes, parse, script, traceback_on_page


def _page(root: Path, text: str, name: str = "docs/page.md") -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_python_blocks_run_in_order_and_fragments_do_not(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        "# T\n\n```python\nx = 1\n```\n\n<!-- fragment -->\n```sh\nlockgate worker\n```\n\n"
        "<!-- fragment -->\n```python\nnot run\n```\n\n```python\nprint(x)\n```\n",
    )
    blocks, problems = parse(expand(page, tmp_path))
    assert problems == []
    assert [(b.lang, b.fragment, b.opening.page_line) for b in blocks] == [
        ("python", False, 3),
        ("sh", True, 8),
        ("python", True, 13),
        ("python", False, 17),
    ]
    source, origins = script(blocks)
    assert source == "x = 1\n\nprint(x)\n"
    assert [o.page_line if o else None for o in origins] == [4, None, 18, None]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("```sh\nls\n```\n", ["docs/page.md:1: ```sh must be ```python"]),
        ("```\nplain\n```\n", ["docs/page.md:1: a fence without a language must be"]),
        (
            "<!-- fragment -->\n\n```text\nx\n```\n",
            ["docs/page.md:1: <!-- fragment --> must be the line", "docs/page.md:3: ```text"],
        ),
        ("<!-- fragment -->\ntext\n", ["docs/page.md:1: <!-- fragment --> must be the line"]),
        ("```python\nx = 1\n", ["docs/page.md:1: this fence is never closed"]),
        ("!!! note\n    ```toml\n    a = 1\n    ```\n", ["docs/page.md:2: ```toml must be"]),
    ],
)
def test_problems_name_page_and_line(tmp_path: Path, text: str, expected: list[str]) -> None:
    _, problems = parse(expand(_page(tmp_path, text), tmp_path))
    assert len(problems) == len(expected), problems
    for problem, start in zip(problems, expected, strict=True):
        assert problem.startswith(start), problem


def test_indented_fences_are_dedented_and_attribute_languages_read(tmp_path: Path) -> None:
    text = '- item\n\n    ``` { .python title="x" }\n    if True:\n        y = 2\n    ```\n'
    blocks, problems = parse(expand(_page(tmp_path, text), tmp_path))
    assert problems == []
    assert script(blocks)[0] == "if True:\n    y = 2\n"


def test_longer_fences_hold_shorter_ones(tmp_path: Path) -> None:
    text = "<!-- fragment -->\n````markdown\n```sh\nls\n```\n````\n"
    blocks, problems = parse(expand(_page(tmp_path, text), tmp_path))
    assert problems == [] and len(blocks) == 1 and len(blocks[0].body) == 3


def test_includes_are_expanded_where_the_build_expands_them(tmp_path: Path) -> None:
    _page(tmp_path, "a = 1\nprint(a)\n", "examples/demo.py")
    _page(tmp_path, "# Notes\n\n```console\n$ ls\n```\n", "NOTES.md")
    page = _page(
        tmp_path,
        '```python\n--8<-- "examples/demo.py"\n```\n\n--8<-- "NOTES.md"\n\n'
        ';--8<-- "not/included.py"\n',
    )
    lines = expand(page, tmp_path)
    blocks, problems = parse(lines)
    assert script(blocks)[0] == "a = 1\nprint(a)\n"
    # The included Markdown's own fence is checked, and named by both files.
    assert problems == [
        "docs/page.md:5 (NOTES.md:3): ```console must be ```python (run by tests/docs) or "
        "follow a <!-- fragment --> line (for reading only)"
    ]
    assert lines[-1].text == '--8<-- "not/included.py"'  # escaped: printed, not included
    assert includes(page, tmp_path) == ["NOTES.md", "examples/demo.py"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('--8<-- "missing.py"', "included file 'missing.py' does not exist"),
        ('--8<-- "demo.py:1:2"', "(line ranges and sections are not supported)"),
        ('--8<-- "../outside.py"', "is outside the repository"),
        ("--8<--", "write one `--8<--"),
    ],
)
def test_bad_includes_fail(tmp_path: Path, line: str, message: str) -> None:
    repo = tmp_path / "repo"
    _page(tmp_path, "x = 1\n", "outside.py")
    _page(repo, "x = 1\n", "demo.py")
    with pytest.raises(DocsError, match=r"^docs/page\.md:2: ") as failure:
        expand(_page(repo, f"# T\n{line}\n"), repo)
    assert message in str(failure.value)


def test_tracebacks_point_at_the_page(tmp_path: Path) -> None:
    blocks, _ = parse(expand(_page(tmp_path, "text\n\n```python\nx = 1\nraise X\n```\n"), tmp_path))
    _, origins = script(blocks)
    stderr = 'Traceback:\n  File "/tmp/s.py", line 2, in <module>\n'
    assert traceback_on_page(stderr, "/tmp/s.py", origins) == (
        'Traceback:\n  File "/tmp/s.py", line 2 (docs/page.md:5), in <module>\n'
    )
