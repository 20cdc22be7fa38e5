"""The page of a sweep that fits no law: its trials, tabulated, and one metric per grid point.

Used for workloads whose registry ``report`` is ``"table"`` (the ``sleep`` diagnostic) and for a
law workload's sweep whose grid varies no law axis. It says what the sweep measured and nothing
about laws, fits or baselines. plotly.js is inlined once, so the page works offline (no CDN).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboards._html import Section, plot_text, write_page
from dashboards.sweep_page import trial_table


def write_table_dashboard(
    path: Path,
    *,
    sweep_name: str,
    trials: pd.DataFrame,
    x: str,
    y: str | None,
    description: str = "",
    notes: Sequence[str] = (),
    sections: Sequence[Section] = (),
) -> Path:
    """Write the page to ``path`` (one HTML file) and return it.

    ``trials`` is the wide trial table (``trial_key``, ``state``, optional ``error``, override
    and metric columns). The figure (div id "values") shows ``y`` per ``x`` over the completed
    trials when ``y`` is given and some completed trial reports it; ``notes`` are lines shown
    under the counts (e.g. why no law is fitted). ``description`` is the sweep's spec
    ``description``; ``sections`` (the cost, the design) close the page.
    """
    states = trials["state"].astype(str) if "state" in trials.columns else pd.Series(dtype=str)
    done = trials[states == "completed"] if len(states) else trials[:0]
    n_failed = int((states == "failed").sum())
    fig = _values_figure(done, x, y) if y is not None else None
    return write_page(
        path,
        "table.html.j2",
        title=f"Sweep {sweep_name}",
        description=description.strip(),
        random_weights=0,
        counts=f"{len(trials)} trials, {len(done)} completed, {n_failed} failed.",
        notes=list(notes),
        figure=fig,
        figure_heading=f"{y} per {x}",
        trials=trial_table(trials, x, y or ""),
        sections=sections,
    )


def _values_figure(done: pd.DataFrame, x: str, y: str) -> go.Figure | None:
    """``y`` per ``x`` (markers, one per completed trial), or None when no trial reports y."""
    if y not in done.columns or x not in done.columns:
        return None
    ys = pd.to_numeric(done[y], errors="coerce").to_numpy(dtype=float)
    keep = np.isfinite(ys)
    if not keep.any():
        return None
    raw = done[x][keep]
    numeric = pd.to_numeric(raw, errors="coerce")
    xs = numeric.tolist() if numeric.notna().all() else [plot_text(v) for v in raw]
    keys = done["trial_key"][keep] if "trial_key" in done.columns else pd.Series([""] * len(raw))
    fig = go.Figure(
        go.Scatter(
            x=xs,
            y=ys[keep].tolist(),
            mode="markers",
            name=plot_text(y),
            customdata=[[plot_text(k)] for k in keys],
            hovertemplate="trial %{customdata[0]}<br>x=%{x}<br>y=%{y}<extra></extra>",
        )
    )
    fig.update_layout(
        title={"text": plot_text(f"{y} per {x}, completed trials"), "font": {"size": 13}},
        xaxis={"title": {"text": plot_text(x)}},
        yaxis={"title": {"text": plot_text(y)}},
        template="plotly_white",
        height=420,
    )
    return fig
