"""The Design section of an adaptive design's dashboard: the curve, the table, escaping, and a
refit rendering the page with the section once."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dashboards.design_section import design_figure, design_section
from dashboards.table_page import write_table_dashboard
from orchestrator.kinds.design.report import design_data
from orchestrator.reports.fit import fit_sweep
from orchestrator.store.results import Decision, ResultsStore

PICK = {"kind": "pick", "value": 10.0, "seed": 0, "trial_key": "k1", "predicted_cost_s": 60.0}


def _decisions() -> list[dict[str, object]]:
    return [
        {**PICK, "step": 0, "rank": 0, "spent_s": 0.0, "half_width": None, "reason": "<b>x</b>"},
        {**PICK, "step": 1, "rank": 0, "spent_s": 3600.0, "half_width": 0.2,
         "expected_half_width": 0.1, "committed_s": 0.0, "reason": "next"},
        {"kind": "stop", "step": 2, "rank": 0, "spent_s": 7200.0, "half_width": 0.05,
         "stop": "goal", "reason": "goal met"},
    ]  # fmt: skip


def test_the_curve_has_one_point_per_fitted_step_and_the_expected_half_widths() -> None:
    fig = design_figure(_decisions(), goal=0.05, budget_h=3.0)
    assert fig is not None
    assert list(fig.data[0].x) == [1.0, 2.0] and list(fig.data[0].y) == [0.2, 0.05]
    assert list(fig.data[1].y) == [0.1]
    assert design_figure(_decisions()[:1], goal=0.05, budget_h=3.0) is None  # no fit yet


def test_the_section_escapes_and_says_why_it_stopped(tmp_path: Path) -> None:
    section = design_section(_decisions(), axis="pretrain.tokens", goal=0.05, budget_h=3.0)
    trials = pd.DataFrame({"trial_key": ["k1"], "state": ["completed"]})
    page = write_table_dashboard(
        tmp_path / "d.html", sweep_name="d", trials=trials, x="value", y=None, sections=[section]
    )
    html = page.read_text(encoding="utf-8")
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html
    assert "Stopped (goal): goal met" in html and "id='design-table'" in html
    assert html.index("<h2 id='design'>") > html.index("id='trials'")  # it closes the page
    assert html.count("plotly.js v") == 1  # the page had no figure: the section's inlines it


def test_a_refit_renders_the_section_once(tmp_path: Path) -> None:
    store = ResultsStore.sqlite_under(tmp_path)
    sweep_id = store.upsert_sweep(
        "d", "sleep", "design: {axis: law_x, goal: 0.05, budget_hours: 1}", "d.yaml"
    )
    store.add_decisions(sweep_id, [Decision(step=0, rank=0, kind="stop", reason="r", spent_s=0)])
    dashboard = tmp_path / "d" / "dashboard.html"
    for _ in range(2):
        fit_sweep(store, sweep_id, "d", dashboard, persist=False)
    text = dashboard.read_text()
    assert text.count("<h2 id='design'>") == 1 and "over law_x" in text
    assert design_data(store, "nope") is None
    store.close()
