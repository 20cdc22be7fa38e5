"""The depth trade-off figure: what a deeper draft gains (acceptance length) and pays (ms/step).

Scylla (arXiv 2505.07858) Thm 1.2 gives acceptance length vs draft layers but leaves the cost
side open; this plots both from the same trials, with the net speedup they imply.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards._html import plot_text

SERIES = (
    ("acceptance_length", "acceptance length", False),
    ("speedup", "net speedup (×, from step costs)", False),
    ("draft.ms_per_step", "draft ms per step", True),
)
"""(metric, label, on the secondary y axis)"""


def depth_tradeoff_figure(done: pd.DataFrame, x: str = "draft.layers") -> go.Figure | None:
    """Per-trial points and per-``x`` means of acceptance length, net speedup (left axis) and
    draft ms per step (right axis); None when the table has none of these metrics."""
    present = [s for s in SERIES if s[0] in done.columns]
    if x not in done.columns or not present:
        return None
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    for metric, label, right in present:
        frame = done[[x, metric]].apply(pd.to_numeric, errors="coerce").dropna()
        means = frame.groupby(x)[metric].mean()
        fig.add_trace(
            go.Scatter(
                x=means.index.tolist(),
                y=means.tolist(),
                mode="lines+markers",
                name=label,
                line={"dash": "dot"} if right else {},
            ),
            secondary_y=right,
        )
        fig.add_trace(
            go.Scatter(
                x=frame[x].tolist(),
                y=frame[metric].tolist(),
                mode="markers",
                opacity=0.4,
                name=f"{label} (trials)",
                showlegend=False,
            ),
            secondary_y=right,
        )
    fig.update_layout(
        title={"text": "gain and cost of draft depth (means over seeds)", "font": {"size": 13}},
        xaxis={"title": {"text": plot_text(x)}},
        height=420,
    )
    fig.update_yaxes(title_text="acceptance length / speedup", secondary_y=False)
    fig.update_yaxes(title_text="draft ms per step", secondary_y=True)
    return fig
