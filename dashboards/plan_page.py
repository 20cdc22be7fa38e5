"""The plan page (``<run root>/<plan>/plan.html``): the recommendation of ``orchestrator plan``,
the curves it came from and every interval, each figure beyond the measured range labelled.

Reads the plan as plain data (:func:`orchestrator.planning.plan.make_plan`), never the store.
Figures: acceptance length vs pretraining tokens (measured trials, the law with its mean and
one-trial bands, the planned budget; div id ``tokens``), acceptance vs k (the decode sweep's
trials and both tau(k) forms; div id ``tau_k``) and the speedup per batch size with its
interval (div id ``speedup``). plotly.js is inlined once, so the page works offline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go

from analysis.numbers import fmt, fmt_interval
from dashboards._html import Labels, Table, plot_text, write_page

__all__ = ["write_plan_page"]


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
    stop_note = (
        f"stop: {t['stop']} (min gain {fmt(t['min_gain'], 'g')} acceptance per training hour, "
        f"budget {fmt(t['budget_hours'], 'g')} h). Token law: a = {fmt(law['a'], '.4f')} "
        f"{fmt_interval(law['a_ci'], '.4f')}, R² {fmt(law['r2'], '.3f')}, n = {law['n']}. "
        f"{s.get('rescale_note', '')}"
    )
    return write_page(
        path,
        "plan.html.j2",
        title=f"plan {name}",
        name=name,
        sweeps=[str(v) for v in plan["sweeps"].values() if v],
        shape=plan["targets"]["shape"],
        hardware=plan["hardware"],
        recommendation=_recommendation(plan),
        stop_note=stop_note,
        serving=_serving_table(s["rows"]),
        measured=_measured_table(plan["measured_k"]) if plan.get("measured_k") else None,
        holdout=_holdout(plan["holdout"]) if plan.get("holdout") else None,
        figures=[
            ("tokens", "Acceptance vs pretraining tokens", _tokens_figure(plan)),
            ("tau_k", "Acceptance vs k (the serving curve)", _tau_k_figure(plan, decode_points)),
            ("speedup", "Speedup per batch size", _speedup_figure(s["rows"])),
        ],
        labels=Labels(plan.get("labels") or ()),
    )


def _recommendation(plan: Mapping[str, Any]) -> Table:
    """What to train and how it serves, each with its interval and extrapolation labels."""
    t, s = plan["training"], plan["serving"]
    rows = [
        (
            "pretraining tokens",
            f"{t['tokens']:,.0f}",
            fmt_interval(t["tokens_ci"], ",.0f"),
            Labels(x for x in t["labels"] if "tokens" in x),
        ),
        (
            "draft layers",
            t["layers"],
            fmt_interval(t["layers_ci"], "g"),
            Labels(x for x in t["labels"] if "layers" in x),
        ),
        ("training hours (one device)", fmt(t["hours"], ".3g"), "", costed_for(plan)),
        (
            "acceptance length (eval tree)",
            fmt(t["acceptance_length"], ".3f"),
            fmt_interval(t["acceptance_ci"]),
            Labels(t["labels"]),
        ),
        (
            "mix speedup over AR",
            fmt(s["mix_speedup"], ".3f"),
            fmt_interval(s["mix_speedup_ci"]),
            Labels(s["labels"]),
        ),
    ]
    return Table(["what", "value", "95% interval", "extrapolation"], rows)


def _serving_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """k per batch size with throughput, speedup, their intervals and labels."""
    head = ["b", "share", "k", "k 95%", "acceptance", "tokens/s", "tokens/s 95%", "speedup"]
    head += ["speedup 95%", "extrapolation"]
    return Table(
        head,
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
                Labels(r["labels"]),
            )
            for r in rows
        ],
    )


def _measured_table(measured: Sequence[Mapping[str, Any]]) -> Table:
    """The rule's k beside the decode sweep's best measured k, per batch size."""
    head = ["b", "planned k", "best measured k", "measured tok/s at planned k"]
    head += ["best measured tok/s", "share of best"]
    return Table(
        head,
        [
            (
                m["batch_size"],
                k_text(m["planned_k"]),
                k_text(m["best_measured_k"]),
                fmt(m["measured_tokens_per_s_at_planned_k"], ".4g"),
                fmt(m["best_measured_tokens_per_s"], ".4g"),
                share_text(m),
            )
            for m in measured
        ],
    )


def _holdout(h: Mapping[str, Any]) -> dict[str, Any]:
    """The holdout's summary numbers and its table of held-out trials."""
    rows = [
        (
            f"{r['x']:,.0f}",
            fmt(r["y"], ".3f"),
            fmt(r["predicted"], ".3f"),
            fmt_interval((r["lo"], r["hi"])),
            r["inside"],
            fmt(r["error"], "+.3f"),
        )
        for r in h["rows"]
    ]
    head = ["tokens", "measured", "predicted", "95% interval", "inside", "error"]
    return {
        "cut": f"{h['cut']:,.0f}",
        "n_fit": h["n_fit"],
        "inside": h["inside"],
        "n": len(h["rows"]),
        "error": fmt(h["mean_abs_error"], ".4f"),
        "table": Table(head, rows),
    }


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
