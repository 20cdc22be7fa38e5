"""The dependency direction of docs/architecture.md, checked on every module's imports (ast):
the layers below never import the ones above."""

from __future__ import annotations

import ast
import sys
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
for _block in ("blocks.py", "lines.py", "design/spec.py", "search/spec.py"):
    FORBIDDEN[f"orchestrator/kinds/{_block}"] = FORBIDDEN["orchestrator/spec"]
"""package folder (or a feature package's module that sits in that layer) -> module prefixes it
may not import"""

WORKLOADS_BASE = ("workloads.config", "workloads.result", "workloads.names", "workloads.files")
WORKLOADS_LAYERS = {
    "workloads/data": (*WORKLOADS_BASE, "workloads.data"),
    "workloads/roofline": ("workloads.roofline", "workloads.files"),
    "workloads/models": (*WORKLOADS_BASE, "workloads.roofline", "workloads.models"),
    "workloads/engine": (
        *WORKLOADS_BASE,
        "workloads.roofline",
        "workloads.models",
        "workloads.engine",
    ),
    "workloads/training": (
        *WORKLOADS_BASE,
        "workloads.roofline",
        "workloads.data",
        "workloads.models",
        "workloads.engine",
        "workloads.training",
    ),
}
"""workloads subpackage -> the only workloads modules it may import (docs/architecture.md): the
entry modules (registry, draft_train, decode_bench, sleep, cost) sit above every subpackage"""


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
    """``folder:line: module`` of each banned import under ``folder`` (a folder or one file)."""
    bad = []
    base = ROOT / folder
    for path in [base] if base.is_file() else sorted(base.rglob("*.py")):
        for line, module in imports(path):
            if any(module == b or module.startswith(b + ".") for b in banned):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    return bad


KIND_MODULES = ("orchestrator.kinds.grid", "orchestrator.kinds.search", "orchestrator.kinds.design")
"""the sweep kinds' modules (orchestrator/kinds/__init__.py KINDS): only the kinds import them;
the core imports the table and protocol (orchestrator.kinds) and the spec loader the table of
blocks (orchestrator.kinds.blocks)"""


def _from_names(path: Path) -> list[tuple[int, str]]:
    """(line, ``module.name``) of each ``from module import name`` (a submodule named so)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def test_no_module_outside_the_kinds_imports_a_kind() -> None:
    """The core reaches a kind through orchestrator.kinds (kind_of), never its module."""
    bad = []
    for package in ("orchestrator", "workloads", "analysis", "dashboards"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("orchestrator/kinds/"):
                continue
            for line, module in imports(path) + _from_names(path):
                if any(module == k or module.startswith(k + ".") for k in KIND_MODULES):
                    bad.append(f"{rel}:{line}: {module}")
    assert bad == []


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_layers_never_reach_up(folder: str) -> None:
    assert (ROOT / folder).exists()
    assert violations(folder, FORBIDDEN[folder]) == []


def outside_layer(folder: str, allowed: tuple[str, ...]) -> list[str]:
    bad = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for line, module in imports(path):
            if module.split(".")[0] != "workloads":
                continue
            if not any(module == a or module.startswith(a + ".") for a in allowed):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    return bad


@pytest.mark.parametrize("folder", sorted(WORKLOADS_LAYERS))
def test_workloads_subpackages_import_only_their_layers(folder: str) -> None:
    assert (ROOT / folder).exists()
    assert outside_layer(folder, WORKLOADS_LAYERS[folder]) == []


def test_the_base_modules_import_no_other_workloads_module() -> None:
    allowed = {"config": ["workloads.names"], "result": [], "names": []}
    for name, ok in allowed.items():
        found = [m for _, m in imports(ROOT / "workloads" / f"{name}.py")]
        assert [m for m in found if m.startswith("workloads")] == ok, name


def test_the_layer_check_sees_an_upward_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "workloads" / "engine").mkdir(parents=True)
    (tmp_path / "workloads" / "engine" / "m.py").write_text(
        "from workloads.models.target import Target\nfrom workloads.training import loop\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert outside_layer("workloads/engine", WORKLOADS_LAYERS["workloads/engine"]) == [
        "workloads/engine/m.py:2: workloads.training"
    ]


def test_the_check_sees_an_import(tmp_path: Path) -> None:
    probe = tmp_path / "pkg"
    probe.mkdir()
    (probe / "m.py").write_text("from orchestrator.store import results\nimport torch.nn\n")
    assert [m for _, m in imports(probe / "m.py")] == ["orchestrator.store", "torch.nn"]
