"""The Design section of a sweep's dashboard: an adaptive design's decisions and its curve.

Reads the decisions as plain dicts (the keys of ``orchestrator.store.design.Decision``); never
the store. The figure (div id ``design``) is the slope's 95% CI half-width against the compute
spent when each step was decided (trial hours; GPU-hours for GPU trials), with the goal and
the budget as lines and each pick's expected half-width after it; the table lists every
decision: what was picked and why, or why the design stopped.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from analysis.numbers import fmt
from dashboards._html import plot_text, table

SECTION_ID = "design"
"""the id of the section's heading"""
END = "<!-- /design -->"
"""marks the end of the section (a refit replaces it)"""


def _hours(seconds: Any) -> float | None:
    return None if seconds is None else float(seconds) / 3600.0


def design_figure(
    decisions: Sequence[Mapping[str, Any]], *, goal: float, budget_h: float
) -> go.Figure | None:
    """Half-width against compute (hours), one point per step with a fit; None when no step
    had one yet."""
    steps: dict[int, tuple[float, float]] = {}
    expected_x, expected_y, labels = [], [], []
    for d in decisions:
        spent = _hours(d.get("spent_s"))
        if d.get("half_width") is not None and spent is not None:
            steps.setdefault(int(d["step"]), (spent, float(d["half_width"])))
        if d.get("kind") == "pick" and d.get("expected_half_width") is not None:
            after = (d.get("spent_s") or 0) + (d.get("committed_s") or 0)
            after += d.get("predicted_cost_s") or 0
            expected_x.append(after / 3600.0)
            expected_y.append(float(d["expected_half_width"]))
            labels.append(
                plot_text(f"step {d['step']}: {fmt(d.get('value'), 'g')} seed {d.get('seed')}")
            )
    if not steps:
        return None
    xs, ys = zip(*(steps[k] for k in sorted(steps)), strict=True)
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=list(xs),
            y=list(ys),
            mode="lines+markers",
            name="half-width of the completed trials",
            hovertemplate="spent %{x:.3g} h<br>half-width %{y:.4g}<extra></extra>",
        )
    )
    if expected_x:
        fig.add_trace(
            go.Scatter(
                x=expected_x,
                y=expected_y,
                mode="markers",
                marker={"symbol": "circle-open", "size": 9},
                name="expected after a pick",
                customdata=[[t] for t in labels],
                hovertemplate="%{customdata[0]}<br>expected %{y:.4g} at %{x:.3g} h<extra></extra>",
            )
        )
    fig.add_hline(y=goal, line_dash="dash", annotation_text=plot_text(f"goal {goal:g}"))
    fig.add_vline(x=budget_h, line_dash="dot", annotation_text=plot_text(f"budget {budget_h:g} h"))
    fig.update_layout(
        title={"text": "slope's 95% CI half-width vs compute", "font": {"size": 13}},
        xaxis={"title": {"text": "compute spent, trial hours (GPU-hours for GPU trials)"}},
        yaxis={"title": {"text": "half-width (metric per decade)"}, "rangemode": "tozero"},
        template="plotly_white",
        height=420,
    )
    return fig


def design_section(
    decisions: Sequence[Mapping[str, Any]],
    *,
    axis: str,
    goal: float,
    budget_h: float,
    plotly_js: bool,
) -> str:
    """The section's HTML: heading, a note, the figure (plotly.js inlined when ``plotly_js``)
    and the decisions table, ending with :data:`END`."""
    stops = [d for d in decisions if d.get("kind") == "stop"]
    last = stops[-1] if stops else None
    said = (
        f"Stopped ({last.get('stop')}): {last.get('reason')}"
        if last is not None
        else "Not stopped yet (running, or cancelled: a resubmit continues it)."
    )
    parts = [
        f"<h2 id='{SECTION_ID}'>Design: adaptive trials over {html.escape(axis)}</h2>",
        "<p class='note'>Each step the rule (analysis/design.py: c-optimal for the slope, "
        "Var(a) = sigma² / Σ(x − mean x)², per predicted second) picks the trials that shrink "
        "the slope's 95% CI most per cost, until the goal, the budget or the candidates. "
        f"Goal {goal:g}, budget {budget_h:g} h. {html.escape(said)}</p>",
    ]
    fig = design_figure(decisions, goal=goal, budget_h=budget_h)
    if fig is not None:
        parts.append(fig.to_html(full_html=False, include_plotlyjs=plotly_js, div_id="design"))
    head = ["step", "rank", "kind", axis, "seed", "trial_key", "predicted s", "basis"]
    head += ["half-width before", "expected after", "spent h", "committed h", "stop", "why"]
    rows = [
        [
            d.get("step"),
            d.get("rank"),
            d.get("kind"),
            d.get("value"),
            d.get("seed"),
            d.get("trial_key") or "",
            d.get("predicted_cost_s"),
            d.get("cost_basis") or "",
            d.get("half_width"),
            d.get("expected_half_width"),
            _hours(d.get("spent_s")),
            _hours(d.get("committed_s")),
            d.get("stop") or "",
            d.get("reason") or "",
        ]
        for d in decisions
    ]
    parts.append(table(head, rows, sortable=True, table_id="design-table"))
    return "\n".join(parts) + END
