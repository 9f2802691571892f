"""The code blocks of the docs' Markdown, read the way the site build reads them.

The conventions every page under ``docs/`` follows (``test_code_blocks.py`` enforces them):

- A fence on the line right after ``<!-- fragment -->`` (no blank line between) is for
  reading only and is not run.
- Every other fence is a ``python`` block. A page's python blocks run in order, as one
  script, in a fresh interpreter.
- ``--8<-- "path"`` (pymdownx.snippets, paths relative to the repository root) includes a
  whole file. It is expanded here as the build expands it, so the fences of an included
  Markdown file are checked too, and a script included in an unmarked block runs as part
  of its page. A Python file included anywhere is also run on its own.

Pure functions: nothing here runs code or touches a server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FRAGMENT = "<!-- fragment -->"
MAX_INCLUDE_DEPTH = 4

# pymdownx.snippets' own patterns: one file per line, or the multi-line block form.
_SNIPPET = re.compile(
    r"""^(?P<space>[ \t]*)(?P<escape>;*)
    (?:(?P<inline>-+8<-+[ \t]+)(?P<quoted>"(?:\\"|[^"\n\r])+?"|'(?:\\'|[^'\n\r])+?')(?![ \t])
      |(?P<block>-+8<-+)(?![ \t]))$""",
    re.VERBOSE,
)
_OPENING = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


class DocsError(Exception):
    """A page breaks a docs convention, or includes what cannot be read."""


@dataclass(frozen=True)
class Line:
    """One line of a page after its includes are expanded.

    Attributes:
        text: the line, without its newline.
        page: the page (repo-relative) the line ends up in.
        page_line: its line number in the page (for an included line: the include's).
        source: the file the line comes from (the page itself, or an included file).
        number: its line number in ``source``.
    """

    text: str
    page: str
    page_line: int
    source: str
    number: int

    @property
    def where(self) -> str:
        """``page:line``, plus the included file's ``path:line`` when it comes from one."""
        here = f"{self.page}:{self.page_line}"
        return here if self.source == self.page else f"{here} ({self.source}:{self.number})"


@dataclass(frozen=True)
class Block:
    """A fenced code block.

    Attributes:
        lang: the fence's language (``""`` when it names none).
        fragment: marked ``<!-- fragment -->``: not run.
        opening: the line of the opening fence.
        body: the lines between the fences, with the fence's indentation removed.
    """

    lang: str
    fragment: bool
    opening: Line
    body: tuple[Line, ...]

    @property
    def runnable(self) -> bool:
        """Run as part of its page's script."""
        return not self.fragment and self.lang == "python"


def relative(path: Path, root: Path) -> str:
    """``path`` relative to ``root``, as the messages print it."""
    return path.resolve().relative_to(root.resolve()).as_posix()


def expand(page: Path, root: Path) -> list[Line]:
    """The page's lines with every ``--8<--`` include replaced by the file's lines.

    Raises:
        DocsError: an included file is missing, outside the repository, or included with
            a form the build would read differently here (line ranges, sections, the
            multi-line block form), or includes nest too deep.
    """
    name = relative(page, root)
    return _expand(page, root, name, None, "", 0)


def _expand(
    path: Path, root: Path, page: str, at: int | None, space: str, depth: int
) -> list[Line]:
    source = relative(path, root)
    lines: list[Line] = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        page_line = number if at is None else at
        match = _SNIPPET.match(text)
        if match is None:
            lines.append(Line(space + text if text else text, page, page_line, source, number))
            continue
        where = Line(text, page, page_line, source, number).where
        if match["escape"]:  # ';--8<--' is printed as '--8<--', not included
            unescaped = match["space"] + match["escape"][1:] + text[match.end("escape") :]
            lines.append(Line(space + unescaped, page, page_line, source, number))
            continue
        if match["block"]:
            raise DocsError(f'{where}: write one `--8<-- "path"` line per included file')
        target = match["quoted"][1:-1]
        included = (root / target).resolve()
        if not included.is_relative_to(root.resolve()):
            raise DocsError(f"{where}: {target!r} is outside the repository")
        if not included.is_file():
            hint = " (line ranges and sections are not supported)" if ":" in target else ""
            raise DocsError(f"{where}: included file {target!r} does not exist{hint}")
        if depth >= MAX_INCLUDE_DEPTH:
            raise DocsError(f"{where}: includes nest deeper than {MAX_INCLUDE_DEPTH}")
        lines += _expand(included, root, page, page_line, space + match["space"], depth + 1)
    return lines


def includes(page: Path, root: Path) -> list[str]:
    """Repo-relative paths of the files the page includes, directly or through another."""
    return sorted({line.source for line in expand(page, root)} - {relative(page, root)})


def _language(info: str) -> str:
    info = info.strip()
    if info.startswith("{"):  # attribute form: ``` { .python title="x" }
        classes = re.findall(r"\.([\w+-]+)", info)
        return classes[0] if classes else ""
    return info.split()[0] if info else ""


def _closes(text: str, fence: str) -> bool:
    stripped = text.strip()
    return len(stripped) >= len(fence) and set(stripped) == {fence[0]}


def parse(lines: list[Line]) -> tuple[list[Block], list[str]]:
    """The fenced blocks of an expanded page, and the problems found in it.

    Problems: a fence that is not ``python`` and not marked as a fragment, a fragment
    marker that is not right before a fence, a fence that is never closed. Each names
    the page and line.
    """
    blocks: list[Block] = []
    problems: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        opening = _opening(line.text)
        if opening is None:
            following = lines[i + 1].text if i + 1 < len(lines) else ""
            if line.text.strip() == FRAGMENT and _opening(following) is None:
                problems.append(f"{line.where}: {FRAGMENT} must be the line right before a fence")
            i += 1
            continue
        fragment = i > 0 and lines[i - 1].text.strip() == FRAGMENT
        indent, fence = len(opening["indent"]), opening["fence"]
        body: list[Line] = []
        i += 1
        while i < len(lines) and not _closes(lines[i].text, fence):
            inner = lines[i]
            cut = min(indent, len(inner.text) - len(inner.text.lstrip(" ")))
            body.append(Line(inner.text[cut:], inner.page, inner.page_line, inner.source,
                             inner.number))  # fmt: skip
            i += 1
        if i >= len(lines):
            problems.append(f"{line.where}: this fence is never closed")
        i += 1  # past the closing fence
        block = Block(_language(opening["info"]), fragment, line, tuple(body))
        blocks.append(block)
        if not block.fragment and block.lang != "python":
            shown = f"```{block.lang}" if block.lang else "a fence without a language"
            problems.append(
                f"{line.where}: {shown} must be ```python (run by tests/docs) or follow a "
                f"{FRAGMENT} line (for reading only)"
            )
    return blocks, problems


def _opening(text: str) -> re.Match[str] | None:
    match = _OPENING.match(text)
    if match is None or (match["fence"][0] == "`" and "`" in match["info"]):
        return None  # a backtick fence's info string never holds a backtick
    return match


def script(blocks: list[Block]) -> tuple[str, list[Line | None]]:
    """The page's runnable blocks joined into one script, and each script line's origin."""
    text: list[str] = []
    origins: list[Line | None] = []
    for block in blocks:
        if not block.runnable:
            continue
        for line in block.body:
            text.append(line.text)
            origins.append(line)
        text.append("")
        origins.append(None)
    return "\n".join(text), origins


def traceback_on_page(stderr: str, script_path: str, origins: list[Line | None]) -> str:
    """``stderr`` with each line number of the script turned into the page's own."""

    def where(match: re.Match[str]) -> str:
        number = int(match[1])
        origin = origins[number - 1] if 0 < number <= len(origins) else None
        return f"{match[0]} ({origin.where})" if origin else match[0]

    return re.sub(rf'File "{re.escape(script_path)}", line (\d+)', where, stderr)
