"""The Design section of an adaptive design's dashboard: the curve, the table, escaping, and a
refit replacing the section instead of adding a second one."""

from __future__ import annotations

from pathlib import Path

from dashboards._html import page
from dashboards.design_section import design_figure, design_section
from orchestrator.reports.design import add_design_section
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


def test_the_section_escapes_and_says_why_it_stopped() -> None:
    html = design_section(_decisions(), axis="pretrain.tokens", goal=0.05, budget_h=3.0,
                          plotly_js=False)  # fmt: skip
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html
    assert "Stopped (goal): goal met" in html and "id='design-table'" in html


def test_a_refit_replaces_the_section(tmp_path: Path) -> None:
    store = ResultsStore.sqlite_under(tmp_path)
    sweep_id = store.upsert_sweep(
        "d", "sleep", "design: {axis: law_x, goal: 0.05, budget_hours: 1}", "d.yaml"
    )
    store.add_decisions(sweep_id, [Decision(step=0, rank=0, kind="stop", reason="r", spent_s=0)])
    dashboard = tmp_path / "d" / "dashboard.html"
    dashboard.parent.mkdir()
    dashboard.write_text(page("Sweep d", ["<h1>Sweep d</h1>"]))
    assert add_design_section(dashboard, store, "d") and add_design_section(dashboard, store, "d")
    text = dashboard.read_text()
    assert text.count("<h2 id='design'>") == 1 and "over law_x" in text
    assert not add_design_section(dashboard, store, "nope")
    store.close()
