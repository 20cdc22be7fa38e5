"""One self-contained HTML dashboard per sweep: the law and its checks, residuals, per-prompt-set
curves, training-loss curves, the paper beside us, a sortable trial table.

Reads the sweep's trial table, its :class:`analysis.review.LawReview` and training series;
never loads models. plotly.js is inlined once, so the page works offline (no CDN).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from analysis.laws import LogLinearFit, baseline_summary
from analysis.numbers import fmt
from analysis.paper import PAPER_CONSTANTS
from analysis.review import LawReview
from dashboards._html import (
    Section,
    Table,
    greedy_check,
    plot_text,
    random_weight_trials,
    shown,
    trials_table,
    write_page,
)
from dashboards.review_tables import fit_numbers, paper_table, review_table

_LINE_POINTS = 60
"""points on the fitted curve between the smallest and largest fitted x (log-spaced)"""

LOSS_SERIES = ("pretrain/loss", "sft/loss")
"""training series drawn as loss curves (per optimiser step), one panel each"""

Curves = Mapping[str, Mapping[str, Sequence[float]]]
"""trial key -> series name -> values per step"""


def write_sweep_dashboard(
    path: Path,
    *,
    sweep_name: str,
    trials: pd.DataFrame,
    review: LawReview | None,
    x: str = "pretrain.tokens",
    y: str = "acceptance_length",
    per_set_prefix: str = "acceptance_length/",
    extra: list[tuple[str, go.Figure]] | None = None,
    curves: Curves | None = None,
    description: str = "",
    sections: Sequence[Section] = (),
) -> Path:
    """Write the sweep's dashboard to ``path`` (one HTML file, plotly.js inlined) and return it.

    ``description`` is the sweep's spec ``description`` (shown, escaped, under the heading);
    ``sections`` (the cost, the design) close the page.

    ``trials`` is the wide trial table: ``trial_key``, ``state``, optional ``error``, override
    columns (``x``, ``seed``, ...) and metric columns (``y`` and ``per_set_prefix + set``).
    Only ``state == "completed"`` rows are plotted; every row is listed in a sortable table.
    Figures (div ids): ``fit`` -- ``y`` vs ``x`` on a log axis with the fitted
    ``a*log_base(x) + b`` (Scylla, arXiv 2505.07858, Thm 1.1/1.2), its HC3 confidence band,
    the prediction band of one new trial, the saturating alternative and the x == 0 SFT-only
    baseline; ``residuals``; ``per-set`` -- ``y`` per prompt set; ``loss`` -- training loss
    per step from ``curves``; then ``extra`` (heading, figure) pairs. Tables: the fit and its
    checks, the paper's constants beside ours, the trials.
    """
    done = trials[trials["state"] == "completed"] if "state" in trials.columns else trials[:0]
    n_failed = int((trials["state"] == "failed").sum()) if "state" in trials.columns else 0
    fit = review.fit if review is not None else None
    figures: list[tuple[str, str, go.Figure | None, str]] = [
        ("fit", f"{y} vs {x}", _fit_figure(done, review, x, y), ""),
        ("residuals", "Residuals of the fit", _residual_figure(fit, x), "No fit, no residuals."),
        (
            "per-set",
            f"{y} per prompt set",
            _per_set_figure(done, x, per_set_prefix),
            f"No columns starting with {per_set_prefix}.",
        ),
        (
            "loss",
            "Training loss",
            _loss_figure(curves or {}, trials, x),
            "No training-loss series recorded for these trials.",
        ),
        *[(f"extra-{i}", title, f, "") for i, (title, f) in enumerate(extra or [])],
    ]
    if review is None:  # a diagnostic sweep's page lists what it has, not what it lacks
        figures = [f for f in figures if f[2] is not None or f[0] == "fit"]
    note = f"{len(trials)} trials, {len(done)} completed, {n_failed} failed."
    if review is not None:  # a law page; without one (a diagnostic sweep) no baseline talk
        note += (
            f" {review.counts.text()}. Only completed trials are plotted; trials at {x} = 0 "
            "(SFT-only baseline) cannot sit on a log axis and are drawn as a horizontal line."
        )
    return write_page(
        path,
        "sweep.html.j2",
        title=f"Sweep {sweep_name}",
        description=description.strip(),
        random_weights=random_weight_trials(trials),
        greedy=greedy_check(trials),
        note=note,
        figures=figures,
        review=review_table(review) if review is not None else None,
        paper=paper_table(review.paper) if review is not None and review.paper else None,
        trials=trial_table(trials, x, y),
        sections=sections,
    )


def fit_title(fit: LogLinearFit | None, x: str, y: str) -> str:
    """Figure title: the fit form with a (CI), b (CI), R² and n, or why there is no fit line."""
    if fit is None:
        return plot_text(f"{y} vs {x}: no fit")
    if not fit.ok:
        return plot_text(f"{fit.form}: no fit line ({fit.status})")
    return f"{plot_text(fit.form)}<br>{plot_text(fit_numbers(fit))}"


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


def _fit_figure(done: pd.DataFrame, review: LawReview | None, x: str, y: str) -> go.Figure:
    fit = review.fit if review is not None else None
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
    if review is not None and review.saturating.ok and fit is not None:
        sat = review.saturating
        grid = fit_line(fit)["x"].to_numpy()
        fig.add_trace(
            go.Scatter(
                x=grid.tolist(),
                y=np.round(sat.predict(grid), 6).tolist(),
                mode="lines",
                line={"color": "rgb(44, 160, 44)", "dash": "dot"},
                name=f"saturating: c - A*x^-alpha (ΔAIC {fmt(review.forms.delta, '+.2f')})",
            )
        )
    _add_baseline(fig, done, x, y)
    fig.update_layout(
        title={"text": fit_title(fit, x, y), "font": {"size": 13}},
        xaxis={"type": "log", "title": {"text": plot_text(f"{x} (log scale)")}},
        yaxis={"title": {"text": plot_text(y)}},
        template="plotly_white",
        height=520,
    )
    return fig


def add_fit_line(
    fig: go.Figure, fit: LogLinearFit, name: str | None = None, rgb: str = "214, 39, 40"
) -> None:
    """Add the fitted curve (named ``name``, default its form, colour ``rgb`` as "r, g, b"),
    its confidence band and the prediction band of one new trial."""
    line = fit_line(fit)
    level = round(100 * (1 - fit.alpha))
    band_x = line["x"].tolist()
    bands = (
        ("obs", 0.06, f"{level}% prediction interval (one trial)"),
        ("mean", 0.15, f"{level}% CI of the mean ({fit.cov_type})"),
    )
    for col, opacity, band in bands:
        fig.add_trace(
            go.Scatter(
                x=band_x + band_x[::-1],
                y=line[f"{col}_hi"].tolist() + line[f"{col}_lo"].tolist()[::-1],
                fill="toself",
                fillcolor=f"rgba({rgb}, {opacity})",
                line={"width": 0},
                hoverinfo="skip",
                name=band,
            )
        )
    fig.add_trace(
        go.Scatter(
            x=band_x,
            y=line["mean"].tolist(),
            mode="lines",
            line={"color": f"rgb({rgb})"},
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
        annotation_text=f"SFT-only baseline ({plot_text(x)} = 0): {fmt(mean)}"
        + (f" ± {fmt(std, '.2g')}" if n > 1 else "")
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


def fit_rows(fit: LogLinearFit, paper_setting: str) -> list[list[object]]:
    """(field, value) rows of a fit, plus the paper's constants for its law measured on
    ``paper_setting`` (e.g. "7B-class targets on GPUs") when the paper has that law."""
    names = ["law", "form", "status", "a", "a_ci", "b", "b_ci", "r2", "r2_adj", "n", "excluded"]
    names += ["cov_type", "alpha"]
    rows: list[list[object]] = [[k, shown(getattr(fit, k))] for k in names]
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


def trial_table(trials: pd.DataFrame, x: str, y: str) -> Table:
    """Every trial as a sortable table (id "trials"): key, state, x, seed, the other overrides,
    the metrics, the error text."""
    first = [c for c in ("trial_key", "state", x, "seed") if c in trials.columns]
    rest = [c for c in trials.columns if c not in first and c != "error"]
    overrides = [c for c in rest if isinstance(c, str) and "." in c and c != y]
    metrics = [c for c in rest if c not in overrides and c != y]
    metrics = ([y] if y in trials.columns else []) + metrics
    columns = (
        first
        + metrics[:1]
        + overrides
        + metrics[1:]
        + (["error"] if "error" in trials.columns else [])
    )
    return trials_table(trials, columns)


def _residual_figure(fit: LogLinearFit | None, x: str) -> go.Figure | None:
    if fit is None or not fit.ok:
        return None
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=list(fit.x), y=[round(r, 6) for r in fit.residuals], mode="markers", name="residual"
        )
    )
    fig.add_hline(y=0, line_color="gray")
    fig.update_layout(
        title={
            "text": "y - fitted, per trial (a pattern means the form is wrong)",
            "font": {"size": 13},
        },
        xaxis={"type": "log", "title": {"text": plot_text(f"{x} (log scale)")}},
        yaxis={"title": {"text": "residual"}},
        template="plotly_white",
        height=320,
    )
    return fig


def _loss_figure(curves: Curves, trials: pd.DataFrame, x: str) -> go.Figure | None:
    panels = [name for name in LOSS_SERIES if any(name in c for c in curves.values())]
    if not panels:
        return None
    x_of = dict(zip(trials.get("trial_key", []), _numeric(trials, x), strict=False))
    strides = {  # long series are averaged down: each point covers <stage>/series_stride steps
        stage: dict(
            zip(
                trials.get("trial_key", []),
                _numeric(trials, f"{stage}/series_stride"),
                strict=False,
            )
        )
        for stage in ("pretrain", "sft")
    }
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=panels)
    palette = qualitative.Plotly
    colour = {k: palette[i % len(palette)] for i, k in enumerate(curves)}  # same in every panel
    shown: set[str] = set()  # a trial's legend entry, once, from its first panel
    state = trials.get("state", pd.Series(dtype=str))
    failed = set(trials.get("trial_key", pd.Series(dtype=str))[state == "failed"])
    for col, name in enumerate(panels, start=1):
        for key, series in curves.items():
            values = series.get(name)
            if not values:
                continue
            xv = x_of.get(key, math.nan)
            stride = strides.get(name.split("/")[0], {}).get(key, 1.0)
            stride = int(stride) if math.isfinite(stride) and stride >= 1 else 1
            label = f"{plot_text(key)} ({plot_text(x)} = {fmt(xv, '.6g')})"
            if key in failed:
                label += " (failed)"
            fig.add_trace(
                go.Scatter(
                    x=[stride * (i + 1) for i in range(len(values))],  # a point: stride steps
                    y=[None if not math.isfinite(v) else round(v, 6) for v in values],
                    mode="lines" if len(values) > 2 else "lines+markers",
                    line={"color": colour[key]},
                    name=label,
                    legendgroup=key,
                    showlegend=key not in shown,
                ),
                row=1,
                col=col,
            )
            shown.add(key)
        fig.update_xaxes(title_text="optimiser step", row=1, col=col)
        fig.update_yaxes(type="log", row=1, col=col)
    fig.update_yaxes(title_text="loss (log scale)", row=1, col=1)
    fig.update_layout(template="plotly_white", height=420)
    return fig
