"""After the trials: fit the law, store it (SQL + parent MLflow run), write the dashboard."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.laws import LogLinearFit, baseline_summary, fit_log_linear
from dashboards.sweep_page import write_sweep_dashboard
from orchestrator.report_decode import fit_decode_sweep, fit_record
from orchestrator.store import ResultsStore
from orchestrator.tracking import Tracker

X, Y = "pretrain.tokens", "acceptance_length"
"""the law of the token sweep: acceptance_length = a*log10(pretrain.tokens) + b (Thm 1.1)"""


@dataclass(frozen=True)
class Report:
    """The fit of one sweep, its SFT-only baseline and the dashboard written."""

    fit: LogLinearFit
    baseline: dict[str, float | int]
    dashboard: Path
    lines: list[str] = field(default_factory=list)
    """further summary lines for the console"""


def trials_frame(store: ResultsStore, sweep_id: int) -> pd.DataFrame:
    """Wide table of a sweep's trials (overrides, state, metrics) with the error text."""
    df = store.metrics_frame(sweep_id)
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
) -> Report:
    """Fit the sweep's law, store and plot it: Thm 1.1 over completed ``draft_train`` trials
    with tokens > 0 (all seeds); for ``decode_bench`` sweeps Thm 1.3 and Eq. 4
    (:func:`orchestrator.report_decode.fit_decode_sweep`).

    Raises:
        StoreError, TrackingError: the DB or MLflow failed.
    """
    info = store.get_sweep(sweep_name)
    if info is not None and info.workload == "decode_bench":
        peak, lines = fit_decode_sweep(store, sweep_id, sweep_name, dashboard, tracker, parent_run)
        return Report(fit=peak, baseline={}, dashboard=dashboard, lines=lines)
    df = trials_frame(store, sweep_id)
    done = df[df["state"] == "completed"] if "state" in df else df
    if X not in done or Y not in done:
        done = pd.DataFrame({X: [], Y: []})
    fit = fit_log_linear(done, X, Y, law="tokens")
    base = baseline_summary(done, X, Y)
    record = fit_record(
        "tokens",
        fit,
        {
            "excluded": fit.excluded,
            "residuals": fit.residuals,
            "baseline": base,
            "failed_trials": int((df.get("state") == "failed").sum()) if len(df) else 0,
        },
    )
    store.save_fit(sweep_id, record)
    if tracker is not None and parent_run is not None:
        numbers = ("a", "b", "a_lo", "a_hi", "b_lo", "b_hi", "r2", "n")
        values = {f"fit.tokens.{k}": float(record[k]) for k in numbers}
        values["baseline.acceptance_length"] = float(base.get("mean", math.nan))
        tracker.log_metrics(parent_run, values)
    dashboard.parent.mkdir(parents=True, exist_ok=True)
    write_sweep_dashboard(dashboard, sweep_name=sweep_name, trials=df, fit=fit, x=X, y=Y)
    if tracker is not None and parent_run is not None:
        tracker.log_artifact(parent_run, dashboard)
    return Report(fit=fit, baseline=base, dashboard=dashboard)
