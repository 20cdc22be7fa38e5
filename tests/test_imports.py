"""The dependency direction of docs/architecture.md, checked on every module's imports (ast):
the layers below never import the ones above."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FORBIDDEN = {
    "workloads": ("orchestrator", "analysis", "dashboards", "mlflow", "sqlalchemy", "optuna"),
    "analysis": ("orchestrator", "workloads", "dashboards", "torch", "ray", "sqlalchemy"),
    "dashboards": ("orchestrator", "workloads", "torch", "ray", "sqlalchemy", "mlflow"),
    "orchestrator/store": (
        "orchestrator.driving",
        "orchestrator.commands",
        "orchestrator.reports",
        "orchestrator.tracking",
        "workloads",
        "ray",
        "mlflow",
        "torch",
    ),
    "orchestrator/spec": (
        "orchestrator.driving",
        "orchestrator.commands",
        "orchestrator.store",
        "ray",
        "mlflow",
        "torch",
    ),
}
"""package folder -> module prefixes it may not import"""


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file, type-only ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def violations(folder: str, banned: tuple[str, ...]) -> list[str]:
    bad = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for line, module in imports(path):
            if any(module == b or module.startswith(b + ".") for b in banned):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    return bad


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_layers_never_reach_up(folder: str) -> None:
    assert (ROOT / folder).is_dir()
    assert violations(folder, FORBIDDEN[folder]) == []


def test_the_check_sees_an_import(tmp_path: Path) -> None:
    probe = tmp_path / "pkg"
    probe.mkdir()
    (probe / "m.py").write_text("from orchestrator.store import results\nimport torch.nn\n")
    assert [m for _, m in imports(probe / "m.py")] == ["orchestrator.store", "torch.nn"]
