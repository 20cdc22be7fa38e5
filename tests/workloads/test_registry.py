"""The workload registry: every entry is complete, its example sweep runs that workload, the
module stays light, and the orchestrator never compares a workload's name."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from orchestrator.spec.sweep import load_spec
from workloads.config import ConfigError
from workloads.protocol import TrialContext
from workloads.registry import WORKLOADS, get_workload

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_every_entry_is_complete(name: str) -> None:
    w = get_workload(name)
    assert w.name == name and issubclass(w.config_model, BaseModel)
    assert callable(w.run) and w.summary and w.report in ("law", "throughput", "table")
    assert all(callable(check) for check in w.preflight)
    assert w.status_columns and all(isinstance(c, str) for c in w.status_columns)
    for metric, spec in w.progress:
        assert isinstance(metric, str) and format(1.0 if spec[-1] != "d" else 1, spec)
    example = load_spec(ROOT / w.example)
    assert example.workload == name and example.config_model is w.config_model


def test_the_registry_does_not_import_torch() -> None:
    code = "import sys, workloads.registry; print('torch' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0 and res.stdout.strip() == "False", res.stderr


def test_a_config_error_names_its_field() -> None:
    err = ConfigError("no chat template", ("target", "model"))
    assert isinstance(err, ValueError) and err.field == ("target", "model")


def _name_comparisons(path: Path) -> list[str]:
    """``x == "<workload>"`` / ``x in ("<workload>", ...)`` comparisons and dict keys in a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            for c in ast.walk(node):
                if isinstance(c, ast.Constant) and c.value in WORKLOADS:
                    found.append(f"{path}:{node.lineno}: {c.value!r}")
    return found


def test_the_orchestrator_never_compares_a_workload_name() -> None:
    files = sorted((ROOT / "orchestrator").rglob("*.py"))
    assert len(files) > 20
    hits = [hit for f in files for hit in _name_comparisons(f)]
    assert hits == [], "compare the registry's fields instead:\n" + "\n".join(hits)


def test_the_check_finds_a_comparison(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('def f(w: str) -> bool:\n    return w == "decode_bench"\n')
    assert len(_name_comparisons(probe)) == 1


def test_a_trial_runs_by_hand_through_its_entry(tmp_path: Path) -> None:
    sleep = get_workload("sleep")
    ctx = TrialContext.local(tmp_path / "trial")
    assert ctx.out_dir.is_dir() and ctx.cache_dir == tmp_path / "cache"
    result = sleep.run(sleep.config_model.model_validate({"seconds": 0, "value": 2.5}), ctx)
    assert result.metrics["value"] == 2.5 and result.metrics["sleep.attempt"] == 1
