"""The house's shape, checked: no import cycle among lockgate's modules, no module over
600 lines, and docs/architecture.md names the layers of the import-linter contract in
its order (``make lint`` checks the contract itself)."""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "lockgate"
MAX_LINES = 600


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The lockgate modules a module imports: top-level, inside functions and under
    ``TYPE_CHECKING`` alike (``from package import module`` names the module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            subs = [f"{base}.{alias.name}" for alias in node.names]
            named = [sub for sub in subs if sub in known]
            yield from named
            if len(named) < len(subs) and base in known:
                yield base


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_back_through_others() -> None:
    known = modules()
    graph = {name: set(imported(name, path, known)) - {name} for name, path in known.items()}
    assert sum(map(len, graph.values())) > 200  # the graph was read, not empty
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle_through_a_type_checking_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_module_is_over_600_lines() -> None:
    long = {
        str(path.relative_to(PACKAGE)): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def contract_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [contract["layers"] for contract in contracts if contract["type"] == "layers"]
    return [name.strip() for layer in layers for name in layer.split("|")]


def test_the_architecture_page_names_the_layers_of_the_contract_in_order() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = page.split("<!-- layers -->", 1)[1].split("<!-- /layers -->", 1)[0]
    named = re.findall(r"^\| `(\w+)` \|", table, flags=re.MULTILINE)
    assert ["lockgate." + name for name in named] == contract_layers()
    for name in named[:-1]:  # every layer but errors is a package of its own
        assert (PACKAGE / name / "__init__.py").is_file(), name
