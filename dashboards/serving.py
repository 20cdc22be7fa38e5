"""Figures of a serving sweep (``serve_bench``): the train-to-serve agreement per draft, and
throughput with and without the draft against batch size in vLLM (docs/serving.md).

Pure: the wide trial table in, plotly figures out; a table without the serving columns gives
no figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.laws import fit_log_linear
from analysis.serving import batch_sizes, numeric
from dashboards._html import Table, plot_text


def _law_label(done: pd.DataFrame, x: str, y: str, name: str) -> str:
    """``name``: the token law's slope with its 95% CI, when it can be fitted."""
    fit = fit_log_linear(done[[x, y]].apply(pd.to_numeric, errors="coerce"), x, y, law="tokens")
    if fit.status != "ok":
        return name
    return f"{name}: a = {fit.a:.3f} [{fit.a_ci[0]:.3f}, {fit.a_ci[1]:.3f}], R² {fit.r2:.2f}"


def _batch_law_label(points: list[tuple[int, float]], name: str) -> str:
    """``name``: Thm 1.3's tokens/s = a*log2(b) + b0 over the points, when it can be fitted."""
    frame = pd.DataFrame(points, columns=["batch_size", "tokens_per_s"])
    fit = fit_log_linear(frame, "batch_size", "tokens_per_s", law="batch", log_base=2)
    if fit.status != "ok":
        return name
    return f"{name}: {fit.a:.1f}·log2(b) + {fit.b:.1f}, R² {fit.r2:.2f}"


def agreement_figure(done: pd.DataFrame, x: str = "pretrain.tokens") -> go.Figure | None:
    """vLLM's acceptance length and this platform's engine's, each with its 95% CI, against
    ``x``; a trial whose two CIs are disjoint (``agreement.disjoint``) marked and named, and
    each series' token law in its legend. None without the serving columns."""
    need = ("acceptance_length", "engine.acceptance_length", "agreement.disjoint")
    if x not in done.columns or not all(c in done.columns for c in need):
        return None
    xs = numeric(done, x).clip(lower=1)  # the SFT-only draft (0 tokens) drawn at 1 on a log axis
    fig = go.Figure()
    for col, name in (("acceptance_length", "vLLM"), ("engine.acceptance_length", "this engine")):
        y, lo, hi = (
            numeric(done, col),
            numeric(done, col + "_ci_low"),
            numeric(done, col + "_ci_high"),
        )
        bars = {"type": "data", "array": (hi - y).tolist(), "arrayminus": (y - lo).tolist()}
        fig.add_trace(
            go.Scatter(x=xs, y=y, mode="markers", name=_law_label(done, x, col, name), error_y=bars)
        )
    flagged = done[numeric(done, "agreement.disjoint") == 1]
    if len(flagged):
        fig.add_trace(
            go.Scatter(
                x=xs[flagged.index],
                y=numeric(flagged, "acceptance_length"),
                mode="markers",
                marker={"symbol": "x", "size": 14, "color": "red"},
                name=f"CIs disjoint ({len(flagged)}): see docs/serving.md, which acceptance length",
            )
        )
    fig.update_layout(
        title={
            "text": "train-to-serve agreement: the same draft, prompts and K in both engines",
            "font": {"size": 13},
        },
        xaxis={"title": {"text": plot_text(x)}, "type": "log"},
        yaxis={"title": {"text": "acceptance length (tokens per verification step)"}},
        height=420,
    )
    return fig


def throughput_figure(done: pd.DataFrame, x: str = "pretrain.tokens") -> go.Figure | None:
    """Output tokens/s with the draft and without (the baseline server) against batch size,
    means over the trials of each ``x``, and the speedup on the right axis (1 = break-even).
    None without ``tokens_per_s/b<b>`` columns."""
    bs = batch_sizes(done, "tokens_per_s")
    if not bs:
        return None
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    base = [float(numeric(done, f"baseline.tokens_per_s/b{b}").mean()) for b in bs]
    trials = [(b, v) for b in bs for v in numeric(done, f"baseline.tokens_per_s/b{b}").dropna()]
    label = _batch_law_label(trials, "vLLM, no draft")
    fig.add_trace(go.Scatter(x=bs, y=base, mode="lines+markers", name=label))
    groups = done.groupby(x) if x in done.columns else [("all", done)]
    for value, g in groups:
        label = f"{plot_text(x)} = {value:g}" if isinstance(value, (int, float)) else str(value)
        tps = [float(numeric(g, f"tokens_per_s/b{b}").mean()) for b in bs]
        sp = [float(numeric(g, f"speedup/b{b}").mean()) for b in bs]
        points = [(b, v) for b in bs for v in numeric(g, f"tokens_per_s/b{b}").dropna()]
        name = _batch_law_label(points, f"with draft, {label}")
        fig.add_trace(go.Scatter(x=bs, y=tps, mode="lines+markers", name=name))
        fig.add_trace(
            go.Scatter(x=bs, y=sp, mode="lines", line={"dash": "dot"}, name=f"speedup, {label}"),
            secondary_y=True,
        )
    fig.add_hline(y=1.0, line={"dash": "dash", "color": "grey"}, secondary_y=True)
    fig.update_layout(
        title={
            "text": "vLLM output tokens/s against batch size (vllm bench serve)",
            "font": {"size": 13},
        },
        xaxis={"title": {"text": "batch size (max concurrency)"}, "type": "log"},
        height=420,
    )
    fig.update_yaxes(title_text="output tokens/s", secondary_y=False)
    fig.update_yaxes(title_text="speedup over no draft", secondary_y=True)
    return fig


def serving_figures(done: pd.DataFrame, x: str = "pretrain.tokens") -> list[tuple[str, go.Figure]]:
    """(heading, figure) pairs for a serving sweep's dashboard; empty for any other sweep."""
    out = []
    for heading, fig in (
        ("Train-to-serve agreement (vLLM vs this engine)", agreement_figure(done, x)),
        ("Throughput in vLLM against batch size", throughput_figure(done, x)),
    ):
        if fig is not None:
            out.append((heading, fig))
    return out


def k_speedup_figure(parts: Sequence[tuple[str, pd.DataFrame]]) -> go.Figure | None:
    """Speedup over the plain server against batch size, one line per (condition, K) from each
    best-K table's ``speedup_by_k`` (:func:`analysis.serving.best_k_per_batch`), 1 = break-even.
    None without rows."""
    fig = go.Figure()
    for label, best in parts:
        ks = sorted({k for d in best["speedup_by_k"] for k in d})
        for k in ks:
            ys = [d.get(k, float("nan")) for d in best["speedup_by_k"]]
            name = f"{label}, K = {k:g}" if label else f"K = {k:g}"
            fig.add_trace(
                go.Scatter(x=best["batch_size"], y=ys, mode="lines+markers", name=plot_text(name))
            )
    if not fig.data:
        return None
    fig.add_hline(y=1.0, line={"dash": "dash", "color": "grey"})
    fig.update_layout(
        title={"text": "speedup over the plain vLLM server, per K drafted", "font": {"size": 13}},
        xaxis={"title": {"text": "batch size (max concurrency)"}, "type": "log"},
        yaxis={"title": {"text": "speedup (tokens/s over the same trial's plain server)"}},
        height=420,
    )
    return fig


@dataclass(frozen=True)
class ServingSection:
    """The best K per batch size in vLLM (template ``_serving.html.j2``): console lines, the
    figure of every K's speedup over b, and the table of the best K per b and condition."""

    lines: Sequence[str]
    figure: go.Figure | None
    table: Table
    template: str = field(default="_serving.html.j2", init=False)


def serving_section(
    parts: Sequence[tuple[str, pd.DataFrame]], lines: Sequence[str]
) -> ServingSection | None:
    """The section of the best-K tables ``parts`` ((group, table) pairs) and the report's
    ``lines``; None without either."""
    if not parts and not lines:
        return None
    head = [
        "group",
        "b",
        "best K",
        "speedup",
        "tok/s",
        "plain tok/s",
        "acceptance length",
        "K measured",
        "best K at edge",
    ]
    rows = [
        [
            label or "all trials",
            r.batch_size,
            r.best_num_speculative_tokens,
            round(r.speedup, 3),
            round(r.tokens_per_s, 1),
            round(r.baseline_tokens_per_s, 1),
            round(r.acceptance_length, 3),
            ", ".join(f"{k:g}" for k in sorted(r.speedup_by_k)),
            "yes" if r.best_k_at_edge else "",
        ]
        for label, best in parts
        for r in best.itertuples(index=False)
    ]
    return ServingSection(
        lines=list(lines), figure=k_speedup_figure(parts), table=Table(head, rows, sortable=True)
    )
