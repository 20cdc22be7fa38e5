"""The figure of acceptance during training: each trial's checks per stage beside its final
acceptance length (``eval.during_training_every`` of draft_train)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from dashboards._html import plot_text

Checks = Mapping[str, Mapping[str, tuple[Sequence[float], Sequence[float]]]]
"""trial key -> stage (pretrain, sft) -> (the stage's tokens seen at each check, the acceptance
length measured there)"""

STAGES = ("pretrain", "sft")


def checks_figure(
    checks: Checks, trials: pd.DataFrame, y: str = "acceptance_length"
) -> go.Figure | None:
    """One panel per stage with checks: acceptance length (tokens per cycle) against the stage's
    tokens seen, a line per trial, labelled by its variant or key; the SFT panel also marks each
    trial's final ``y`` (all prompts) at its last check. None when no trial has checks."""
    panels = [st for st in STAGES if any(st in c and c[st][0] for c in checks.values())]
    if not panels:
        return None
    rows = trials.set_index("trial_key") if "trial_key" in trials.columns else pd.DataFrame()
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[f"during {p}" for p in panels])
    palette = qualitative.Plotly
    colour = {k: palette[i % len(palette)] for i, k in enumerate(checks)}
    for col, stage in enumerate(panels, start=1):
        for key, per_stage in checks.items():
            xs, ys = per_stage.get(stage, ((), ()))
            if not xs:
                continue
            label = _label(key, rows)
            fig.add_trace(
                go.Scatter(
                    x=list(xs),
                    y=[round(v, 6) for v in ys],
                    mode="lines+markers",
                    line={"color": colour[key]},
                    name=label,
                    legendgroup=key,
                    showlegend=col == 1 or stage not in per_stage or len(panels) == 1,
                ),
                row=1,
                col=col,
            )
            final = _final(key, rows, y)
            if stage == "sft" and final is not None:
                fig.add_trace(
                    go.Scatter(
                        x=[xs[-1]],
                        y=[round(final, 6)],
                        mode="markers",
                        marker={"symbol": "star", "size": 12, "color": colour[key]},
                        name=f"{label}: final ({y})",
                        legendgroup=key,
                        showlegend=False,
                    ),
                    row=1,
                    col=col,
                )
        fig.update_xaxes(title_text=f"{stage} tokens seen", row=1, col=col)
    fig.update_yaxes(title_text="acceptance length", row=1, col=1)
    fig.update_layout(
        template="plotly_white",
        height=420,
        title={
            "text": "acceptance during training (a few prompts per set); star: the final "
            "evaluation on every prompt",
            "font": {"size": 13},
        },
    )
    return fig


def _label(key: str, rows: pd.DataFrame) -> str:
    variant = rows["variant"].get(key) if "variant" in rows.columns else None
    tokens = rows["pretrain.tokens"].get(key) if "pretrain.tokens" in rows.columns else None
    seed = rows["seed"].get(key) if "seed" in rows.columns else None
    parts = [str(variant) if isinstance(variant, str) else key[:8]]
    if tokens is not None and not pd.isna(tokens):
        parts.append(f"T={int(tokens)}")
    if seed is not None and not pd.isna(seed):
        parts.append(f"seed {int(seed)}")
    return plot_text(" ".join(parts))


def _final(key: str, rows: pd.DataFrame, y: str) -> float | None:
    if y not in rows.columns or key not in rows.index:
        return None
    value = pd.to_numeric(pd.Series([rows[y].get(key)]), errors="coerce").iloc[0]
    return float(value) if math.isfinite(value) else None
