"""The plan page (``<run root>/<plan>/plan.html``): the recommendation of ``orchestrator plan``,
the curves it came from and every interval, each figure beyond the measured range labelled.

Reads the plan as plain data (:func:`orchestrator.planning.plan.make_plan`), never the store.
Figures: acceptance length vs pretraining tokens (measured trials, the law with its mean and
one-trial bands, the planned budget; div id ``tokens``), acceptance vs k (the decode sweep's
trials and both tau(k) forms; div id ``tau_k``) and the speedup per batch size with its
interval (div id ``speedup``). plotly.js is inlined once, so the page works offline.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go

from analysis.numbers import fmt, fmt_interval
from dashboards._html import Html, page, plot_text, table

__all__ = ["write_plan_page"]


def _labels(labels: Sequence[str]) -> Html:
    if not labels:
        return Html("<span class='note'>within the measured range</span>")
    return Html("<br>".join(f"<b class='error'>{html.escape(x)}</b>" for x in labels))


def _tokens_figure(plan: Mapping[str, Any]) -> go.Figure:
    law = plan["laws"]["tokens"]
    preds = plan["predictions"]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(x=law["x"], y=law["y"], mode="markers", name="measured trials (fitted)")
    )
    held = (plan.get("holdout") or {}).get("rows") or []
    if held:
        fig.add_trace(
            go.Scatter(
                x=[r["x"] for r in held],
                y=[r["y"] for r in held],
                mode="markers",
                marker={"symbol": "x", "size": 10},
                name="held-out trials",
            )
        )
    xs = [p["tokens"] for p in preds]
    for key, name, dash in (
        ("obs_ci", "one trial, 95%", "dot"),
        ("mean_ci", "the law's value, 95%", "dash"),
    ):
        for i in (0, 1):
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=[p[key][i] for p in preds],
                    mode="lines",
                    line={"dash": dash, "width": 1},
                    name=name,
                    showlegend=i == 0,
                )
            )
    fig.add_trace(
        go.Scatter(x=xs, y=[p["acceptance_length"] for p in preds], mode="lines", name="law")
    )
    t = plan["training"]
    fig.add_trace(
        go.Scatter(
            x=[t["tokens"]],
            y=[t["acceptance_length"]],
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [t["acceptance_ci"][1] - t["acceptance_length"]],
                "arrayminus": [t["acceptance_length"] - t["acceptance_ci"][0]],
            },
            mode="markers",
            marker={"size": 12, "symbol": "star"},
            name=plot_text("planned budget" + (" (extrapolated)" if t["labels"] else "")),
        )
    )
    fig.update_layout(
        xaxis={"type": "log", "title": {"text": "pretraining tokens"}},
        yaxis={"title": {"text": "acceptance length (tokens per cycle)"}},
        margin={"t": 30},
    )
    return fig


def _tau_k_figure(plan: Mapping[str, Any], measured: Sequence[Mapping[str, Any]]) -> go.Figure:
    fits = plan["laws"]["tau_k"]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[m["k"] for m in measured],
            y=[m["acceptance_length"] for m in measured],
            mode="markers",
            name="decode sweep trials",
        )
    )
    ks = np.arange(2, max(fits["ks"]) + 1)
    for form, f in fits["forms"].items():
        p = f["params"]
        eq8 = form == "eq8"
        ys = p["A"] - p["B"] * p["r"] ** ks if eq8 else p["a"] * np.log2(ks) + p["b"]
        chosen = " (used)" if form == fits["chosen"] else ""
        fig.add_trace(
            go.Scatter(
                x=ks.tolist(),
                y=np.clip(ys, 1, ks).tolist(),
                mode="lines",
                name=plot_text(f"{f['form']}, AICc {fmt(f['aicc'], '.1f')}{chosen}"),
            )
        )
    g = plan["serving"].get("rescale")
    if g is not None and math.isfinite(g) and g != 1 and ks.size:
        chosen = fits["forms"][fits["chosen"]]["params"]
        base = (
            chosen["A"] - chosen["B"] * chosen["r"] ** ks
            if fits["chosen"] == "eq8"
            else chosen["a"] * np.log2(ks) + chosen["b"]
        )
        fig.add_trace(
            go.Scatter(
                x=ks.tolist(),
                y=np.clip(1 + g * (base - 1), 1, ks).tolist(),
                mode="lines",
                line={"dash": "dot"},
                name=plot_text(f"served: rescaled to the planned draft (g = {g:.3f})"),
            )
        )
    fig.update_layout(
        xaxis={"type": "log", "title": {"text": "k, verified tokens per cycle"}},
        yaxis={"title": {"text": "acceptance length"}},
        margin={"t": 30},
    )
    return fig


def _speedup_figure(rows: Sequence[Mapping[str, Any]]) -> go.Figure:
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=[str(r["batch_size"]) for r in rows],
            y=[r["speedup"] for r in rows],
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [(r["speedup_ci"][1] or r["speedup"]) - r["speedup"] for r in rows],
                "arrayminus": [r["speedup"] - (r["speedup_ci"][0] or r["speedup"]) for r in rows],
            },
            text=[f"k={r['k']}" + (" (extrapolated)" if r["labels"] else "") for r in rows],
            marker={"pattern": {"shape": ["/" if r["labels"] else "" for r in rows]}},
            name="speedup over AR (roofline; hatched: extrapolated)",
        )
    )
    fig.update_layout(
        xaxis={"title": {"text": "batch size b"}},
        yaxis={"title": {"text": "speedup over autoregressive decoding"}},
        margin={"t": 30},
    )
    return fig


def write_plan_page(
    path: Path, plan: Mapping[str, Any], *, name: str, decode_points: Sequence[Mapping[str, Any]]
) -> Path:
    """Write the plan page to ``path`` and return it. ``decode_points``: the decode sweep's
    trials as (k, acceptance_length) mappings, for the tau(k) figure."""
    t, s = plan["training"], plan["serving"]
    law = plan["laws"]["tokens"]
    parts = [
        f"<h1>Plan {html.escape(name)}</h1>",
        "<p class='note'>From the sweeps "
        + ", ".join(html.escape(str(v)) for v in plan["sweeps"].values() if v)
        + f"; target shape {html.escape(plan['targets']['shape'])} on "
        + f"{html.escape(plan['hardware'])}. Rule and sources: analysis/plan.py "
        "(Scylla arXiv 2505.07858 Sec. 4.4, Sec. 3.2, Table 5).</p>",
        "<h2 id='recommendation'>Recommendation</h2>",
        table(
            ["what", "value", "95% interval", "extrapolation"],
            [
                (
                    "pretraining tokens",
                    f"{t['tokens']:,.0f}",
                    fmt_interval(t["tokens_ci"], ",.0f"),
                    _labels([x for x in t["labels"] if "tokens" in x]),
                ),
                (
                    "draft layers",
                    t["layers"],
                    fmt_interval(t["layers_ci"], "g"),
                    _labels([x for x in t["labels"] if "layers" in x]),
                ),
                (
                    "training hours (one device)",
                    fmt(t["hours"], ".3g"),
                    "",
                    costed_for(plan),
                ),
                (
                    "acceptance length (eval tree)",
                    fmt(t["acceptance_length"], ".3f"),
                    fmt_interval(t["acceptance_ci"]),
                    _labels(t["labels"]),
                ),
                (
                    "mix speedup over AR",
                    fmt(s["mix_speedup"], ".3f"),
                    fmt_interval(s["mix_speedup_ci"]),
                    _labels(s["labels"]),
                ),
            ],
        ),
        f"<p class='note'>stop: {html.escape(t['stop'])} (min gain {fmt(t['min_gain'], 'g')} "
        f"acceptance per training hour, budget {fmt(t['budget_hours'], 'g')} h). Token law: "
        f"a = {fmt(law['a'], '.4f')} {fmt_interval(law['a_ci'], '.4f')}, "
        f"R² {fmt(law['r2'], '.3f')}, "
        f"n = {law['n']}. {html.escape(s.get('rescale_note', ''))}</p>",
        "<h2 id='serving'>k per batch size</h2>",
        table(
            [
                "b",
                "share",
                "k",
                "k 95%",
                "acceptance",
                "tokens/s",
                "tokens/s 95%",
                "speedup",
                "speedup 95%",
                "extrapolation",
            ],  # fmt: skip
            [
                (
                    r["batch_size"],
                    fmt(r["share"], ".2f"),
                    r["k"],
                    fmt_interval(r["k_ci"], "g"),
                    fmt(r["acceptance_length"], ".3f"),
                    fmt(r["tokens_per_s"], ".4g"),
                    fmt_interval(r["tokens_per_s_ci"], ".4g"),
                    fmt(r["speedup"], ".3f"),
                    fmt_interval(r["speedup_ci"]),
                    _labels(r["labels"]),
                )
                for r in s["rows"]
            ],
        ),
    ]
    if plan.get("measured_k"):
        parts += [
            "<h2 id='measured'>The rule against the decode sweep's best measured k</h2>",
            "<p>The k the rule plans for what the decode sweep measured (its target, its draft "
            "not rescaled, this CPU's roofline), whatever target and hardware the plan above is "
            "for: the only setting with a measurement to compare with.</p>",
            "<p>k = 1 is autoregressive decoding (no speculation), measured in the same trials "
            "as the baseline.</p>",
            table(
                [
                    "b",
                    "planned k",
                    "best measured k",
                    "measured tok/s at planned k",
                    "best measured tok/s",
                    "share of best",
                ],  # fmt: skip
                [
                    (
                        m["batch_size"],
                        k_text(m["planned_k"]),
                        k_text(m["best_measured_k"]),
                        fmt(m["measured_tokens_per_s_at_planned_k"], ".4g"),
                        fmt(m["best_measured_tokens_per_s"], ".4g"),
                        share_text(m),
                    )
                    for m in plan["measured_k"]
                ],
            ),
        ]
    if plan.get("holdout"):
        h = plan["holdout"]
        parts += [
            "<h2 id='holdout'>Holdout</h2>",
            f"<p>fitted on budgets &le; {h['cut']:,.0f} ({h['n_fit']} trials): "
            f"{h['inside']} of {len(h['rows'])} held-out trials inside their 95% one-trial "
            f"intervals; mean |error| {fmt(h['mean_abs_error'], '.4f')}.</p>",
            table(
                ["tokens", "measured", "predicted", "95% interval", "inside", "error"],
                [
                    (
                        f"{r['x']:,.0f}",
                        fmt(r["y"], ".3f"),
                        fmt(r["predicted"], ".3f"),
                        fmt_interval((r["lo"], r["hi"])),
                        r["inside"],
                        fmt(r["error"], "+.3f"),
                    )  # fmt: skip
                    for r in h["rows"]
                ],
            ),
        ]
    figs = [
        ("tokens", "Acceptance vs pretraining tokens", _tokens_figure(plan)),
        ("tau_k", "Acceptance vs k (the serving curve)", _tau_k_figure(plan, decode_points)),
        ("speedup", "Speedup per batch size", _speedup_figure(s["rows"])),
    ]
    first = True
    for div, title, fig in figs:
        parts.append(f"<h2>{html.escape(title)}</h2>")
        parts.append(
            fig.to_html(full_html=False, include_plotlyjs="inline" if first else False, div_id=div)
        )
        first = False
    if plan.get("labels"):
        parts += ["<h2 id='labels'>Extrapolation and caps</h2>", _labels(plan["labels"])]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(f"plan {name}", parts), encoding="utf-8")
    return path


def costed_for(plan: Mapping[str, Any]) -> str:
    """What the plan's training hours were costed for: basis, target, dtype, hardware."""
    c = plan.get("costed_as") or {}
    where = f"{c.get('target', '?')} {c.get('dtype', '')} on {c.get('hardware', '?')}"
    return f"{plan['cost_basis']}, costed for {where}"


def k_text(k: int) -> str:
    """A k for display: k = 1 is autoregressive decoding, no speculation."""
    return "1 (no speculation)" if int(k) == 1 else str(int(k))


def share_text(row: Mapping[str, Any]) -> str:
    """A measured-k row's share of the best measured tokens/s at its b, or why there is none."""
    share = row.get("share_of_best")
    if share is None:
        return f"n/a (k = {row['planned_k']} not in the decode sweep's grid)"
    return f"{share:.3f} of the best measured tokens/s"
