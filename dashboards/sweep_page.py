"""One self-contained HTML dashboard per sweep: the law fit, per-prompt-set curves, tables.

Reads the sweep's trial table and its :class:`analysis.laws.LogLinearFit`; never loads models.
plotly.js is inlined once, so the page works offline (no CDN).
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.laws import PAPER_CONSTANTS, LogLinearFit, baseline_summary
from dashboards._html import page, plot_text, table

_LINE_POINTS = 60
"""points on the fitted curve between the smallest and largest fitted x (log-spaced)"""


def write_sweep_dashboard(
    path: Path,
    *,
    sweep_name: str,
    trials: pd.DataFrame,
    fit: LogLinearFit | None,
    x: str = "pretrain.tokens",
    y: str = "acceptance_length",
    per_set_prefix: str = "acceptance_length/",
    extra: list[tuple[str, go.Figure]] | None = None,
) -> Path:
    """Write the sweep's dashboard to ``path`` (one HTML file, plotly.js inlined) and return it.

    ``trials`` is the wide trial table: ``trial_key``, ``state``, optional ``error``, override
    columns (``x``, ``seed``, ...) and metric columns (``y`` and ``per_set_prefix + set``).
    Only ``state == "completed"`` rows are plotted; every row is listed. The first figure is
    ``y`` vs ``x`` on a log axis with the fitted ``a*log_base(x) + b`` and its confidence band
    (Scylla, arXiv 2505.07858, Thm 1.1/1.2) and the x == 0 SFT-only baseline as a dashed line;
    the second is ``y`` per prompt set vs ``x``; ``extra`` (heading, figure) pairs follow.
    """
    done = trials[trials["state"] == "completed"] if "state" in trials.columns else trials[:0]
    n_failed = int((trials["state"] == "failed").sum()) if "state" in trials.columns else 0
    fig_fit = _fit_figure(done, fit, x, y)
    fig_sets = _per_set_figure(done, x, per_set_prefix)
    parts = [
        f"<h1>Sweep {html.escape(sweep_name)}</h1>",
        f"<p class='note'>{len(trials)} trials, {len(done)} completed, {n_failed} failed. "
        f"Only completed trials are plotted; trials at {html.escape(x)} = 0 (SFT-only "
        "baseline) cannot sit on a log axis and are drawn as a horizontal line.</p>",
        f"<h2>{html.escape(y)} vs {html.escape(x)}</h2>",
        fig_fit.to_html(full_html=False, include_plotlyjs=True, div_id="fit"),
        f"<h2>{html.escape(y)} per prompt set</h2>",
        (
            fig_sets.to_html(full_html=False, include_plotlyjs=False, div_id="per-set")
            if fig_sets is not None
            else f"<p class='note'>No columns starting with {html.escape(per_set_prefix)}.</p>"
        ),
        *[
            f"<h2>{html.escape(title)}</h2>"
            + f.to_html(full_html=False, include_plotlyjs=False, div_id=f"extra-{i}")
            for i, (title, f) in enumerate(extra or [])
        ],
        "<h2>Fit</h2>",
        _fit_table(fit),
        "<h2>Trials</h2>",
        trial_table(trials, x, y),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(f"Sweep {sweep_name}", parts), encoding="utf-8")
    return path


def fit_title(fit: LogLinearFit | None, x: str, y: str) -> str:
    """Figure title: the fit form with a (CI), b (CI), R² and n, or why there is no fit line."""
    if fit is None:
        return plot_text(f"{y} vs {x}: no fit")
    if not fit.ok:
        return plot_text(f"{fit.form}: no fit line ({fit.status})")
    level = round(100 * (1 - fit.alpha))
    return (
        f"{plot_text(fit.form)}<br>a = {fit.a:.4g} [{fit.a_ci[0]:.4g}, {fit.a_ci[1]:.4g}], "
        f"b = {fit.b:.4g} [{fit.b_ci[0]:.4g}, {fit.b_ci[1]:.4g}] ({level}% CI), "
        f"R² = {fit.r2:.3f}, n = {fit.n}"
    )


def fit_line(fit: LogLinearFit) -> pd.DataFrame:
    """Fitted mean and band (columns of :meth:`LogLinearFit.predict`) over the fitted x range.

    The x grid is log-spaced from the smallest to the largest fitted x and includes every fitted
    x; values are rounded to 6 decimals, as they appear in the figure data.
    """
    xs = np.asarray(fit.x, dtype=float)
    grid = np.geomspace(xs.min(), xs.max(), _LINE_POINTS)
    grid = np.unique(np.concatenate([grid, xs]))
    return fit.predict(grid, alpha=fit.alpha).round(6)


def _numeric(frame: pd.DataFrame, column: str) -> np.ndarray:
    if column not in frame.columns:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)


def _fit_figure(done: pd.DataFrame, fit: LogLinearFit | None, x: str, y: str) -> go.Figure:
    fig = go.Figure()
    xs, ys = _numeric(done, x), _numeric(done, y)
    on_axis = (xs > 0) & np.isfinite(ys)
    keys = (
        done["trial_key"].astype(str)
        if "trial_key" in done.columns
        else pd.Series([""] * len(done))
    )
    seeds = done["seed"].astype(str) if "seed" in done.columns else pd.Series([""] * len(done))
    custom = [[plot_text(k), plot_text(s)] for k, s in zip(keys, seeds, strict=True)]
    fig.add_trace(
        go.Scatter(
            x=xs[on_axis].tolist(),
            y=ys[on_axis].tolist(),
            mode="markers",
            name="trials",
            customdata=[c for c, keep in zip(custom, on_axis, strict=True) if keep],
            hovertemplate="trial %{customdata[0]}<br>seed %{customdata[1]}"
            "<br>x=%{x}<br>y=%{y}<extra></extra>",
        )
    )
    if fit is not None and fit.ok:
        add_fit_line(fig, fit)
    _add_baseline(fig, done, x, y)
    fig.update_layout(
        title={"text": fit_title(fit, x, y), "font": {"size": 13}},
        xaxis={"type": "log", "title": {"text": plot_text(f"{x} (log scale)")}},
        yaxis={"title": {"text": plot_text(y)}},
        template="plotly_white",
        height=520,
    )
    return fig


def add_fit_line(fig: go.Figure, fit: LogLinearFit, name: str | None = None) -> None:
    """Add the fitted curve (named ``name``, default its form) and its confidence band."""
    line = fit_line(fit)
    level = round(100 * (1 - fit.alpha))
    band_x = line["x"].tolist()
    fig.add_trace(
        go.Scatter(
            x=band_x + band_x[::-1],
            y=line["mean_hi"].tolist() + line["mean_lo"].tolist()[::-1],
            fill="toself",
            fillcolor="rgba(214, 39, 40, 0.15)",
            line={"width": 0},
            hoverinfo="skip",
            name=f"{level}% CI of the mean",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=band_x,
            y=line["mean"].tolist(),
            mode="lines",
            line={"color": "rgb(214, 39, 40)"},
            name=plot_text(name or f"fit: a*log{fit.log_base}(x) + b"),
        )
    )


def _add_baseline(fig: go.Figure, done: pd.DataFrame, x: str, y: str) -> None:
    base = baseline_summary(done, x, y)
    if base["n"] == 0:
        return
    mean, std, n = float(base["mean"]), float(base["std"]), int(base["n"])
    if n > 1 and math.isfinite(std):
        fig.add_hrect(y0=mean - std, y1=mean + std, fillcolor="gray", opacity=0.12, line_width=0)
    fig.add_hline(
        y=mean,
        line_dash="dash",
        line_color="gray",
        annotation_text=f"SFT-only baseline ({plot_text(x)} = 0): {mean:.4g}"
        + (f" ± {std:.2g}" if n > 1 else "")
        + f", n = {n}",
        annotation_position="bottom right",
    )


def _per_set_figure(done: pd.DataFrame, x: str, prefix: str) -> go.Figure | None:
    columns = [c for c in done.columns if isinstance(c, str) and c.startswith(prefix)]
    if not columns:
        return None
    fig = go.Figure()
    xs = _numeric(done, x)
    for column in columns:
        ys = _numeric(done, column)
        keep = (xs > 0) & np.isfinite(ys)
        means = pd.Series(ys[keep]).groupby(xs[keep]).mean()
        fig.add_trace(
            go.Scatter(
                x=means.index.tolist(),
                y=means.tolist(),
                mode="lines+markers",
                name=plot_text(column[len(prefix) :]),
            )
        )
    fig.update_layout(
        title={"text": "mean over seeds per prompt set", "font": {"size": 13}},
        xaxis={"type": "log", "title": {"text": plot_text(f"{x} (log scale)")}},
        yaxis={"title": {"text": plot_text(prefix.rstrip("/"))}},
        template="plotly_white",
        height=420,
    )
    return fig


def _fit_table(fit: LogLinearFit | None) -> str:
    if fit is None:
        return "<p class='note'>No fit was made for this sweep.</p>"
    return table(["field", "value"], fit_rows(fit, "7B-class targets on GPUs"))


def fit_rows(fit: LogLinearFit, paper_setting: str) -> list[list[object]]:
    """(field, value) rows of a fit, plus the paper's constants for its law measured on
    ``paper_setting`` (e.g. "7B-class targets on GPUs") when the paper has that law."""
    d = fit.to_dict()
    names = ["law", "form", "status", "a", "a_ci", "b", "b_ci", "r2", "n", "excluded", "alpha"]
    rows: list[list[object]] = [[k, d[k]] for k in names]
    paper = PAPER_CONSTANTS.get(fit.law)
    if paper is not None:
        rows.append(
            [
                "paper",
                f"{paper['source']}: a = {paper['a']}, b = {paper['b']} "
                f"(x in {paper['x_unit']}; {paper_setting})",
            ]
        )
    return rows


def trial_table(trials: pd.DataFrame, x: str, y: str) -> str:
    first = [c for c in ("trial_key", "state", x, "seed") if c in trials.columns]
    rest = [c for c in trials.columns if c not in first and c != "error"]
    overrides = [c for c in rest if isinstance(c, str) and "." in c and c != y]
    metrics = [c for c in rest if c not in overrides]
    columns = first + overrides + metrics + (["error"] if "error" in trials.columns else [])
    rows = [[_cell(v) for v in row] for row in trials[columns].itertuples(index=False)]
    css = ["error" if c == "error" else "" for c in columns]
    return table([str(c) for c in columns], rows, css=css)


def _cell(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    if value is pd.NA or value is pd.NaT:
        return None
    return value
