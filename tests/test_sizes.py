"""The house rule on sizes (issue 33): no module of the packages or ``benchmarks/`` over 800
lines, no function (or method, nested ones too) over 100, counted with ``ast`` from its ``def``
line to its last line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("orchestrator", "workloads", "analysis", "dashboards", "benchmarks")
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 100

ALLOWED: set[str] = set()
"""``path`` or ``path:function`` allowed over the limit for now, each with its reason"""


def oversized(path: Path, rel: str) -> list[str]:
    """``rel`` (lines) when the module is over :data:`MAX_MODULE_LINES`, and
    ``rel:name`` (lines) for each function in it over :data:`MAX_FUNCTION_LINES`."""
    text = path.read_text(encoding="utf-8")
    found = []
    lines = len(text.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{rel} ({lines} lines)")
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            n = (node.end_lineno or node.lineno) - node.lineno + 1
            if n > MAX_FUNCTION_LINES:
                found.append(f"{rel}:{node.name} ({n} lines)")
    return found


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_module_or_function_is_over_the_limit(folder: str) -> None:
    assert (ROOT / folder).is_dir()
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        found += [f for f in oversized(path, rel) if f.split(" (")[0] not in ALLOWED]
    assert found == [], (
        f"over {MAX_MODULE_LINES} lines a module or {MAX_FUNCTION_LINES} a function; split "
        "it by responsibility:\n" + "\n".join(found)
    )


def test_the_check_finds_a_long_module_and_function(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    probe = tmp_path / "probe.py"
    probe.write_text("def short() -> None:\n    pass\n\n\nasync def long() -> None:\n" + body)
    assert oversized(probe, "probe.py") == [f"probe.py:long ({MAX_FUNCTION_LINES + 1} lines)"]
    probe.write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert oversized(probe, "probe.py") == [f"probe.py ({MAX_MODULE_LINES + 1} lines)"]
