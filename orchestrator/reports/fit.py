"""After the trials: fit the law, store it (SQL + parent MLflow run), write the dashboard.

Which report a sweep gets is its workload's registry entry (``Workload.report``): ``law``
(a law over the grid's law axis, or variants side by side, or a table when the grid varies no
law axis), ``throughput`` (:mod:`orchestrator.reports.decode`) or ``table`` (the trials only).
No workload is named here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from analysis.factorial import (
    SET_MEAN,
    FactorEffect,
    effects_across_sets,
    factor_effects,
    per_set_columns,
    with_set_mean,
)
from analysis.laws import LogLinearFit, baseline_summary
from analysis.numbers import fmt
from analysis.review import LawReview, review_law
from analysis.variant_laws import factorial_with_axis, variant_laws
from analysis.variants import variant_summary
from dashboards._html import Section
from dashboards.serving import serving_figures
from dashboards.sweep_page import LOSS_SERIES, write_sweep_dashboard
from dashboards.table_page import write_table_dashboard
from dashboards.tradeoff import depth_tradeoff_figure
from dashboards.training_checks import STAGES, Checks, checks_figure
from dashboards.variant_page import write_variant_dashboard
from orchestrator.cost.report import cost_section
from orchestrator.kinds import kind_of
from orchestrator.reports._spec import spec_data, spec_description, varied_fields
from orchestrator.reports.ablation import across_sets_lines, variant_law_lines
from orchestrator.reports.decode import fit_decode_sweep, fit_record
from orchestrator.reports.index import write_run_index
from orchestrator.reports.serving import serving_report
from orchestrator.store.results import ResultsStore, SweepInfo
from orchestrator.tracking.tracker import Tracker
from workloads.protocol import Report as ReportKind
from workloads.registry import WORKLOADS
from workloads.result import CHECK_TOKENS, CHECK_Y

X, Y = "pretrain.tokens", "acceptance_length"
"""the law of the token sweep: acceptance_length = a*log10(pretrain.tokens) + b (Thm 1.1)"""

LAW_AXES = {"pretrain.tokens": "tokens", "draft.layers": "layers"}
"""grid axis -> law fitted over it (Thm 1.1 tokens, Thm 1.2 layers); the first in the grid wins"""

VARIANT_METRICS = [
    "speedup",
    "draft.ms_per_step",
    "draft.params",
    "pretrain.tokens_seen",
    "sft.tokens_seen",
    "tokens_per_s/speculative",
    "pretrain.tokens_per_s",
    "sft.tokens_per_s",
    "mismatches",
    "near_ties",
]
"""metrics summarised per variant besides the acceptance lengths"""


def find_law_axis(spec_yaml: str) -> tuple[str, str] | None:
    """(x column, law name) of a law sweep: the first field its grid (or search space) varies
    that has a law (:data:`LAW_AXES`); None when it varies none."""
    for axis in varied_fields(spec_yaml):
        if axis in LAW_AXES:
            return axis, LAW_AXES[axis]
    return None


def law_axis(spec_yaml: str) -> tuple[str, str]:
    """(x column, law name) of a law sweep (:func:`find_law_axis`), else the token law."""
    return find_law_axis(spec_yaml) or (X, "tokens")


def no_law_axis_text(spec_yaml: str) -> str:
    """The one line for a law sweep whose grid varies no law axis."""
    varied = varied_fields(spec_yaml)
    what = f" (it varies {', '.join(varied)})" if varied else ""
    return (
        f"no law axis: the grid varies none of {', '.join(LAW_AXES)}{what}; "
        "the trials are tabulated"
    )


def report_kind(info: SweepInfo | None) -> ReportKind:
    """The report a stored sweep gets: its workload's registry ``report``; ``table`` for a
    workload that is no longer registered, ``law`` when the sweep is not in the store."""
    if info is None:
        return "law"
    entry = WORKLOADS.get(info.workload)
    return entry.report if entry is not None else "table"


def _table_metric(info: SweepInfo | None) -> str | None:
    """The metric a table page plots: the workload's first ``status`` column."""
    entry = WORKLOADS.get(info.workload) if info is not None else None
    return entry.status_columns[0] if entry is not None and entry.status_columns else None


@dataclass(frozen=True)
class Report:
    """The fit of one sweep, its SFT-only baseline and the dashboard written."""

    fit: LogLinearFit | None
    """None without a law: variants (side by side), a table sweep, no law axis in the grid"""
    review: LawReview | None
    """the fit with its checks (bootstrap, extrapolation, LOO, AIC, paper); None without law"""
    baseline: dict[str, float | int]
    dashboard: Path
    lines: list[str] = field(default_factory=list)
    """further summary lines for the console"""
    index: Path | None = None
    """the run root's index page, when it was rewritten"""


def trials_frame(store: ResultsStore, sweep_id: int) -> pd.DataFrame:
    """Wide table of a sweep's trials (overrides, state, metrics) with the error text; series
    (loss curves) are left out: their step-0 value is not a trial metric."""
    df = store.metrics_frame(sweep_id)
    df = df.drop(columns=[c for c in store.series_names(sweep_id) if c in df.columns])
    errors = {t.key: t.error for t in store.trials(sweep_id)}
    df["error"] = df["trial_key"].map(errors)
    return df


def fit_sweep(
    store: ResultsStore,
    sweep_id: int,
    sweep_name: str,
    dashboard: Path,
    tracker: Tracker | None = None,
    parent_run: str | None = None,
    *,
    persist: bool = True,
) -> Report:
    """Fit the sweep's law, store and plot it, as its workload's ``report`` says
    (:func:`report_kind`): ``law``: Thm 1.1/1.2 over the completed trials at x > 0 (all seeds)
    with its checks (:func:`analysis.review.review_law`), variants side by side, or the trial
    table when the grid varies no law axis; ``throughput``: Thm 1.3 and Eq. 4
    (:func:`orchestrator.reports.decode.fit_decode_sweep`); ``table``: the trials only.
    With ``persist=False`` nothing is written but the dashboard (``orchestrator report``).
    The page is rendered once, with its closing sections gathered first (:func:`page_sections`).

    Raises:
        StoreError, TrackingError: the DB or MLflow failed.
    """
    sections = page_sections(store, sweep_id, sweep_name, dashboard)
    rep = _fit_sweep(store, sweep_id, sweep_name, dashboard, tracker, parent_run, persist, sections)
    if not persist:
        return rep
    index = write_run_index(store, dashboard.parent.parent, {sweep_name: rep.fit})
    return replace(rep, index=index)


def page_sections(
    store: ResultsStore, sweep_id: int, sweep_name: str, dashboard: Path
) -> list[Section]:
    """The sections that close the sweep's page: the cost predicted at submit beside the
    measured seconds (when ``dashboard``'s folder holds a prediction), the design's decisions
    (an adaptive design): the sweep kind's section (:meth:`orchestrator.kinds.SweepKind.
    page_section`)."""
    info = store.get_sweep(sweep_name)
    kind = kind_of(spec_data(info.spec_yaml) if info is not None else {})
    found = (cost_section(dashboard.parent, store, sweep_id), kind.page_section(store, sweep_name))
    return [s for s in found if s is not None]


def _fit_sweep(
    store: ResultsStore,
    sweep_id: int,
    sweep_name: str,
    dashboard: Path,
    tracker: Tracker | None,
    parent_run: str | None,
    persist: bool,
    sections: list[Section],
) -> Report:
    if not persist:
        tracker = None
    info = store.get_sweep(sweep_name)
    kind = report_kind(info)
    spec_yaml = info.spec_yaml if info is not None else ""
    about = spec_description(spec_yaml)
    if kind == "throughput":
        peak, lines = fit_decode_sweep(
            store,
            sweep_id,
            sweep_name,
            dashboard,
            tracker,
            parent_run,
            persist=persist,
            description=about,
            sections=sections,
        )
        return Report(fit=peak, review=None, baseline={}, dashboard=dashboard, lines=lines)
    df = trials_frame(store, sweep_id)
    served = serving_report(store, sweep_id, df, persist=persist)
    sections = [*sections, served.section] if served.section is not None else sections
    sink, page = (tracker, parent_run), (dashboard, sections)
    if kind == "table":
        n_done = int((df["state"] == "completed").sum()) if len(df) else 0
        line = f"{n_done} of {len(df)} trials completed; the trials are tabulated"
        return _report_table(
            df, sweep_name, spec_yaml, page, sink, _table_metric(info), line, on_page=False
        )
    during = checks_figure(check_curves(store, sweep_id), df)
    extra = [("Acceptance during training", during)] if during is not None else []
    if "variant" in df.columns:
        rep = _report_variants(df, sweep_name, spec_yaml, page, sink, extra)
        return replace(rep, lines=[*rep.lines, *served.lines])
    axis = find_law_axis(spec_yaml)
    if axis is None:
        line = no_law_axis_text(spec_yaml)
        rep = _report_table(df, sweep_name, spec_yaml, page, sink, _table_metric(info), line)
        return replace(rep, lines=[*rep.lines, *served.lines])
    x, law = axis
    table = df if x in df and Y in df else pd.DataFrame({x: [], Y: [], "state": []})
    review = review_law(table, x, Y, law=law)
    fit = review.fit
    done = table[table["state"] == "completed"]
    base = baseline_summary(done, x, Y)
    if persist:
        details = {
            "excluded": fit.excluded,
            "residuals": fit.residuals,
            "baseline": base,
            "failed_trials": int((df.get("state") == "failed").sum()) if len(df) else 0,
            **review.details(),
        }
        store.save_fit(sweep_id, fit_record(law, fit, details))
    if tracker is not None and parent_run is not None:
        tracker.update_metrics(parent_run, review_metrics(review, base))
    dashboard.parent.mkdir(parents=True, exist_ok=True)
    tradeoff = depth_tradeoff_figure(done) if law == "layers" else None
    extra += [("Gain and cost of depth", tradeoff)] if tradeoff is not None else []
    extra += serving_figures(done, x)  # a serving sweep's agreement and throughput
    write_sweep_dashboard(
        dashboard,
        sweep_name=sweep_name,
        trials=df,
        review=review,
        x=x,
        y=Y,
        extra=extra,
        curves=store.sweep_series(sweep_id, LOSS_SERIES),
        description=about,
        sections=sections,
    )
    if tracker is not None and parent_run is not None:
        tracker.log_artifact(parent_run, dashboard)
    return Report(fit=fit, review=review, baseline=base, dashboard=dashboard, lines=served.lines)


def review_metrics(review: LawReview, base: dict[str, float | int]) -> dict[str, float]:
    """The review as parent-run metrics ``fit.<law>.*`` (NaN where there is no number)."""
    f, law = review.fit, review.fit.law
    values = {
        "a": f.a,
        "b": f.b,
        "a_lo": f.a_ci[0],
        "a_hi": f.a_ci[1],
        "b_lo": f.b_ci[0],
        "b_hi": f.b_ci[1],
        "r2": f.r2,
        "r2_adj": f.r2_adj,
        "n": float(f.n),
        "a_boot_lo": review.bootstrap.a_ci[0],
        "a_boot_hi": review.bootstrap.a_ci[1],
        "extrapolation_error": review.extrapolation.error,
        "loo_rmse": review.loo.rmse,
        "aic_delta_saturating": review.forms.delta,
        "excluded_trials": float(review.counts.total - review.counts.used),
    }
    if review.paper is not None:
        values["slope_ratio_paper"] = review.paper.slope_ratio
    out = {f"fit.{law}.{k}": float(v) for k, v in values.items()}
    out["baseline.acceptance_length"] = float(base.get("mean", math.nan))
    return out


def _report_table(
    df: pd.DataFrame,
    sweep_name: str,
    spec_yaml: str,
    page: tuple[Path, list[Section]],
    sink: tuple[Tracker | None, str | None],
    metric: str | None,
    line: str,
    *,
    on_page: bool = True,
) -> Report:
    """A sweep without a law (a ``table`` workload, or no law axis in the grid): no fit is
    stored or logged; the page tabulates the trials and plots ``metric`` per varied field;
    ``line`` is the console's summary, also shown on the page when ``on_page``; ``page`` the
    dashboard's path and its closing sections."""
    x = next(iter(varied_fields(spec_yaml)), "seed")
    dashboard, sections = page
    write_table_dashboard(
        dashboard,
        sweep_name=sweep_name,
        trials=df,
        x=x,
        y=metric,
        description=spec_description(spec_yaml),
        notes=[line] if on_page else [],
        sections=sections,
    )
    tracker, parent_run = sink
    if tracker is not None and parent_run is not None:
        tracker.log_artifact(parent_run, dashboard)
    return Report(fit=None, review=None, baseline={}, dashboard=dashboard, lines=[line])


def _report_variants(
    df: pd.DataFrame,
    sweep_name: str,
    spec_yaml: str,
    page: tuple[Path, list[Section]],
    sink: tuple[Tracker | None, str | None],
    extra: list[tuple[str, go.Figure]],
) -> Report:
    """Variants side by side: summary lines, the main effect of each two-level factor
    (:mod:`analysis.factorial`) overall, per prompt set and on the mean over the sets (with
    the level that mean prefers), with a law axis in the grid each variant's law and the
    factorial over the axis (:mod:`analysis.variant_laws`), parent-run metrics and the variant
    dashboard (``page``: its path and closing sections; ``extra`` figures on it)."""
    dashboard, sections = page
    tracker, parent_run = sink
    per_set = per_set_columns(df)
    df = with_set_mean(df) if len(per_set) > 1 else df  # adds SET_MEAN
    set_mean = [SET_MEAN] if SET_MEAN in df.columns else []
    summary = variant_summary(df, ["acceptance_length", *set_mean, *VARIANT_METRICS])
    lines = []
    shown = ["acceptance_length", *set_mean, "speedup"]
    for r in summary[summary["metric"].isin(shown)].itertuples():
        delta = "" if math.isnan(r.delta) else f", delta {fmt(r.delta, '+.4f')}"
        lines.append(
            f"{r.variant}: {r.metric} = {fmt(r.mean, '.4f')} ± {fmt(r.sd, '.4f')} "
            f"(n = {r.n}{delta})"
        )
    raw = spec_data(spec_yaml).get("variants")
    variants = raw if isinstance(raw, dict) else {}
    metrics = ["acceptance_length", *per_set, *set_mean]
    effects = [e for m in metrics for e in factor_effects(df, variants, m)]
    across = effects_across_sets(df, variants)
    for e in effects:
        if e.metric == "acceptance_length":
            ci = (
                "no residual variation: no CI"
                if math.isnan(e.ci[0])
                else f"95% CI {fmt(e.ci[0], '+.4f')} to {fmt(e.ci[1], '+.4f')}, "
                f"p = {fmt(e.p, '.3g')}"
            )
            lines.append(
                f"effect of {e.factor} {e.low} -> {e.high} on {e.metric}: "
                f"{fmt(e.effect, '+.4f')} ({ci}, n = {e.n})"
            )
    lines += across_sets_lines(across)
    axis = find_law_axis(spec_yaml)
    law_values: dict[str, float] = {}
    laws: dict[str, LogLinearFit] = {}
    terms: list[FactorEffect] = []
    if axis is not None:  # variants crossed with a law axis: a law per variant, the factorial
        laws = variant_laws(df, axis[0], "acceptance_length", law=axis[1])
        terms = factorial_with_axis(df, variants, axis[0], "acceptance_length")
        law_lines, law_values = variant_law_lines(df, laws, terms, axis[0])
        lines += law_lines
    if tracker is not None and parent_run is not None:
        values = law_values | {
            f"variant.{r.variant}.{r.metric}.mean": float(r.mean)
            for r in summary.itertuples()
            if not math.isnan(r.mean)
        }
        for e in effects:
            key = f"effect.{e.factor}.{e.metric}"
            values |= {key: e.effect, f"{key}.lo": e.ci[0], f"{key}.hi": e.ci[1]}
        tracker.update_metrics(parent_run, values)
    write_variant_dashboard(
        dashboard,
        sweep_name=sweep_name,
        trials=df,
        metrics=VARIANT_METRICS,
        effects=effects,
        across_sets=across,
        description=spec_description(spec_yaml),
        sections=sections,
        laws=laws,
        terms=terms,
        extra=extra,
    )
    if tracker is not None and parent_run is not None:
        tracker.log_artifact(parent_run, dashboard)
    return Report(fit=None, review=None, baseline={}, dashboard=dashboard, lines=lines)


def check_curves(store: ResultsStore, sweep_id: int) -> Checks:
    """Acceptance during training of a sweep's trials (draft_train ``eval.during_training_every``):
    trial key -> stage -> (tokens seen at each check, acceptance length there); trials and
    stages without checks are left out."""
    names = [f"{st}/{n}" for st in STAGES for n in (CHECK_TOKENS, CHECK_Y)]
    out: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    for key, series in store.sweep_series(sweep_id, names).items():
        for st in STAGES:
            xs, ys = series.get(f"{st}/{CHECK_TOKENS}", []), series.get(f"{st}/{CHECK_Y}", [])
            if xs and len(xs) == len(ys):
                out.setdefault(key, {})[st] = (xs, ys)
    return out
