"""The serving half's inputs of a plan: the roofline's step times per batch size and k, the
acceptance of the decode sweep's draft rescaled to the planned draft, and the rule checked on
the measured setting (used by :mod:`orchestrator.planning.plan`; the rule:
:func:`analysis.plan.plan_serving`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.plan import Law, ServingInputs, plan_serving
from orchestrator.planning.inputs import TOKENS, DecodeData, PlanOptions, PlanSweeps, finite_number

__all__ = ["check_measured_k", "rescale", "roofline_inputs"]


def rescale(
    tokens: Law,
    depth: Law | None,
    d0: int,
    t_plan: float,
    d_plan: int,
    sw: PlanSweeps,
    dec: DecodeData,
) -> tuple[np.ndarray, str]:
    """g of :func:`analysis.plan.plan_serving` for the fit and each replicate, and what it
    rests on: the decode sweep's draft's budget when it is a trial of the token sweep."""
    src = dec.draft
    t_dec = None
    if src.get("source") == "trial" and src.get("sweep") == sw.tokens.sweep:
        trials = sw.tokens.trials
        key = str(src.get("trial_key") or "best")
        if key == "best":
            best = max(zip(sw.tokens.y, trials, strict=True), key=lambda p: p[0])[1]
            t_dec = float(best.overrides[TOKENS])
        else:
            match = [t for t in trials if t.key.startswith(key)]
            t_dec = float(match[0].overrides[TOKENS]) if match else None
    if t_dec is None or t_dec <= 0:
        return np.ones(1), (
            "acceptance vs k as the decode sweep measured it (its draft's budget is not a "
            "trial of the token sweep: not rescaled)"
        )
    plan = tokens.at(t_plan)
    if depth is not None:
        plan = plan + depth.coef[:, 0] * math.log10(d_plan / d0)
    base = tokens.at(t_dec)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = (plan - 1.0) / (base - 1.0)
    g = np.where(np.isfinite(g) & (g > 0), g, np.nan)
    return g, (
        f"acceptance vs k of the decode sweep's draft ({t_dec:,.0f} tokens) rescaled to the "
        f"planned draft by the token law: g = {float(g[0]):.3f}"
    )


def roofline_inputs(
    model: str,
    hw_name: str,
    opts: PlanOptions,
    dec: DecodeData,
    mix: Mapping[int, float] | None = None,
) -> ServingInputs:
    from workloads.roofline import get_profile, load_model_shape
    from workloads.roofline.costs import decoding_step, step_time, target_step

    shape = load_model_shape(model)
    local = opts.profile is not None and hw_name == opts.profile.name
    hw = opts.profile
    if not local:
        hw = get_profile(hw_name, threads=dec.threads, cache_dir=opts.cache_dir)
    bpe = hw.bytes_per_element
    steps = max(1, dec.depth or 5)
    ks = sorted({int(k) for k in dec.table["num_draft_tokens"]})

    def step_s(b: int, k: int, tau: float) -> float:
        t_acc = max(1, math.floor(tau + 0.5))
        cost = decoding_step(shape, b, k, opts.prefix, bpe, t_acc=t_acc, draft_steps=steps)
        return step_time(cost, hw)

    def ar_step_s(b: int) -> float:
        return step_time(target_step(shape, b, 1, opts.prefix, bytes_per_element=bpe), hw)

    return ServingInputs(
        batch_mix=dict(mix or opts.batch_mix),
        ks=tuple(range(max(2, ks[0]), ks[-1] + 1)),
        step_s=step_s,
        ar_step_s=ar_step_s,
        max_accept=float(dec.depth + 1) if dec.depth else math.inf,
    )


def check_measured_k(
    tau_k: Any,
    dec: DecodeData,
    measured_shape: str | None,
    sw: PlanSweeps,
    opts: PlanOptions,
    measured_b: Sequence[int],
) -> list[dict[str, Any]]:
    """The rule checked on the measured setting (the decode sweep's target and draft, this
    CPU's roofline, whatever ``--model``/``--hardware`` say): per measured b, the planned k
    beside the sweep's best k and the measured throughput at the planned k; the AR baseline
    of the same trials is k = 1. Empty when the trials ran on a GPU or the target has no
    built-in shape. ``share_of_best`` is None where the planned k was not in the grid."""
    from analysis.throughput import best_per_batch
    from workloads.roofline.hardware import LOCAL_CPU

    if measured_shape is None or sw.tokens.gpus:
        return []

    best = best_per_batch(dec.table.assign(state="completed"))
    mix = {b: 1.0 / len(measured_b) for b in measured_b}
    inputs = roofline_inputs(measured_shape, LOCAL_CPU, opts, dec, mix)
    same = plan_serving(tau_k, np.ones(1), inputs, measured_b=measured_b)
    surface = dec.table.groupby(["batch_size", "num_draft_tokens"])["tokens_per_s"].mean()
    ar = (
        dec.table.groupby("batch_size")["ar_tokens_per_s"].mean()
        if "ar_tokens_per_s" in dec.table
        else pd.Series(dtype=float)
    )
    out = []
    for row in same.rows:
        b = row["batch_size"]
        at = best[best["batch_size"] == b]
        if at.empty:
            continue
        ar_b = finite_number(ar.get(b))
        k_best = int(at["best_num_draft_tokens"].iloc[0])
        peak = float(at["peak_tokens_per_s"].iloc[0])
        if ar_b is not None and ar_b > peak:
            k_best, peak = 1, ar_b
        at_plan = ar_b if row["k"] == 1 else finite_number(surface.get((b, row["k"])))
        out.append(
            {
                "batch_size": b,
                "planned_k": row["k"],
                "planned_k_ci": row["k_ci"],
                "best_measured_k": k_best,
                "best_measured_tokens_per_s": peak,
                "ar_tokens_per_s": ar_b,
                "roofline_ar_tokens_per_s": b / inputs.ar_step_s(b),
                "measured_tokens_per_s_at_planned_k": at_plan,
                "share_of_best": None if at_plan is None else at_plan / peak,
                "labels": row["labels"],
            }
        )
    return out
