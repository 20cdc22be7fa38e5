"""Dashboard of a sweep of variants: recipes side by side (means with spread over seeds)."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from analysis.variants import variant_summary
from dashboards._html import page, plot_text, table
from dashboards.sweep_page import trial_table


def write_variant_dashboard(
    path: Path, *, sweep_name: str, trials: pd.DataFrame, metrics: list[str]
) -> Path:
    """Write one self-contained HTML page: acceptance length per variant and prompt set (bars:
    mean over completed trials, error bars: sample sd, points: each trial), the summary table of
    ``metrics`` (see :func:`analysis.variants.variant_summary`) and every trial."""
    per_set = sorted(c for c in trials.columns if str(c).startswith("acceptance_length/"))
    summary = variant_summary(trials, ["acceptance_length", *per_set, *metrics])
    fig = go.Figure()
    shown = summary[summary["metric"].isin(["acceptance_length", *per_set])]
    for name, part in shown.groupby("variant", sort=False):
        fig.add_trace(
            go.Bar(
                name=plot_text(name),
                x=[plot_text(m) for m in part["metric"]],
                y=part["mean"].tolist(),
                error_y={"type": "data", "array": part["sd"].fillna(0).tolist()},
                hovertemplate="%{x}<br>mean %{y:.4f}<extra>" + plot_text(name) + "</extra>",
            )
        )
    fig.update_layout(
        barmode="group",
        title={"text": "acceptance length per variant (mean ± sd)", "font": {"size": 13}},
        yaxis={"title": {"text": "acceptance length"}},
        height=420,
    )
    n_done = int((trials.get("state") == "completed").sum()) if len(trials) else 0
    rows = [[*r] for r in summary.itertuples(index=False)]
    parts = [
        f"<h1>Sweep {html.escape(sweep_name)}</h1>",
        f"<p class='note'>{len(trials)} trials, {n_done} completed. Variants are compared "
        "by their completed trials; delta is each variant's mean minus the first's.</p>",
        fig.to_html(full_html=False, include_plotlyjs=True, div_id="variants"),
        "<h2>Summary</h2>",
        table(list(summary.columns), rows),
        "<h2>Trials</h2>",
        trial_table(trials, "variant", "acceptance_length"),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(f"Sweep {sweep_name}", parts), encoding="utf-8")
    return path
