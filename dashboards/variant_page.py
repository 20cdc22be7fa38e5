"""Dashboard of a sweep of variants: recipes side by side (means with spread over seeds)."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from analysis.factorial import SET_MEAN, FactorAcrossSets, FactorEffect
from analysis.numbers import fmt
from analysis.paper import table4_ratios
from analysis.variants import variant_summary
from dashboards._html import description_html, page, plot_text, table
from dashboards.sweep_page import trial_table


def write_variant_dashboard(
    path: Path,
    *,
    sweep_name: str,
    trials: pd.DataFrame,
    metrics: list[str],
    effects: list[FactorEffect] | None = None,
    across_sets: list[FactorAcrossSets] | None = None,
    description: str = "",
) -> Path:
    """Write one self-contained HTML page: acceptance length per variant and prompt set (bars:
    mean over completed trials, error bars: sample sd, points: each trial), the main effects of
    two-level factors with their 95% CIs (``effects``, see :mod:`analysis.factorial`), the
    summary table of ``metrics`` (see :func:`analysis.variants.variant_summary`) and every
    trial. With ``across_sets`` (:func:`analysis.factorial.effects_across_sets`) a section
    gives each factor's effect on the mean over the prompt sets (the column
    :data:`~analysis.factorial.SET_MEAN` of ``trials``, also in the bars), the level it
    prefers and the effect per set. ``description`` is the sweep's spec ``description``
    (shown, escaped)."""
    per_set = sorted(c for c in trials.columns if str(c).startswith("acceptance_length/"))
    per_set += [SET_MEAN] if SET_MEAN in trials.columns else []
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
        "<p class='note'><a href='../index.html'>all sweeps</a></p>",
        f"<h1>Sweep {html.escape(sweep_name)}</h1>",
        description_html(description),
        f"<p class='note'>{len(trials)} trials, {n_done} completed. Variants are compared "
        "by their completed trials; delta is each variant's mean minus the first's.</p>",
        fig.to_html(full_html=False, include_plotlyjs=True, div_id="variants"),
        *_across(across_sets or []),
        *_effects(effects or []),
        "<h2>Summary</h2>",
        table(list(summary.columns), rows),
        *_table4(summary),
        "<h2>Trials</h2>",
        trial_table(trials, "variant", "acceptance_length"),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(f"Sweep {sweep_name}", parts), encoding="utf-8")
    return path


def _table4(summary: pd.DataFrame) -> list[str]:
    """Our Scylla / EAGLE-2 acceptance-length ratio beside the paper's Table 4 ratios, when the
    variants are named after them (e.g. ``eagle2`` and ``scylla``)."""
    acc = summary[summary["metric"] == "acceptance_length"].set_index("variant")["mean"]
    names = {str(v).lower().replace("-", "").replace("_", ""): v for v in acc.index}
    eagle2, scylla = names.get("eagle2"), names.get("scylla")
    if eagle2 is None or scylla is None:
        return []
    ours = float(acc[scylla] / acc[eagle2])
    rows = [["this sweep (SmolLM2-135M target, CPU budgets)", fmt(ours, ".3f")]]
    rows += [[f"paper Table 4: {m}", fmt(r, ".3f")] for m, r in table4_ratios().items()]
    return [
        "<h2>The paper beside us (Table 4)</h2>",
        "<p class='note'>Mean acceptance length of Scylla over EAGLE-2; the paper's means are "
        "over 6 benchmarks at T = 0 on 7B-class targets.</p>",
        table(["setting", "Scylla / EAGLE-2"], rows, table_id="table4"),
    ]


def _effects(effects: list[FactorEffect]) -> list[str]:
    """The main-effects section (nothing without two-level factors)."""
    if not effects:
        return []
    rows = [
        [e.factor, f"{e.low} → {e.high}", e.metric, e.effect, e.ci[0], e.ci[1], e.p, e.n]
        for e in effects
    ]
    return [
        "<h2>Main effects of the factors</h2>",
        "<p class='note'>Each factor's effect is the change of the metric from the first "
        "variant's level to the other, averaged over the other factors (OLS over the completed "
        "trials, 95% CI; analysis/factorial.py).</p>",
        table(["factor", "levels", "metric", "effect", "CI low", "CI high", "p", "n"], rows),
    ]


def _across(across: list[FactorAcrossSets]) -> list[str]:
    """The recipe across prompt sets: per factor its effect on the mean over the sets, the
    level that mean prefers, and its effect on each set (nothing with fewer than two sets)."""
    if not across:
        return []
    sets = [e.metric.removeprefix("acceptance_length/") for e in across[0].per_set]
    rows = []
    for a in across:
        m = a.mean
        cells = {e.metric.removeprefix("acceptance_length/"): e for e in a.per_set}
        rows.append(
            [
                a.factor,
                f"{a.low} → {a.high}",
                m.effect,
                m.ci[0],
                m.ci[1],
                a.preferred or "neither",
                "yes" if a.resolved else "no",
                f"{a.agreeing_sets} / {a.opposing_sets}",
                *(
                    f"{fmt(cells[s].effect, '+.4f')} [{fmt(cells[s].ci[0], '+.3f')}, "
                    f"{fmt(cells[s].ci[1], '+.3f')}]"
                    if s in cells
                    else "n/a"
                    for s in sets
                ),
            ]
        )
    head = ["factor", "levels", "mean over sets", "CI low", "CI high", "prefers"]
    head += ["CI excludes 0", "sets same / other", *sets]
    return [
        "<h2>The recipe across prompt sets</h2>",
        f"<p class='note'>Each factor's effect on a trial's mean over its {len(sets)} prompt "
        "sets (each set's acceptance length pooled over its verify steps; every set weighs the "
        "same), with its 95% CI over the completed trials, and the level that mean prefers; "
        "'sets same / other' counts the sets whose own CI excludes 0 on the same / the other "
        "side. Set the recipe by the mean over sets, not by one set.</p>",
        table(head, rows, table_id="across-sets"),
    ]
