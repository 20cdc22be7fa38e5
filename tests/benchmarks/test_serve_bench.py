"""python -m benchmarks.serve_bench: bad arguments and a run root without the draft exit 2 with one
line; the measurement itself runs the serve_bench workload (tests/workloads/serving)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.serve_bench", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )


def test_bad_batch_sizes_exit_2_with_one_line() -> None:
    res = _run("--batch-sizes", "1,x")
    assert res.returncode == 2
    assert (
        res.stderr.strip()
        == "serve_bench: --batch-sizes '1,x' is not a comma-separated list of integers"
    )


def test_a_run_root_without_the_sweep_says_what_to_run(tmp_path: Path) -> None:
    res = _run("--run-root", str(tmp_path), "--out", str(tmp_path / "out"))
    assert res.returncode == 2
    assert "no finished draft_train trial" in res.stderr and "orchestrator submit" in res.stderr
    assert not (tmp_path / "out").exists()
