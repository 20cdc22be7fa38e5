"""The tiny batch-size sweep end to end: decode_bench on Ray, SQL, MLflow, fits, dashboard."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.store.results import ResultsStore
from orchestrator.tracking.tracker import Tracker, default_tracking_uri

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "sweeps" / "smoke-batch.yaml"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "orchestrator.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> tuple[Path, str]:
    run_root = tmp_path_factory.mktemp("smoke-batch")
    res = cli("submit", str(SMOKE), "--run-root", str(run_root), "--cache-dir", str(cache_dir))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return run_root, res.stdout


def test_decode_sweep_records_throughput_and_fits(run: tuple[Path, str]) -> None:
    run_root, output = run
    assert "6 completed, 0 already completed (skipped), 0 failed" in output
    assert "b=1: best k" in output and "b=2: best k" in output
    store = ResultsStore.sqlite_under(run_root)
    info = store.get_sweep("smoke-batch")
    assert info is not None and info.workload == "decode_bench"
    df = store.metrics_frame(info.id)
    ks = df["decode.num_draft_tokens"].astype(str)
    cells = set(zip(df["decode.batch_size"], ks, strict=True))
    assert cells == {(b, k) for b in (1, 2) for k in ("2", "4", "auto")}
    auto = df[df["decode.num_draft_tokens"].astype(str) == "auto"]
    assert auto["num_draft_tokens_mean"].between(2, 64).all()  # what auto picked, per cycle
    assert (run_root / "smoke-batch" / "k_law.json").exists()  # the sweep's Eq. 4 for sweep:NAME
    assert (df["tokens_per_s"] > 0).all() and (df["ar_tokens_per_s"] > 0).all()
    assert (df["speedup"] - df["tokens_per_s"] / df["ar_tokens_per_s"]).abs().max() < 1e-9
    assert (df["mismatches"] == 0).all() and (df["ar_mismatches"] == 0).all()
    assert df["acceptance_length"].between(1.0, 4.0).all()
    hf = df.set_index("decode.batch_size")["hf_tokens_per_s"]
    assert (hf.loc[1] > 0).all() and hf.loc[2].isna().all()  # HF generate only at b = 1
    split = df["draft_s_per_cycle"] + df["verify_s_per_cycle"] + df["bookkeeping_s_per_cycle"]
    assert (split > 0).all() and (df["bookkeeping_share"].between(0, 1)).all()
    assert (df["hw.peak_flops"] > 1e9).all() and (df["hw.bandwidth"] > 1e8).all()
    laws = {f["law"] for f in store.fits(info.id)}
    assert laws == {"batch", "k_opt", "speedup"}
    page = (run_root / "smoke-batch" / "dashboard.html").read_text()
    assert "Decode sweep smoke-batch" in page and "I_crit" in page
    children = Tracker(default_tracking_uri(run_root)).child_runs(info.mlflow_run_id)
    assert len(children) == 6 and all("tokens_per_s" in c["metrics"] for c in children)
    assert all(not math.isnan(c["metrics"]["tokens_per_s"]) for c in children)


def test_resubmit_runs_nothing_and_fit_refits(run: tuple[Path, str], cache_dir: Path) -> None:
    run_root, _ = run
    res = cli("submit", str(SMOKE), "--run-root", str(run_root), "--cache-dir", str(cache_dir))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "0 completed, 6 already completed (skipped), 0 failed" in res.stdout
    res = cli("fit", "smoke-batch", "--run-root", str(run_root))
    assert res.returncode == 0 and "b=2: best k" in res.stdout, res.stdout + res.stderr


def test_missing_trained_draft_fails_before_anything_is_written(tmp_path: Path) -> None:
    spec = tmp_path / "b.yaml"
    spec.write_text(
        "name: b\nworkload: decode_bench\nbase:\n  draft: {source: trial, sweep: tokens, "
        "trial_key: best}\n"
    )
    res = cli("submit", str(spec), "--run-root", str(tmp_path / "runs"))
    assert res.returncode == 2
    assert "no finished draft_train trial" in res.stdout + res.stderr
    assert "sweeps/tokens.yaml" in res.stdout + res.stderr
    assert not (tmp_path / "runs" / "results.db").exists()
