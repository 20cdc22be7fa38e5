"""The analysis modules import each other one way: no import circle among ``analysis/*.py``.

A circle (``laws`` importing ``paper`` for the paper's constants while ``paper`` imports ``laws``
for the fit type) works only while every import happens to run in a lucky order or sits under
``TYPE_CHECKING``. The graph here counts every ``import`` statement, at any depth, type-only
ones included, so a circle is found before an import order exposes it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ANALYSIS = Path(__file__).resolve().parents[2] / "analysis"
MODULES = sorted(f"analysis.{p.stem}" for p in ANALYSIS.glob("*.py") if p.stem != "__init__")


def _imports(path: Path) -> set[str]:
    """The ``analysis.*`` modules that ``path`` imports anywhere (functions, TYPE_CHECKING)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n for n in names if n in MODULES}
    return found


def _graph() -> dict[str, set[str]]:
    return {m: _imports(ANALYSIS / f"{m.split('.')[1]}.py") - {m} for m in MODULES}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as a path (first module repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return path[path.index(n) :] + [n]
            if n not in state and (found := visit(n)) is not None:
                return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)) is not None:
            return found
    return None


def test_the_cycle_finder_finds_a_circle() -> None:
    graph = {"analysis.a": {"analysis.b"}, "analysis.b": {"analysis.a"}, "analysis.c": set()}
    assert _cycle(graph) == ["analysis.a", "analysis.b", "analysis.a"]
    assert _cycle({"analysis.a": {"analysis.b"}, "analysis.b": set()}) is None


def test_no_import_circle_among_the_analysis_modules() -> None:
    graph = _graph()
    assert "analysis.laws" in graph and "analysis.paper" in graph
    cycle = _cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])
    assert "analysis.paper" not in graph["analysis.laws"]  # the fits do not read the paper


@pytest.mark.parametrize("first", ["analysis.paper", "analysis.laws"])
def test_each_side_imports_first_in_a_fresh_interpreter(first: str) -> None:
    other = "analysis.laws" if first == "analysis.paper" else "analysis.paper"
    code = (
        f"import {first}, {other}\n"
        "from analysis.paper import PAPER_CONSTANTS\n"
        "assert PAPER_CONSTANTS['tokens']['a'] == 0.08\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ANALYSIS.parent,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
