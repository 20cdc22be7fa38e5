"""benchmarks/cost_bench.py on two hand-built run roots: calibrated on one, compared with the
other's measured trials (same seconds law: the calibrated error is ~0), modelled beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import cost_bench
from orchestrator.store.results import ResultsStore
from tests.orchestrator.cost.test_model import _record, _spec

ROOT = Path(__file__).resolve().parents[2]


def test_calibrated_on_one_root_and_compared_with_another(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calib, measured = tmp_path / "calib", tmp_path / "measured"
    store = ResultsStore.sqlite_under(calib)
    _record(store, _spec(tmp_path, "small", [1024, 2048, 4096]))
    store.close()
    spec = _spec(tmp_path, "tok", [2048, 8192])
    store = ResultsStore.sqlite_under(measured)
    _record(store, spec)
    store.close()
    out_json = tmp_path / "cmp.json"
    rc = cost_bench.main(
        ["--calibrate", str(calib), "--spec", str(tmp_path / "tok.yaml"), "--measured",
         str(measured), "--json", str(out_json)]
    )  # fmt: skip
    assert rc == 0
    text = capsys.readouterr().out
    assert "calibrated" in text and "modelled" in text and "goals (calibrated)" in text
    data = json.loads(out_json.read_text())
    assert data["totals"]["trials_measured"] == 2
    for row in data["trials"]:
        assert row["calibrated_basis"] == "calibrated+modelled"
        assert row["modelled_error_pct"] is not None
        assert row["calibrated_apart_error_pct"] is not None  # the simpler rule beside it
    assert data["totals"]["calibrated_apart_wall_s"] is not None
    # pretraining, SFT and setup follow the measured law; the evaluation is modelled in both
    assert data["totals"]["calibrated_error_pct"] is not None
    assert "fit pretrain: OLS on the work, n=3" in text


def test_a_missing_root_is_named(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no results DB"):
        cost_bench.main(
            ["--calibrate", str(tmp_path / "none"), "--spec", "sweeps/smoke-tokens.yaml",
             "--measured", str(tmp_path / "none")]
        )  # fmt: skip
