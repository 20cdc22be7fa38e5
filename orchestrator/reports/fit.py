"""After the trials: fit the law, store it (SQL + parent MLflow run), write the dashboard."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
import yaml

from analysis.factorial import factor_effects
from analysis.laws import LogLinearFit, baseline_summary
from analysis.review import LawReview, review_law
from analysis.variants import variant_summary
from dashboards.sweep_page import LOSS_SERIES, write_sweep_dashboard
from dashboards.tradeoff import depth_tradeoff_figure
from dashboards.variant_page import write_variant_dashboard
from orchestrator.reports.decode import fit_decode_sweep, fit_record
from orchestrator.reports.index import write_run_index
from orchestrator.store.results import ResultsStore
from orchestrator.tracking.tracker import Tracker

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
    "mismatches",
]
"""metrics summarised per variant besides the acceptance lengths"""


def law_axis(spec_yaml: str) -> tuple[str, str]:
    """(x column, law name) of a draft_train sweep: its first grid axis that has a law, else the
    token law (a sweep without that axis gets a "not enough points" fit)."""
    data = yaml.safe_load(spec_yaml) or {}
    grid = data.get("grid") or {} if isinstance(data, dict) else {}
    for axis in grid:
        if axis in LAW_AXES:
            return axis, LAW_AXES[axis]
    return X, "tokens"


@dataclass(frozen=True)
class Report:
    """The fit of one sweep, its SFT-only baseline and the dashboard written."""

    fit: LogLinearFit | None
    """None for a sweep of variants (compared side by side, no law)"""
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
    """Fit the sweep's law, store and plot it: Thm 1.1 over completed ``draft_train`` trials
    with tokens > 0 (all seeds) with its checks (:func:`analysis.review.review_law`); for
    ``decode_bench`` sweeps Thm 1.3 and Eq. 4
    (:func:`orchestrator.reports.decode.fit_decode_sweep`).
    With ``persist=False`` nothing is written but the dashboard (``orchestrator report``).

    Raises:
        StoreError, TrackingError: the DB or MLflow failed.
    """
    rep = _fit_sweep(store, sweep_id, sweep_name, dashboard, tracker, parent_run, persist)
    if not persist:
        return rep
    index = write_run_index(store, dashboard.parent.parent, {sweep_name: rep.fit})
    return replace(rep, index=index)


def _fit_sweep(
    store: ResultsStore,
    sweep_id: int,
    sweep_name: str,
    dashboard: Path,
    tracker: Tracker | None,
    parent_run: str | None,
    persist: bool,
) -> Report:
    if not persist:
        tracker = None
    info = store.get_sweep(sweep_name)
    if info is not None and info.workload == "decode_bench":
        peak, lines = fit_decode_sweep(
            store, sweep_id, sweep_name, dashboard, tracker, parent_run, persist=persist
        )
        return Report(fit=peak, review=None, baseline={}, dashboard=dashboard, lines=lines)
    df = trials_frame(store, sweep_id)
    spec_yaml = info.spec_yaml if info is not None else ""
    if info is not None and info.workload == "sleep":
        return _report_table(df, sweep_name, spec_yaml, dashboard, tracker, parent_run)
    if "variant" in df.columns:
        return _report_variants(df, sweep_name, spec_yaml, dashboard, tracker, parent_run)
    x, law = law_axis(spec_yaml)
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
        tracker.log_metrics(parent_run, review_metrics(review, base))
    dashboard.parent.mkdir(parents=True, exist_ok=True)
    tradeoff = depth_tradeoff_figure(done) if law == "layers" else None
    extra = [("Gain and cost of depth", tradeoff)] if tradeoff is not None else None
    write_sweep_dashboard(
        dashboard,
        sweep_name=sweep_name,
        trials=df,
        review=review,
        x=x,
        y=Y,
        extra=extra,
        curves=store.sweep_series(sweep_id, LOSS_SERIES),
    )
    if tracker is not None and parent_run is not None:
        tracker.log_artifact(parent_run, dashboard)
    return Report(fit=fit, review=review, baseline=base, dashboard=dashboard)


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
    dashboard: Path,
    tracker: Tracker | None,
    parent_run: str | None,
) -> Report:
    """A diagnostic (``sleep``) sweep: no law, the dashboard lists its trials."""
    data = yaml.safe_load(spec_yaml) or {}
    grid = (data.get("grid") or {}) if isinstance(data, dict) else {}
    x = next(iter(grid), "seed")
    write_sweep_dashboard(
        dashboard, sweep_name=sweep_name, trials=df, review=None, x=x, y="sleep.seconds"
    )
    if tracker is not None and parent_run is not None:
        tracker.log_artifact(parent_run, dashboard)
    n_done = int((df["state"] == "completed").sum()) if len(df) else 0
    return Report(
        fit=None,
        review=None,
        baseline={},
        dashboard=dashboard,
        lines=[f"diagnostic sweep: {n_done} of {len(df)} trials completed"],
    )


def _report_variants(
    df: pd.DataFrame,
    sweep_name: str,
    spec_yaml: str,
    dashboard: Path,
    tracker: Tracker | None,
    parent_run: str | None,
) -> Report:
    """Variants side by side: summary lines, the main effect of each two-level factor
    (:mod:`analysis.factorial`), parent-run metrics and the variant dashboard."""
    summary = variant_summary(df, ["acceptance_length", *VARIANT_METRICS])
    lines = []
    for r in summary[summary["metric"].isin(["acceptance_length", "speedup"])].itertuples():
        delta = "" if math.isnan(r.delta) else f", delta {r.delta:+.4f}"
        lines.append(f"{r.variant}: {r.metric} = {r.mean:.4f} ± {r.sd:.4f} (n = {r.n}{delta})")
    data = yaml.safe_load(spec_yaml) if spec_yaml else {}
    variants = (data.get("variants") or {}) if isinstance(data, dict) else {}
    per_set = sorted(c for c in df.columns if str(c).startswith("acceptance_length/"))
    effects = [e for m in ["acceptance_length", *per_set] for e in factor_effects(df, variants, m)]
    for e in effects:
        if e.metric == "acceptance_length":
            ci = (
                "no residual variation: no CI"
                if math.isnan(e.ci[0])
                else f"95% CI {e.ci[0]:+.4f} to {e.ci[1]:+.4f}, p = {e.p:.3g}"
            )
            lines.append(
                f"effect of {e.factor} {e.low} -> {e.high} on {e.metric}: {e.effect:+.4f} "
                f"({ci}, n = {e.n})"
            )
    if tracker is not None and parent_run is not None:
        values = {
            f"variant.{r.variant}.{r.metric}.mean": float(r.mean)
            for r in summary.itertuples()
            if not math.isnan(r.mean)
        }
        for e in effects:
            key = f"effect.{e.factor}.{e.metric}"
            values |= {key: e.effect, f"{key}.lo": e.ci[0], f"{key}.hi": e.ci[1]}
        tracker.log_metrics(parent_run, values)
    write_variant_dashboard(
        dashboard, sweep_name=sweep_name, trials=df, metrics=VARIANT_METRICS, effects=effects
    )
    if tracker is not None and parent_run is not None:
        tracker.log_artifact(parent_run, dashboard)
    return Report(fit=None, review=None, baseline={}, dashboard=dashboard, lines=lines)
