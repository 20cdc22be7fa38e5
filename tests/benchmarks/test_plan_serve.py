"""python -m benchmarks.plan_serve: a run root without the plan exits 2 with one line naming the
command that makes it, writing nothing; the plan's rows are read per b with the speedup at the
served K (the measurement itself runs the serve_bench workload, tests/workloads/serving)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.plan_serve import predicted

ROOT = Path(__file__).resolve().parents[2]


def test_a_run_root_without_the_plan_says_what_to_run(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "benchmarks.plan_serve", "--run-root", str(tmp_path), "--out",
         str(tmp_path / "o")],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "Fix: orchestrator plan --run-root" in res.stderr
    assert not (tmp_path / "o").exists()


def test_predicted_reads_each_rows_plan_and_the_speedup_at_the_served_k() -> None:
    rows = [
        {"batch_size": 1, "k": 1, "speedup": 1.0, "speedup_ci": [1.0, 1.0],
         "speedup_by_k": {"2": 0.9, "4": 0.7}},
        {"batch_size": 8, "k": 4, "speedup": 1.3, "speedup_ci": [1.1, 1.5],
         "speedup_by_k": {"2": 1.1, "4": 1.3}},
    ]  # fmt: skip
    got = predicted({"serving": {"rows": rows}}, 4)
    assert got[1]["speedup_at_fixed_k"] == pytest.approx(0.7) and got[1]["k"] == 1
    assert got[8]["speedup"] == 1.3 and got[8]["speedup_ci"] == [1.1, 1.5]
    assert predicted({"serving": {"rows": rows}}, 3)[8]["speedup_at_fixed_k"] is None
