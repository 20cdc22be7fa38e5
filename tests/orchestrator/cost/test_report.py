"""The predicted cost a submit records beside the sweep and the dashboard's section comparing it
with the measured seconds (orchestrator/cost/report.py), through the real fit report."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.cost import model as costing
from orchestrator.cost import report
from orchestrator.reports.fit import fit_sweep
from orchestrator.spec.grid import expand
from orchestrator.store.results import ResultsStore
from tests.orchestrator.cost.test_model import HW, _record, _spec


def test_the_dashboard_sets_predicted_beside_measured(tmp_path: Path) -> None:
    store = ResultsStore(f"sqlite:///{tmp_path / 'results.db'}")
    spec = _spec(tmp_path, "tok", [1024, 2048])
    trials = expand(spec)
    predicted = costing.predictor(None, spec, profile=HW).sweep([(t.key, t.config) for t in trials])
    folder = tmp_path / "run" / "tok"
    path = report.write_prediction(folder, predicted)
    data = json.loads(path.read_text())
    assert set(data["trials"]) == {t.key for t in trials}
    first = data["trials"][trials[0].key]
    assert first["basis"] == "modelled" and first["stages"]["pretrain"]["basis"] == "modelled"
    # a resubmit's prediction keeps the one made before a trial ran
    later = costing.predictor(None, spec, profile=HW).sweep([(trials[0].key, trials[1].config)])
    report.write_prediction(folder, later)
    kept = json.loads(path.read_text())["trials"][trials[0].key]
    assert kept["total_s"] == first["total_s"]

    _record(store, spec)
    sweep_id = store.get_sweep("tok").id  # type: ignore[union-attr]
    rep = fit_sweep(store, sweep_id, "tok", folder / "dashboard.html")
    page = rep.dashboard.read_text()
    assert "<h2 id='cost'>Cost: predicted and measured seconds</h2>" in page
    assert page.count("id='cost-table'") == 1
    for t in trials:
        assert t.key in page.split("id='cost'")[1]
    headers, rows, (pred, meas, n) = report.cost_rows(store, sweep_id, report.read_prediction(path))
    assert headers[:6] == ["trial_key", "state", "predicted", "measured", "error %", "basis"]
    assert "pretrain predicted / measured" in headers and n == 2
    info = {t.key: t for t in store.trials(sweep_id)}
    assert meas == sum(info[t.key].wall_s or 0 for t in trials)
    assert pred == sum(data["trials"][t.key]["total_s"] for t in trials)
    err = float(rows[0][4])
    wall = info[rows[0][0]].wall_s
    total = data["trials"][rows[0][0]]["total_s"]
    assert wall is not None and abs(err - 100 * (total - wall) / wall) < 0.06
    assert page.index("id='cost'") > page.index("id='trials'")  # the section closes the page
    fit_sweep(store, sweep_id, "tok", folder / "dashboard.html")  # a refit: one section still
    assert rep.dashboard.read_text().count("id='cost-table'") == 1
    store.close()


def test_no_prediction_no_section(tmp_path: Path) -> None:
    store = ResultsStore(f"sqlite:///{tmp_path / 'results.db'}")
    assert report.cost_section(tmp_path, store, 1) is None
    store.close()
