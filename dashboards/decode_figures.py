"""The figures of a ``decode_bench`` sweep's page (:mod:`dashboards.decode_page`): the
throughput surface (b x k, tokens/s), the speedup over autoregressive decoding per b, peak
throughput vs log2 b with the Thm 1.3 fit and its band, the measured best k vs b beside the
roofline's k_opt(b) and the Eq. 4 fit, the roofline (arithmetic intensity I(b, k) vs k with
I_crit), and adaptive k against the best fixed k. Each returns None when its data is missing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.eq4 import PAPER_K_OPT, Eq4Fit, KOptFit
from analysis.laws import LogLinearFit
from analysis.numbers import fmt
from analysis.throughput import AUTO_COLUMNS, RooflineData, throughput_surface
from dashboards._html import plot_text
from dashboards.sweep_page import add_fit_line, fit_title

_CURVE_POINTS = 60
"""points on a fitted curve between the smallest and largest batch size (log-spaced)"""


def surface_figure(trials: pd.DataFrame) -> go.Figure | None:
    """Heatmap of mean tokens/s per (b, k) over the completed trials."""
    if "tokens_per_s" not in trials.columns:
        return None
    surface = throughput_surface(trials, "tokens_per_s")
    if surface.empty:
        return None
    ks = [str(k) for k in surface.columns]
    bs = [str(b) for b in surface.index]
    fig = go.Figure(
        go.Heatmap(
            z=_nan_to_none(surface.to_numpy()),
            x=ks,
            y=bs,
            colorscale="Viridis",
            colorbar={"title": {"text": "tokens/s"}},
            texttemplate="%{z:.4g}",
            hovertemplate="b=%{y}<br>k=%{x}<br>%{z:.4g} tokens/s<extra></extra>",
        )
    )
    argmax = surface.idxmax(axis=1, skipna=True).dropna()
    fig.add_trace(
        go.Scatter(
            x=[str(int(k)) for k in argmax.to_numpy()],
            y=[str(int(b)) for b in argmax.index],
            mode="markers",
            marker={"symbol": "square-open", "size": 34, "color": "white", "line": {"width": 3}},
            name="best k per b (framed; mean over all trials at b, k)",
        )
    )
    fig.update_layout(
        title={"text": "mean tokens/s over completed trials per (b, k)", "font": {"size": 13}},
        xaxis={"type": "category", "title": {"text": "num_draft_tokens k (verified tokens)"}},
        yaxis={"type": "category", "title": {"text": "batch_size b (sequences)"}},
        template="plotly_white",
        height=480,
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def speedup_figure(trials: pd.DataFrame, best: pd.DataFrame) -> go.Figure | None:
    """Speedup over autoregressive decoding per b, one line per k, the best k marked."""
    if "speedup" not in trials.columns:
        return None
    surface = throughput_surface(trials, "speedup")
    if surface.empty:
        return None
    fig = go.Figure()
    for k in surface.columns:
        col = surface[k].dropna()
        fig.add_trace(
            go.Scatter(
                x=col.index.tolist(),
                y=col.tolist(),
                mode="lines+markers",
                name=f"k = {int(k)}",
                opacity=0.6,
            )
        )
    if len(best) and "speedup" in best.columns:
        fig.add_trace(
            go.Scatter(
                x=best["batch_size"].tolist(),
                y=_nan_to_none(best["speedup"].to_numpy(dtype=float)),
                mode="lines+markers",
                line={"color": "black", "width": 3},
                marker={"symbol": "diamond", "size": 9},
                customdata=best["best_num_draft_tokens"].tolist(),
                hovertemplate="b=%{x}<br>best k=%{customdata}<br>speedup %{y:.3g}<extra></extra>",
                name="at the best k",
            )
        )
    fig.add_hline(y=1.0, line_dash="dash", line_color="gray", annotation_text="break-even (1x)")
    fig.update_layout(
        title={
            "text": "mean speedup = tokens_per_s / ar_tokens_per_s (same b, same run)",
            "font": {"size": 13},
        },
        xaxis=_batch_axis(surface.index.tolist()),
        yaxis={"title": {"text": "speedup over autoregressive (x)"}},
        template="plotly_white",
        height=460,
    )
    return fig


def peak_figure(best: pd.DataFrame, fit: LogLinearFit | None) -> go.Figure | None:
    """Peak tokens/s per b (the best k) with the Thm 1.3 fit, its bands and the AR line."""
    if not len(best):
        return None
    bs = best["batch_size"].tolist()
    std = best["peak_tokens_per_s_std"].to_numpy(dtype=float)
    fig = go.Figure()
    if fit is not None and fit.ok:
        add_fit_line(fig, fit, "fit: a*log2(b) + b0")
    fig.add_trace(
        go.Scatter(
            x=bs,
            y=_nan_to_none(best["peak_tokens_per_s"].to_numpy(dtype=float)),
            error_y={"type": "data", "array": _nan_to_none(np.nan_to_num(std)), "visible": True},
            mode="markers",
            marker={"size": 9, "color": "rgb(31, 119, 180)"},
            customdata=best["best_num_draft_tokens"].tolist(),
            hovertemplate="b=%{x}<br>best k=%{customdata}<br>%{y:.4g} tokens/s<extra></extra>",
            name="peak tokens/s (best k), ± std over seeds",
        )
    )
    ar = best["ar_tokens_per_s"].to_numpy(dtype=float)
    if np.isfinite(ar).any():
        fig.add_trace(
            go.Scatter(
                x=bs,
                y=_nan_to_none(ar),
                mode="lines+markers",
                line={"dash": "dot", "color": "gray"},
                name="autoregressive tokens/s",
            )
        )
    hf = best["hf_tokens_per_s"].to_numpy(dtype=float) if "hf_tokens_per_s" in best else None
    if hf is not None and np.isfinite(hf).any():
        keep = np.isfinite(hf)
        fig.add_trace(
            go.Scatter(
                x=[b for b, k in zip(bs, keep, strict=True) if k],
                y=hf[keep].tolist(),
                mode="markers",
                marker={"symbol": "x", "size": 10, "color": "black"},
                name="HF generate greedy tokens/s",
            )
        )
    fig.update_layout(
        title={"text": fit_title(fit, "batch_size", "peak_tokens_per_s"), "font": {"size": 13}},
        xaxis=_batch_axis(bs),
        yaxis={"title": {"text": "tokens/s (whole batch)"}},
        template="plotly_white",
        height=500,
    )
    return fig


def k_figure(
    best: pd.DataFrame,
    k_fit: KOptFit | None,
    roofline: RooflineData | None,
    auto: pd.DataFrame | None = None,
) -> go.Figure | None:
    """The measured best k per b, the Eq. 4 and log2 fits, the roofline's k_opt(b) and the
    mean k of adaptive trials; None when there is none of them."""
    predicted = _finite_k_opt(roofline.k_opt) if roofline is not None else {}
    auto_k = (
        auto[np.isfinite(auto["auto_k_mean"].to_numpy(dtype=float))]
        if auto is not None
        else pd.DataFrame(columns=list(AUTO_COLUMNS))
    )
    if not len(best) and not predicted and not len(auto_k):
        return None
    fig = go.Figure()
    bs = best["batch_size"].tolist()
    all_b = sorted(set(bs) | set(predicted) | {int(b) for b in auto_k["batch_size"]})
    grid = np.geomspace(min(all_b), max(all_b), _CURVE_POINTS) if all_b else np.array([])
    if len(best):
        fig.add_trace(
            go.Scatter(
                x=bs,
                y=best["best_num_draft_tokens"].tolist(),
                mode="markers",
                marker={"size": 10, "color": "rgb(31, 119, 180)"},
                name="measured best k",
            )
        )
    if k_fit is not None and k_fit.eq4.ok and len(grid):
        fig.add_trace(
            go.Scatter(
                x=grid.tolist(),
                y=_nan_to_none(k_fit.eq4.predict(grid)),
                mode="lines",
                line={"color": "rgb(214, 39, 40)"},
                name="Eq. 4 fit: A*sqrt(1 + B/b) - C",
            )
        )
    if k_fit is not None and k_fit.log2.ok and len(grid):
        fig.add_trace(
            go.Scatter(
                x=grid.tolist(),
                y=_nan_to_none(k_fit.log2.predict(grid)["mean"].to_numpy()),
                mode="lines",
                line={"color": "rgb(255, 127, 14)", "dash": "dash"},
                name="log2 fit: a*log2(b) + b0",
            )
        )
    if predicted and roofline is not None:
        pb = sorted(predicted)
        fig.add_trace(
            go.Scatter(
                x=pb,
                y=[predicted[b] for b in pb],
                mode="lines+markers",
                line={"color": "rgb(44, 160, 44)"},
                name=f"roofline k_opt(b), {plot_text(roofline.hardware)}",
            )
        )
    if len(auto_k):
        fig.add_trace(
            go.Scatter(
                x=auto_k["batch_size"].tolist(),
                y=auto_k["auto_k_mean"].tolist(),
                mode="markers",
                marker={"symbol": "star", "size": 12, "color": "rgb(148, 103, 189)"},
                name="auto: mean k per cycle",
            )
        )
    if len(grid):
        paper = PAPER_K_OPT
        fig.add_trace(
            go.Scatter(
                x=grid.tolist(),
                y=(paper["A"] * np.sqrt(1 + paper["B"] / grid) - paper["C"]).tolist(),
                mode="lines",
                line={"color": "gray", "dash": "dot"},
                visible="legendonly",
                name="paper Eq. 4 (Qwen2.5-72B, H800)",
            )
        )
    fig.update_layout(
        title={"text": _k_title(k_fit), "font": {"size": 13}},
        xaxis=_batch_axis(all_b),
        yaxis={"type": "log", "title": {"text": "num_draft_tokens k (log scale)"}},
        template="plotly_white",
        height=500,
    )
    return fig


def roofline_figure(roofline: RooflineData) -> go.Figure | None:
    """Arithmetic intensity I(b, k) vs k, one line per b, with I_crit."""
    data = roofline.intensity[["batch_size", "num_draft_tokens", "intensity"]].apply(
        pd.to_numeric, errors="coerce"
    )
    data = data[np.isfinite(data.to_numpy(dtype=float)).all(axis=1)]
    data = data[(data["num_draft_tokens"] > 0) & (data["intensity"] > 0)]
    if data.empty:
        return None
    fig = go.Figure()
    for b, rows in data.groupby("batch_size", sort=True):
        rows = rows.sort_values("num_draft_tokens")
        fig.add_trace(
            go.Scatter(
                x=rows["num_draft_tokens"].tolist(),
                y=rows["intensity"].tolist(),
                mode="lines",
                name=f"b = {int(b)}",
            )
        )
    predicted = _finite_k_opt(roofline.k_opt)
    if predicted and math.isfinite(roofline.i_crit):
        pb = sorted(predicted)
        fig.add_trace(
            go.Scatter(
                x=[predicted[b] for b in pb],
                y=[roofline.i_crit] * len(pb),
                mode="markers",
                marker={"symbol": "circle-open", "size": 10, "color": "black"},
                customdata=pb,
                hovertemplate="b=%{customdata}<br>k_opt=%{x:.3g}<extra></extra>",
                name="k_opt(b): I(b, k) = I_crit",
            )
        )
    if math.isfinite(roofline.i_crit) and roofline.i_crit > 0:
        fig.add_hline(
            y=roofline.i_crit,
            line_dash="dash",
            line_color="rgb(214, 39, 40)",
            annotation_text=f"I_crit = {fmt(roofline.i_crit)} FLOP/byte: "
            f"{plot_text(roofline.hardware)}",
            annotation_position="top left",
        )
    fig.update_layout(
        title={
            "text": "FLOPs / bytes of one decoding step (Scylla Sec. 3.2, Appendix C); "
            "memory-bound below I_crit, compute-bound above",
            "font": {"size": 13},
        },
        xaxis={"type": "log", "title": {"text": "num_draft_tokens k (log scale)"}},
        yaxis={"type": "log", "title": {"text": "arithmetic intensity (FLOP/byte, log scale)"}},
        template="plotly_white",
        height=500,
    )
    return fig


def _batch_axis(batch_sizes: Sequence[Any]) -> dict[str, Any]:
    """A log x axis labelled at the batch sizes (log2-spaced grids sit evenly on it)."""
    ticks = sorted({int(b) for b in batch_sizes})
    return {
        "type": "log",
        "title": {"text": "batch_size b (sequences, log scale)"},
        "tickvals": ticks,
        "ticktext": [str(b) for b in ticks],
    }


def _k_title(k_fit: KOptFit | None) -> str:
    if k_fit is None:
        return "best k vs b: no fit"
    log2 = k_fit.log2
    if log2.ok:
        alt = (
            f"log2: k = {fmt(log2.a)}*log2(b) + {fmt(log2.b)}, R² = {fmt(log2.r2, '.3f')}, "
            f"n = {log2.n}"
        )
    else:
        alt = f"log2: no fit ({plot_text(log2.status)})"
    return f"{_eq4_summary(k_fit.eq4)}<br>{alt}"


def _eq4_summary(fit: Eq4Fit) -> str:
    if not fit.ok:
        return f"Eq. 4: no fit ({plot_text(fit.status)})"
    return (
        f"Eq. 4: k = {fmt(fit.A)}*sqrt(1 + {fmt(fit.B)}/b) - {fmt(fit.C)}, "
        f"R² = {fmt(fit.r2, '.3f')}, n = {fit.n}"
    )


def auto_figure(auto: pd.DataFrame) -> go.Figure | None:
    """Bars of auto / best fixed tokens/s per b: above 1 adaptive k wins, below it loses."""
    rows = auto[np.isfinite(auto["ratio"].to_numpy(dtype=float))]
    if not len(rows):
        return None
    ratio = rows["ratio"].to_numpy(dtype=float)
    custom = np.column_stack(
        [
            rows["auto_tokens_per_s"].to_numpy(dtype=float),
            rows["best_tokens_per_s"].to_numpy(dtype=float),
            rows["best_num_draft_tokens"].to_numpy(dtype=float),
            rows["auto_k_mean"].to_numpy(dtype=float),
        ]
    )
    fig = go.Figure(
        go.Bar(
            x=[str(int(b)) for b in rows["batch_size"]],
            y=ratio.tolist(),
            marker={"color": ["rgb(44, 160, 44)" if r > 1 else "rgb(214, 39, 40)" for r in ratio]},
            text=[f"{r:.2f}x" for r in ratio],
            textposition="outside",
            customdata=_nan_to_none(custom),
            hovertemplate="b=%{x}<br>auto %{customdata[0]:.4g} tokens/s (mean k "
            "%{customdata[3]:.3g})<br>best fixed k=%{customdata[2]}: %{customdata[1]:.4g} "
            "tokens/s<br>ratio %{y:.3f}<extra></extra>",
            name="auto / best fixed k",
        )
    )
    fig.add_hline(y=1.0, line_dash="dash", line_color="gray", annotation_text="equal (1x)")
    fig.update_layout(
        title={
            "text": "tokens/s with num_draft_tokens: auto / tokens/s at the best fixed k "
            "(green: auto wins, red: it loses)",
            "font": {"size": 13},
        },
        xaxis={"type": "category", "title": {"text": "batch_size b (sequences)"}},
        yaxis={"title": {"text": "auto / best fixed k (x)"}},
        template="plotly_white",
        height=420,
        showlegend=False,
    )
    return fig


def _finite_k_opt(k_opt: Mapping[int, float]) -> dict[int, float]:
    out = {}
    for b, k in k_opt.items():
        value = float(k) if k is not None else math.nan
        if math.isfinite(value) and value > 0 and int(b) > 0:
            out[int(b)] = value
    return out


def _nan_to_none(values: np.ndarray) -> list[Any]:
    arr = np.asarray(values, dtype=float)
    if arr.ndim == 2:
        return [_nan_to_none(row) for row in arr]
    return [float(v) if math.isfinite(v) else None for v in arr]
