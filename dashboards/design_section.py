"""The Design section of a sweep's dashboard: an adaptive design's decisions and its curve.

Reads the decisions as plain dicts (the keys of ``orchestrator.store.decisions.Decision``); never
the store. The figure (div id ``design-figure``) is the slope's 95% CI half-width against the
compute spent when each step was decided (trial hours; GPU-hours for GPU trials), with the goal and
the budget as lines and each pick's expected half-width after it; the table lists every
decision: what was picked and why, or why the design stopped. The section is data
(:class:`DesignSection`); ``templates/_design.html.j2`` draws it at the end of the page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go

from analysis.numbers import fmt
from dashboards._html import Table, plot_text


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


@dataclass(frozen=True)
class DesignSection:
    """The section's data (template ``_design.html.j2``): the design's axis, goal and budget,
    why it stopped, the figure (None before a fit) and the decisions table."""

    axis: str
    goal: float
    budget_h: float
    said: str
    """why the design stopped, or that it has not"""
    figure: go.Figure | None
    table: Table
    template: str = field(default="_design.html.j2", init=False)


def design_section(
    decisions: Sequence[Mapping[str, Any]], *, axis: str, goal: float, budget_h: float
) -> DesignSection:
    """The section of ``decisions``: the note, the figure and the decisions table."""
    stops = [d for d in decisions if d.get("kind") == "stop"]
    last = stops[-1] if stops else None
    said = (
        f"Stopped ({last.get('stop')}): {last.get('reason')}"
        if last is not None
        else "Not stopped yet (running, or cancelled: a resubmit continues it)."
    )
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
    return DesignSection(
        axis=axis,
        goal=goal,
        budget_h=budget_h,
        said=said,
        figure=design_figure(decisions, goal=goal, budget_h=budget_h),
        table=Table(head, rows, sortable=True, table_id="design-table"),
    )
