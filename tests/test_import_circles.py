"""No import circles in the ``orchestrator`` package (issue 23): the import graph of its modules,
built with ``ast`` from every import (inside functions and ``if TYPE_CHECKING:`` blocks too,
relative ones and ``from . import x``), has no cycle.

:func:`cycles` takes any package folder, so the same check can point at ``workloads``.
An edge goes to the module an import names (``from a.b import c`` to ``a.b.c`` when that is a
module, else to ``a.b``); the parent packages Python initialises on the way are not edges.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def modules(package_dir: Path, package_name: str) -> dict[str, Path]:
    """Dotted module name -> file for every ``.py`` under ``package_dir`` (``__init__`` is the
    package itself)."""
    found = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join([package_name, *parts])] = path
    return found


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest known module that ``name`` is or lies in; None outside the package."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def import_graph(package_dir: Path, package_name: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in the file)."""
    known = modules(package_dir, package_name)
    graph: dict[str, set[str]] = {m: set() for m in known}
    for module, path in known.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base_parts = module.split(".")
                    drop = node.level - 1 if is_package else node.level
                    base_parts = base_parts[: len(base_parts) - drop] if drop else base_parts
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in known else base)
            for target in targets:
                resolved = _resolve(target, known)
                if resolved is not None and resolved != module:
                    graph[module].add(resolved)
    return graph


def cycles(package_dir: Path, package_name: str) -> list[list[str]]:
    """The import cycles a depth-first search of the package's import graph meets, each as
    ``[a, b, ..., a]`` starting at its smallest module name; [] when there is none."""
    graph = import_graph(package_dir, package_name)
    state: dict[str, int] = {}  # 1: on the DFS stack, 2: done
    stack: list[str] = []
    found: set[tuple[str, ...]] = set()

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                loop = stack[stack.index(nxt) :]
                start = loop.index(min(loop))
                found.add(tuple(loop[start:] + loop[:start]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return [[*loop, loop[0]] for loop in sorted(found)]


@pytest.mark.parametrize("package", ["orchestrator", "workloads", "analysis", "dashboards"])
def test_no_package_has_an_import_circle(package: str) -> None:
    found = cycles(ROOT / package, package)
    assert found == [], "import circles: " + "; ".join(" -> ".join(c) for c in found)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_cycles_finds_a_planted_circle(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    _write(
        pkg,
        {
            "__init__.py": "",
            "a.py": "from pkg.b import thing\n",
            "b.py": "def f():\n    from . import c\n",
            "sub/__init__.py": "",
            "sub/c.py": "",
            "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n",
            "d.py": "from .sub import c\nimport os\n",
            "sub/e.py": "from .. import d\nfrom ..sub.c import x\n",
        },
    )
    assert cycles(pkg, "pkg") == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]
    graph = import_graph(pkg, "pkg")
    assert graph["pkg.d"] == {"pkg.sub.c"}
    assert graph["pkg.sub.e"] == {"pkg.d", "pkg.sub.c"}


def test_cycles_is_empty_without_a_circle(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    _write(pkg, {"__init__.py": "", "a.py": "import pkg.b\n", "b.py": "import json\n"})
    assert cycles(pkg, "pkg") == []
