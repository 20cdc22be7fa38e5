"""A trial that trains on 2 Ray Train workers, end to end through ``orchestrator submit``.

``sweeps/smoke-workers.yaml`` runs the same tiny trial with ``train.workers`` 1 and 2 on the
local Ray (2 CPUs; each trial holds 1 CPU, the 2-worker trial lends it to its workers while it
waits for them). On the real target's features the two loss curves must agree.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.store.results import ResultsStore

ROOT = Path(__file__).resolve().parents[3]
SPEC = ROOT / "sweeps" / "smoke-workers.yaml"
TOLERANCE = 1e-4
"""max relative difference of any step's loss, 2 workers vs 1 (see README)"""


# CI keeps tests/workloads/training/test_distributed.py (two workers = one process)
@pytest.mark.slow
def test_two_worker_trial_completes_and_matches_one(tmp_path: Path, cache_dir: Path) -> None:
    cmd = [sys.executable, "-m", "orchestrator.cli", "submit", str(SPEC)]
    cmd += ["--run-root", str(tmp_path), "--cache-dir", str(cache_dir)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "2 completed, 0 already completed (skipped), 0 failed" in res.stdout
    store = ResultsStore.sqlite_under(tmp_path)
    sweep = store.get_sweep("smoke-workers")
    assert sweep is not None
    trials = {t.overrides["train.workers"]: t for t in store.trials(sweep.id)}
    assert {t.state for t in trials.values()} == {"completed"}
    df = store.metrics_frame(sweep.id).set_index("train.workers")
    assert df.loc[2, "wall_s/train_workers"] > 0
    assert df.loc[2, "mismatches"] == 0
    for stage in ("pretrain", "sft"):
        one = store.metric_series(trials[1].id, f"{stage}/loss")
        two = store.metric_series(trials[2].id, f"{stage}/loss")
        assert len(one) == len(two) == 4  # 8 rows / batch 2; 4 rows / batch 2 x 2 epochs
        diff = max(abs(a - b) / abs(a) for a, b in zip(one, two, strict=True))
        print(f"{stage}: max relative loss difference, 2 workers vs 1: {diff:.2e}")
        assert diff < TOLERANCE
    # Ray Train's storage lived under the trial's folder and was removed once loaded
    trial_dir = tmp_path / "smoke-workers" / "trials" / trials[2].key
    assert (trial_dir / "draft" / "draft.safetensors").exists()
    assert not (trial_dir / "ray_train").exists()
