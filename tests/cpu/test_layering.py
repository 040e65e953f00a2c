"""The import rules of DESIGN.md, read from every module's imports (function-level ones included):
`graph.app -> graph (StateGraph) -> nodes -> graph.core, graph.llm -> (kb, harness) -> tools`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _imports(folder: str) -> list[tuple[str, str]]:
    """(module file relative to the root, imported kernelblaster module) for every import under `folder`."""
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            found += [(str(path.relative_to(ROOT)), name) for name in names if name.startswith("kernelblaster.")]
    return found


def _breaking(folder: str, forbidden: tuple[str, ...], allowed: tuple[str, ...] = ()) -> list[str]:
    return [f"{module} imports {name}" for module, name in _imports(folder)
            if name.startswith(forbidden) and not name.startswith(allowed)]


def test_nodes_import_of_the_graph_only_its_core_and_llm_floors() -> None:
    assert _breaking("nodes", ("kernelblaster.graph",), ("kernelblaster.graph.core", "kernelblaster.graph.llm")) == []


@pytest.mark.parametrize("floor", ["graph/core", "graph/llm"])
def test_the_lower_graph_floors_never_import_the_graph_the_app_the_nodes_or_the_suites(floor: str) -> None:
    above = ("kernelblaster.graph.app", "kernelblaster.graph.graph", "kernelblaster.graph.routes",
             "kernelblaster.nodes", "kernelblaster.eval")
    assert _breaking(floor, above) == []


def test_the_llm_client_never_imports_what_a_node_is_given() -> None:
    assert _breaking("graph/llm", ("kernelblaster.graph.core",)) == []


def test_nothing_under_graph_but_the_app_imports_the_suites() -> None:
    assert [line for line in _breaking("graph", ("kernelblaster.eval",)) if not line.startswith("graph/app/")] == []


@pytest.mark.parametrize("folder", ["harness", "kb", "tools"])
def test_the_library_never_imports_the_graph_the_nodes_or_the_suites(folder: str) -> None:
    assert _breaking(folder, ("kernelblaster.graph", "kernelblaster.nodes", "kernelblaster.eval")) == []


def test_the_kb_never_imports_the_harness() -> None:
    assert _breaking("kb", ("kernelblaster.harness",)) == []


def test_tools_import_only_tools() -> None:
    assert _breaking("tools", ("kernelblaster.",), ("kernelblaster.tools",)) == []
