"""``orchestrator submit --dry-run`` costs the trials: per trial its stages' seconds with their
basis and the totals (calibrated from the run root's results DB where it has matched trials);
``--hardware h200 --devices 8`` plans the paper grid on GPUs and prints its GPU-hours; bad
planning flags are one line with a fix, exit 2, nothing written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.store.results import ResultsStore
from tests.orchestrator.cost.test_model import _record, _spec
from tests.orchestrator.driving.test_control import cli

ROOT = Path(__file__).resolve().parents[3]


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_dry_run_prints_each_trials_stages_and_the_totals(tmp_path: Path) -> None:
    run_root = tmp_path / "run"
    store = ResultsStore.sqlite_under(run_root)
    _record(store, _spec(tmp_path, "calib", [1024, 2048, 4096, 8192]))
    store.close()
    before = sorted(p.name for p in run_root.iterdir())
    spec = tmp_path / "smoke.yaml"
    shutil.copy(ROOT / "sweeps" / "smoke-tokens.yaml", spec)
    res = CliRunner().invoke(app, ["submit", str(spec), "--dry-run", "--run-root", str(run_root)])
    assert res.exit_code == 0, res.output
    out = _flat(res.output)
    assert "predicted seconds (c calibrated, m modelled, ? unknown)" in out
    for column in ("feat.pre", "feat.sft", "pretrain", "sft", "eval", "setup", "total", "basis"):
        assert column in out, column
    assert out.count(" c+m ") == 4  # every trial: pretraining calibrated, evaluation modelled
    assert "predicted cost on local-cpu" in out and " at once (4 trials)" in out
    assert "basis calibrated+modelled" in out
    assert "calibrated on 4 completed trials on this hardware" in out
    assert "pretrain: OLS on the work, n=4, R² 1.000" in out
    assert "x utilisation (assumed on the CPU: training 0.5" in out
    assert "Nothing was run or written" in out
    assert sorted(p.name for p in run_root.iterdir()) == before  # no cache, no MLflow store


def test_the_paper_grid_plans_its_gpu_hours_on_h200s(tmp_path: Path) -> None:
    """The shipped paper grid (a hub target and hub corpora this machine cannot reach, one GPU
    a trial) is refused by a plain dry run here and costed with --hardware."""
    run_root = tmp_path / "run"
    argv = ["submit", "sweeps/paper/tokens.yaml", "--dry-run", "--run-root", str(run_root)]
    one = CliRunner().invoke(app, [*argv, "--hardware", "h200"], env={"HF_HUB_OFFLINE": "1"})
    assert one.exit_code == 0, one.output
    eight = CliRunner().invoke(
        app, [*argv, "--hardware", "h200", "--devices", "8"], env={"HF_HUB_OFFLINE": "1"}
    )
    assert eight.exit_code == 0, eight.output
    out1, out8 = _flat(one.output), _flat(eight.output)
    assert "planning on 8 h200: the checks only this machine decides" in out8
    assert "predicted cost on h200:" in out1 and "GPU-hours (1 GPU a trial)" in out1
    hours = out8.split("predicted cost on h200: ")[1].split(" GPU-hours")[0]
    assert hours == out1.split("predicted cost on h200: ")[1].split(" GPU-hours")[0]
    assert float(hours.replace(",", "")) > 1000  # 188B tokens on an 8B target
    assert "on 8 h200 (8 trials at once)" in out8 and " on one h200; basis" in out1
    # "on one h200" is the one-at-a-time schedule with --devices 8 too, not the 8-at-once sum
    one_wall = out1.split("; wall ")[1].split(" on one h200")[0]
    assert out8.split("; wall ")[1].split(" on one h200")[0] == one_wall
    assert "MFU 0.35" in out8 and "basis modelled" in out8
    assert "188B pretraining tokens" in out8 and "Nothing was run or written" in out8
    assert not run_root.exists()


def test_a_small_sweep_on_a_gpu_says_its_gpu_hours_not_zero(tmp_path: Path) -> None:
    run_root = tmp_path / "run"
    argv = ["submit", "sweeps/smoke-tokens.yaml", "--dry-run", "--run-root", str(run_root)]
    res = CliRunner().invoke(app, [*argv, "--hardware", "h200"], env={"HF_HUB_OFFLINE": "1"})
    assert res.exit_code == 0, res.output
    said = _flat(res.output).split("predicted cost on h200: ")[1].split(" (1 GPU")[0]
    number, unit = said.split(" ")
    assert unit in ("GPU-seconds", "GPU-hours") and "e" not in number and float(number) > 0, said
    assert not run_root.exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--dry-run", "--hardware", "h2000"], "Did you mean 'h200'"),
        (["--hardware", "h200"], "Fix: add --dry-run"),
        (["--dry-run", "--devices", "8"], "Fix: add --hardware"),
        (["--dry-run", "--hardware", "local-cpu", "--devices", "2"], "leave out --devices"),
        (["--dry-run", "--hardware", "h200", "--devices", "0"], "Fix: --devices 1"),
    ],
    ids=["unknown", "no-dry-run", "devices-alone", "cpu-devices", "zero-devices"],
)
def test_bad_planning_flags(tmp_path: Path, args: list[str], needle: str) -> None:
    run_root = tmp_path / "run"
    res = CliRunner().invoke(
        app, ["submit", "sweeps/smoke-tokens.yaml", "--run-root", str(run_root), *args]
    )
    assert res.exit_code == 2, res.output
    assert needle in _flat(res.output) and "Traceback" not in res.output
    assert not run_root.exists()


def test_an_unknown_hardware_is_one_line_on_stderr(tmp_path: Path) -> None:
    res = cli(
        "submit", "sweeps/paper/tokens.yaml", "--dry-run", "--hardware", "h2OO",
        "--run-root", str(tmp_path / "run"),
    )  # fmt: skip
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--hardware 'h2OO'" in lines[0] and "Fix:" in lines[0], lines
    assert not (tmp_path / "run").exists()
