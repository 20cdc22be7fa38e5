"""Dashboard of a sweep of variants: recipes side by side (means with spread over seeds)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from analysis.factorial import SET_MEAN, FactorAcrossSets, FactorEffect
from analysis.laws import LogLinearFit
from analysis.numbers import fmt
from analysis.paper import table4_ratios
from analysis.variants import variant_summary
from dashboards._html import Section, Table, plot_text, write_page
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
    sections: Sequence[Section] = (),
    laws: Mapping[str, LogLinearFit] | None = None,
    terms: Sequence[FactorEffect] = (),
    extra: Sequence[tuple[str, go.Figure]] = (),
) -> Path:
    """Write one self-contained HTML page: acceptance length per variant and prompt set (bars:
    mean over completed trials, error bars: sample sd, points: each trial), the main effects of
    two-level factors with their 95% CIs (``effects``, see :mod:`analysis.factorial`), the
    summary table of ``metrics`` (see :func:`analysis.variants.variant_summary`) and every
    trial. With ``across_sets`` (:func:`analysis.factorial.effects_across_sets`) a section
    gives each factor's effect on the mean over the prompt sets (the column
    :data:`~analysis.factorial.SET_MEAN` of ``trials``, also in the bars), the level it
    prefers and the effect per set. With ``laws`` (variant -> its law,
    :func:`analysis.variant_laws.variant_laws`) the trials against the law axis with each
    variant's fitted line and a table of the laws; ``terms``
    (:func:`analysis.variant_laws.factorial_with_axis`) the factorial over the axis; ``extra``
    (heading, figure) pairs after them. ``description`` is the sweep's spec ``description``
    (shown, escaped); ``sections`` (the cost, the design) close the page."""
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
    across = _across(across_sets or [])
    return write_page(
        path,
        "variant.html.j2",
        title=f"Sweep {sweep_name}",
        description=description.strip(),
        random_weights=0,
        trial_count=len(trials),
        completed=n_done,
        figure=fig,
        across=across,
        n_sets=len(across_sets[0].per_set) if across_sets else 0,
        effects=_effects(effects or []),
        summary=Table(list(summary.columns), [[*r] for r in summary.itertuples(index=False)]),
        table4=_table4(summary),
        trials=trial_table(trials, "variant", "acceptance_length"),
        sections=sections,
        law_figure=_law_figure(trials, laws) if laws else None,
        laws=_laws(laws) if laws else None,
        terms=_terms(terms),
        extra=list(extra),
    )


def _law_figure(trials: pd.DataFrame, laws: Mapping[str, LogLinearFit]) -> go.Figure:
    """Each variant's trials against the law axis (log scale) with its fitted line."""
    fig = go.Figure()
    palette = qualitative.Plotly
    x_name = next(iter(laws.values())).x_name
    for i, (variant, f) in enumerate(laws.items()):
        colour = palette[i % len(palette)]
        fig.add_trace(
            go.Scatter(
                x=list(f.x),
                y=list(f.y),
                mode="markers",
                name=plot_text(variant),
                marker={"color": colour},
                legendgroup=variant,
            )
        )
        if f.ok:
            xs = np.geomspace(min(f.x), max(f.x), 40)
            fig.add_trace(
                go.Scatter(
                    x=xs.tolist(),
                    y=f.predict(xs)["mean"].tolist(),
                    mode="lines",
                    line={"color": colour},
                    legendgroup=variant,
                    showlegend=False,
                    name=plot_text(f"{variant}: a = {fmt(f.a, '.3f')}"),
                )
            )
    fig.update_layout(
        xaxis={"type": "log", "title": {"text": plot_text(f"{x_name} (log scale)")}},
        yaxis={"title": {"text": "acceptance length"}},
        template="plotly_white",
        height=420,
    )
    return fig


def _laws(laws: Mapping[str, LogLinearFit]) -> Table:
    rows = [
        [v, f.form, f.a, f.a_ci[0], f.a_ci[1], f.b, f.r2, f.n, "" if f.ok else f.status]
        for v, f in laws.items()
    ]
    head = ["variant", "law", "a", "a CI low", "a CI high", "b", "R²", "n", "status"]
    return Table(head, rows, table_id="variant-laws")


def _terms(terms: Sequence[FactorEffect]) -> Table | None:
    if not terms:
        return None
    rows = [[e.factor, f"{e.low} → {e.high}", e.effect, e.ci[0], e.ci[1], e.p, e.n] for e in terms]
    head = ["term", "levels", "effect", "CI low", "CI high", "p", "n"]
    return Table(head, rows, table_id="factorial-terms")


def _table4(summary: pd.DataFrame) -> Table | None:
    """Our Scylla / EAGLE-2 acceptance-length ratio beside the paper's Table 4 ratios, when the
    variants are named after them (e.g. ``eagle2`` and ``scylla``)."""
    acc = summary[summary["metric"] == "acceptance_length"].set_index("variant")["mean"]
    names = {str(v).lower().replace("-", "").replace("_", ""): v for v in acc.index}
    eagle2, scylla = names.get("eagle2"), names.get("scylla")
    if eagle2 is None or scylla is None:
        return None
    ours = float(acc[scylla] / acc[eagle2])
    rows = [["this sweep (SmolLM2-135M target, CPU budgets)", fmt(ours, ".3f")]]
    rows += [[f"paper Table 4: {m}", fmt(r, ".3f")] for m, r in table4_ratios().items()]
    return Table(["setting", "Scylla / EAGLE-2"], rows, table_id="table4")


def _effects(effects: list[FactorEffect]) -> Table | None:
    """The main-effects table (None without two-level factors)."""
    if not effects:
        return None
    rows = [
        [e.factor, f"{e.low} → {e.high}", e.metric, e.effect, e.ci[0], e.ci[1], e.p, e.n]
        for e in effects
    ]
    return Table(["factor", "levels", "metric", "effect", "CI low", "CI high", "p", "n"], rows)


def _across(across: list[FactorAcrossSets]) -> Table | None:
    """The recipe across prompt sets: per factor its effect on the mean over the sets, the
    level that mean prefers, and its effect on each set (None with fewer than two sets)."""
    if not across:
        return None
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
    return Table(head, rows, table_id="across-sets")
