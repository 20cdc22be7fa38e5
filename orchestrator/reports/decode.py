"""After a ``decode_bench`` sweep: Thm 1.3 and Eq. 4 fits, the local roofline, the dashboard.

The roofline (Scylla Sec. 3.2, Appendix C) is evaluated for the sweep's target on the hardware
the trials ran on: on CPU, the peak FLOP/s and bandwidth each trial measured
(``hw.peak_flops``, ``hw.bandwidth``; the median over trials), at the prompt length the trials
decoded (``prompt_tokens_mean``). Its k_opt(b) is compared with the measured best k per b.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.laws import LogLinearFit
from analysis.numbers import fmt
from analysis.throughput import (
    METRICS,
    RooflineData,
    best_per_batch,
    compare_k_opt,
    fit_k_opt,
    fit_peak_throughput,
)
from dashboards.decode_page import write_decode_dashboard
from orchestrator.store.results import ResultsStore
from orchestrator.tracking.tracker import Tracker
from workloads.engine.k_law import write_sweep_k_law
from workloads.models.target import DEFAULT_TARGET
from workloads.roofline.costs import intensity, k_opt
from workloads.roofline.hardware import HardwareProfile
from workloads.roofline.models import load_model_shape

K_RANGE = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]
"""k values of the intensity curves on the dashboard"""


def decode_frame(store: ResultsStore, sweep_id: int) -> pd.DataFrame:
    """The sweep's trials with the tree knobs of each trial's full config and its error text."""
    df = store.metrics_frame(sweep_id)
    by_key = {t.key: t for t in store.trials(sweep_id)}
    for knob in ("batch_size", "num_draft_tokens", "depth", "topk"):
        df[knob] = df["trial_key"].map(lambda k, n=knob: by_key[k].config["decode"][n])
    df["seed"] = df["trial_key"].map(lambda k: by_key[k].config.get("seed", 0))
    df["error"] = df["trial_key"].map(lambda k: by_key[k].error)
    if "depth_used" in df:  # the engine caps depth at num_draft_tokens - 1
        df["depth"] = df["depth_used"].fillna(df["depth"])
    for metric in METRICS:  # no trial completed: the columns exist, all NaN
        if metric not in df:
            df[metric] = math.nan
    return df.drop(columns=[c for c in df.columns if c.startswith("decode.")])


def local_roofline(df: pd.DataFrame, target_model: str, dtype_bytes: int) -> RooflineData | None:
    """Roofline of the measured CPU for the sweep's target, or None without measurements."""
    done = df[df["state"] == "completed"] if "state" in df else df
    if done.empty or "hw.peak_flops" not in done or done["hw.peak_flops"].isna().all():
        return None
    try:
        shape = load_model_shape("smollm2-135m" if target_model == DEFAULT_TARGET else target_model)
    except (ValueError, OSError):
        return None
    hw = HardwareProfile(
        name="local-cpu",
        peak_flops=float(done["hw.peak_flops"].median()),
        bandwidth=float(done["hw.bandwidth"].median()),
        dtype="float32" if dtype_bytes == 4 else "bfloat16",
        bytes_per_element=dtype_bytes,
        source="measured by the trials (median)",
    )
    s = round(float(done["prompt_tokens_mean"].median()))
    bs = sorted({int(b) for b in done["batch_size"]})
    rows = [
        {
            "batch_size": b,
            "num_draft_tokens": k,
            "intensity": intensity(shape, b, k, s, dtype_bytes),
        }
        for b in bs
        for k in K_RANGE
    ]
    opts = {b: k_opt(shape, hw, b, s, k_max=4096) for b in bs}
    return RooflineData(
        hardware=f"local CPU (measured: {hw.peak_flops / 1e9:.0f} GFLOP/s, "
        f"{hw.bandwidth / 1e9:.1f} GB/s)",
        i_crit=hw.i_crit,
        intensity=pd.DataFrame(rows),
        k_opt={b: float(o.k) if o.reached else math.nan for b, o in opts.items()},
        note=f"{shape.name}, prefix s = {s} tokens, {dtype_bytes} bytes per element; "
        "draft terms as in Appendix C (5 draft steps of k tokens).",
    )


def fit_decode_sweep(
    store: ResultsStore,
    sweep_id: int,
    sweep_name: str,
    dashboard: Path,
    tracker: Tracker | None = None,
    parent_run: str | None = None,
    *,
    persist: bool = True,
    description: str = "",
) -> tuple[LogLinearFit, list[str]]:
    """Fit Thm 1.3 and Eq. 4 over completed trials, store them (unless ``persist=False``; stored
    also as ``k_law.json`` beside the dashboard, for ``decode.k_law: sweep:<name>``), write the
    dashboard (``description``: the sweep's spec ``description``, shown on it).

    Returns:
        The Thm 1.3 fit and summary lines for the console (best k per b, speedups, roofline).

    Raises:
        StoreError, TrackingError: the DB or MLflow failed.
    """
    df = decode_frame(store, sweep_id)
    best = best_per_batch(df)
    peak = fit_peak_throughput(best)
    kfit = fit_k_opt(best)
    trials = store.trials(sweep_id)
    cfg: dict[str, Any] = trials[0].config if trials else {}
    dtype = cfg.get("target", {}).get("dtype", "float32")
    roof = local_roofline(
        df,
        cfg.get("target", {}).get("model", DEFAULT_TARGET),
        4 if dtype in ("float32", "auto") else 2,
    )
    if persist:
        store.save_fit(sweep_id, fit_record("batch", peak, {"best": best.to_dict("records")}))
        store.save_fit(sweep_id, fit_record("k_opt", kfit.log2, {"eq4": kfit.eq4.to_dict()}))
        # for later sweeps' ``decode.k_law: sweep:<name>`` trials, which read no database
        write_sweep_k_law(
            dashboard.parent,
            kfit.eq4.to_dict(),
            sweep=sweep_name,
            target=str(cfg.get("target", {}).get("model", DEFAULT_TARGET)),
        )
    if tracker is not None and parent_run is not None:
        numbers = {"a": peak.a, "b": peak.b, "r2": peak.r2, "n": float(peak.n)}
        tracker.log_metrics(parent_run, {f"fit.batch.{k}": float(v) for k, v in numbers.items()})
    dashboard.parent.mkdir(parents=True, exist_ok=True)
    write_decode_dashboard(
        dashboard,
        sweep_name=sweep_name,
        trials=df,
        best=best,
        peak_fit=peak,
        k_fit=kfit,
        roofline=roof,
        description=description,
    )
    if tracker is not None and parent_run is not None:
        tracker.log_artifact(parent_run, dashboard)
    lines = left_out_lines(df)
    cmp = compare_k_opt(best, roof.k_opt) if roof is not None else None
    for _, row in best.iterrows():
        pred = ""
        if cmp is not None:
            hit = cmp[cmp["batch_size"] == row["batch_size"]]
            if len(hit):
                k_roof = hit.iloc[0].get("predicted_k_opt", math.nan)
                pred = f", roofline k_opt {fmt(k_roof, '.0f')}"
        lines.append(
            f"b={int(row['batch_size'])}: best k {fmt(row['best_num_draft_tokens'], '.0f')}, "
            f"{fmt(row['peak_tokens_per_s'], '.1f')} tok/s, speedup over AR "
            f"{fmt(row['speedup'], '.2f')}x, acceptance length "
            f"{fmt(row['acceptance_length'], '.2f')}{pred}"
        )
    return peak, lines


def left_out_lines(df: pd.DataFrame) -> list[str]:
    """One console line naming the completed trials whose ``tokens_per_s`` is undefined (NaN:
    nothing generated), which the fits and the best-k table leave out; none when there are
    none."""
    if "state" not in df or "tokens_per_s" not in df:
        return []
    done = df[df["state"] == "completed"]
    tps = pd.to_numeric(done["tokens_per_s"], errors="coerce")
    gone = done[~tps.between(-math.inf, math.inf)]
    if gone.empty:
        return []
    points = ", ".join(
        f"b={b} k={k}" for b, k in zip(gone["batch_size"], gone["num_draft_tokens"], strict=True)
    )
    s = "s" if len(gone) != 1 else ""
    return [f"{len(gone)} completed trial{s} with tokens_per_s n/a left out of the fits: {points}"]


def fit_record(law: str, fit: LogLinearFit, details: dict[str, Any]) -> dict[str, Any]:
    """A fit as the results store's fit row (``ResultsStore.save_fit``)."""
    return {
        "law": law,
        "x_name": fit.x_name,
        "y_name": fit.y_name,
        "form": fit.form,
        "a": fit.a,
        "b": fit.b,
        "a_lo": fit.a_ci[0],
        "a_hi": fit.a_ci[1],
        "b_lo": fit.b_ci[0],
        "b_hi": fit.b_ci[1],
        "r2": fit.r2,
        "n": fit.n,
        "details": {"status": fit.status, "x": fit.x, "y": fit.y, **details},
    }
