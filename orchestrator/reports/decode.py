"""After a ``decode_bench`` sweep: Thm 1.3 and Eq. 4 fits, the local roofline, the dashboard.

The roofline (Scylla Sec. 3.2, Appendix C) is evaluated for the sweep's target on the hardware
the trials ran on: on CPU, the peak FLOP/s and bandwidth each trial measured
(``hw.peak_flops``, ``hw.bandwidth``; the median over trials), at the prompt length the trials
decoded (``prompt_tokens_mean``). Its k_opt(b) is compared with the measured best k per b.

A sweep whose trials differ in a condition of the measurement (``decode.temperature``,
``draft.oracle_accept``, ``target.dtype``, ``target.model``) is analysed per condition
(:func:`analysis.throughput.split_conditions`): one labelled page and set of console lines per
condition; the stored fits and ``k_law.json`` are those of the reference condition (the lowest
temperature, the highest oracle_accept, the first dtype and target by name). Trials
that differ in ``prompts.prompt_sets`` are pooled, with a warning
(:func:`orchestrator.reports.conditions.pooled_sets_line`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.break_even import Crossing, batch_crossing
from analysis.eq4 import KOptFit, fit_k_opt
from analysis.laws import LogLinearFit
from analysis.numbers import fmt
from analysis.throughput import (
    METRICS,
    RooflineData,
    best_per_batch,
    compare_k_opt,
    fit_peak_throughput,
    split_conditions,
)
from dashboards._html import Section
from dashboards.decode_page import write_decode_dashboard
from orchestrator.reports.conditions import pooled_sets_line, prompt_sets
from orchestrator.store.results import ResultsStore
from orchestrator.tracking.tracker import Tracker
from workloads.engine.k_law import write_sweep_k_law
from workloads.models.target_source import DEFAULT_TARGET, builtin_target
from workloads.roofline.costs import intensity, k_opt
from workloads.roofline.hardware import HardwareProfile
from workloads.roofline.models import load_model_shape

K_RANGE = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]
"""k values of the intensity curves on the dashboard"""


def decode_frame(store: ResultsStore, sweep_id: int) -> pd.DataFrame:
    """The sweep's trials with the tree knobs of each trial's full config and its error text,
    and the conditions ``temperature`` and ``oracle_accept`` where the trials differ in them
    (columns left out when constant, so such a sweep's table is as before)."""
    df = store.metrics_frame(sweep_id)
    by_key = {t.key: t for t in store.trials(sweep_id)}
    for knob in ("batch_size", "num_draft_tokens", "depth", "topk"):
        df[knob] = df["trial_key"].map(lambda k, n=knob: by_key[k].config["decode"][n])
    conditions = {
        "temperature": lambda c: c["decode"].get("temperature", 0.0),
        "oracle_accept": lambda c: c.get("draft", {}).get("oracle_accept", 1.0),
    }
    for name, read in conditions.items():
        values = df["trial_key"].map(lambda k, r=read: float(r(by_key[k].config)))
        if values.nunique() > 1:
            df[name] = values
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
        builtin = builtin_target(target_model)
        shape = load_model_shape(builtin.shape if builtin else target_model)
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


@dataclass(frozen=True)
class _Part:
    """One condition's analysis: its label (``""`` when the sweep varies none), trials, best
    configuration per b, Thm 1.3 and Eq. 4 fits, roofline, and the page it is drawn on."""

    label: str
    trials: pd.DataFrame
    best: pd.DataFrame
    peak: LogLinearFit
    kfit: KOptFit
    roof: RooflineData | None
    page: Path
    speedup: LogLinearFit
    crossing: Crossing


def _parts(df: pd.DataFrame, cfg: dict[str, Any], dashboard: Path) -> list[_Part]:
    """The analysis of each condition of the sweep (:func:`split_conditions`), the reference
    condition first, on ``dashboard``; the others on ``<stem>-<condition>.html`` beside it."""
    target = cfg.get("target", {})
    dtype = target.get("dtype", "float32")
    parts = []
    for i, (label, trials) in enumerate(split_conditions(df)):
        best = best_per_batch(trials)
        slug = re.sub(r"[^A-Za-z0-9.]+", "-", label).strip("-")
        page = dashboard if i == 0 else dashboard.with_name(f"{dashboard.stem}-{slug}.html")
        if "target.dtype" in trials.columns:  # a dtype axis: each part has its own
            dtype = str(trials["target.dtype"].iloc[0])
        roof = local_roofline(
            trials, target.get("model", DEFAULT_TARGET), 4 if dtype in ("float32", "auto") else 2
        )
        peak, kfit = fit_peak_throughput(best), fit_k_opt(best)
        parts.append(_Part(label, trials, best, peak, kfit, roof, page, *batch_crossing(best)))
    return parts


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
    sections: Sequence[Section] = (),
) -> tuple[LogLinearFit, list[str]]:
    """Fit Thm 1.3 and Eq. 4 over completed trials, store them (unless ``persist=False``; stored
    also as ``k_law.json`` beside the dashboard, for ``decode.k_law: sweep:<name>``), write the
    dashboard (``description``: the spec's, shown on it). Per condition as the module says:
    the fits stored and returned are the reference condition's, each other condition gets its
    own page beside ``dashboard``. ``sections`` (the cost, the design) close the reference
    condition's page.

    Returns:
        The Thm 1.3 fit and summary lines for the console (best k per b, speedups, roofline,
        the pooled-prompt-sets warning).

    Raises:
        StoreError, TrackingError: the DB or MLflow failed.
    """
    df = decode_frame(store, sweep_id)
    trials = store.trials(sweep_id)
    cfg: dict[str, Any] = trials[0].config if trials else {}
    parts = _parts(df, cfg, dashboard)
    sets = {t.key: prompt_sets(t.config) for t in trials}
    pooled = {p.label: pooled_sets_line(p.trials, sets) for p in parts}
    ref = parts[0]
    if persist:
        cond = {"condition": ref.label} if ref.label else {}
        eq4 = {**ref.kfit.eq4.to_dict(), **cond}
        best = {"best": ref.best.to_dict("records"), **cond}
        store.save_fit(sweep_id, fit_record("batch", ref.peak, best))
        store.save_fit(sweep_id, fit_record("k_opt", ref.kfit.log2, {"eq4": eq4}))
        crossing = {"crossing": ref.crossing.to_dict(), **cond}
        store.save_fit(sweep_id, fit_record("speedup", ref.speedup, crossing))
        # for later sweeps' ``decode.k_law: sweep:<name>`` trials, which read no database
        write_sweep_k_law(
            dashboard.parent,
            eq4,
            sweep=sweep_name,
            target=str(cfg.get("target", {}).get("model", DEFAULT_TARGET)),
        )
    peak = ref.peak
    if tracker is not None and parent_run is not None:
        numbers = {"a": peak.a, "b": peak.b, "r2": peak.r2, "n": float(peak.n)}
        tracker.update_metrics(parent_run, {f"fit.batch.{k}": float(v) for k, v in numbers.items()})
    dashboard.parent.mkdir(parents=True, exist_ok=True)
    for part in parts:
        write_decode_dashboard(
            part.page,
            sweep_name=sweep_name,
            trials=part.trials,
            best=part.best,
            peak_fit=part.peak,
            k_fit=part.kfit,
            roofline=part.roof,
            description=" ".join(
                x for x in (_page_description(description, part, parts), pooled[part.label]) if x
            ),
            sections=sections if part is ref else (),
        )
        if tracker is not None and parent_run is not None:
            tracker.log_artifact(parent_run, part.page)
    lines = left_out_lines(df) + _conditions_lines(parts)
    lines += [f"{label}: {w}" if label else w for label, w in pooled.items() if w]
    for part in parts:
        lines += _best_lines(part, prefix=f"{part.label}: " if part.label else "")
        if len(part.best):
            label = f"{part.label}: " if part.label else ""
            lines.append(label + crossing_line(part.speedup, part.crossing))
    return peak, lines


def _page_description(description: str, part: _Part, parts: list[_Part]) -> str:
    """The spec's description, and on a sweep of several conditions which one the page shows
    and the pages of the others."""
    if len(parts) == 1:
        return description
    others = ", ".join(f"{p.label} ({p.page.name})" for p in parts if p is not part)
    said = (
        f"This sweep's trials differ in their conditions, analysed apart: this page shows "
        f"{part.label}; the others: {others}."
    )
    return f"{description} {said}" if description else said


def _conditions_lines(parts: list[_Part]) -> list[str]:
    """One console line when the sweep has several conditions: which, and what was stored."""
    if len(parts) == 1:
        return []
    return [
        f"the trials differ in their conditions, analysed apart (never averaged): "
        f"{'; '.join(p.label for p in parts)}. The stored fits and k_law.json are those of "
        f"{parts[0].label}; pages: {', '.join(p.page.name for p in parts)}"
    ]


def _best_lines(part: _Part, *, prefix: str) -> list[str]:
    """The console line of each batch size: best k, tokens/s, speedup, acceptance length and
    the roofline's k_opt."""
    cmp = compare_k_opt(part.best, part.roof.k_opt) if part.roof is not None else None
    lines = []
    for _, row in part.best.iterrows():
        pred = ""
        if cmp is not None:
            hit = cmp[cmp["batch_size"] == row["batch_size"]]
            if len(hit):
                k_roof = hit.iloc[0].get("predicted_k_opt", math.nan)
                pred = f", roofline k_opt {fmt(k_roof, '.0f')}"
        lines.append(
            f"{prefix}b={int(row['batch_size'])}: best k "
            f"{fmt(row['best_num_draft_tokens'], '.0f')}, "
            f"{fmt(row['peak_tokens_per_s'], '.1f')} tok/s, speedup over AR "
            f"{fmt(row['speedup'], '.2f')}x, acceptance length "
            f"{fmt(row['acceptance_length'], '.2f')}{pred}"
        )
    return lines


def crossing_line(fit: LogLinearFit, c: Crossing, baseline: str = "AR") -> str:
    """Thm 1.3's crossing as one console line: where the best speedup over ``baseline``
    decoding crosses 1 (``fit`` and ``c`` from :func:`analysis.break_even.batch_crossing`),
    with its 95% set, or why there is none."""
    if c.status == "no fit":
        return f"speedup crossing 1: none ({fit.status})"
    if c.status == "unbounded":
        sign = "-" if fit.b < 0 else "+"
        return (
            f"speedup crossing 1: none supported (the speedup's trend over b is not resolved "
            f"from 0: speedup = {fmt(fit.a, '.3f')}*log2(b) {sign} {fmt(abs(fit.b), '.3f')}, "
            f"slope 95% CI [{fmt(fit.a_ci[0], '.3f')}, {fmt(fit.a_ci[1], '.3f')}]; its point "
            f"b* = {fmt(c.budget, '.3g')} is not a finding)"
        )
    at = f"b* = {fmt(c.budget, '.3g')} [{fmt(c.budget_lo, '.3g')}, {fmt(c.budget_hi, '.3g')}]"
    where = {"decreasing": f"below {at}", "ok": f"above {at}"}
    said = where.get(c.status, f"at every b measured ({at}, below them)")
    outside = ", extrapolated beyond the measured b" if c.extrapolated else ""
    return (
        f"speculation pays {said} (95%; the best speedup over {baseline} = a*log2(b) + b0 "
        f"crosses 1{outside})"
    )


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
