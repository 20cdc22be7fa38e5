"""``orchestrator plan``: the measured laws of a results DB turned into what to train and how to
serve it (the rule: :mod:`analysis.plan`), every figure with its interval and, where it rests
on a value beyond the measured range, its extrapolation label.

Inputs and options: :mod:`orchestrator.planning.inputs`; training hours:
:mod:`orchestrator.planning.hours` (the cost model, see docs/plan.md); the serving half's
inputs: :mod:`orchestrator.planning.serving_inputs`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.budget_effect import BudgetEffect, budget_effect
from analysis.holdout import score_holdout
from analysis.laws import LogLinearFit, fit_log_linear
from analysis.plan import (
    Law,
    ServingPlan,
    TrainingPlan,
    fit_law,
    plan_serving,
    plan_training,
    tokens_labels,
)
from analysis.tau_k import TauKFit, fit_tau_k
from orchestrator.errors import OrchestratorError
from orchestrator.planning.hours import costed_for, hours_fn
from orchestrator.planning.inputs import (
    DecodeData,
    PlanOptions,
    PlanSweeps,
    choose_sweeps,
    resolve_shape_name,
)
from orchestrator.planning.serving_inputs import check_measured_k, rescale, roofline_inputs
from orchestrator.store.results import ResultsStore

__all__ = ["make_plan"]


def make_plan(store: ResultsStore, opts: PlanOptions) -> dict[str, Any]:
    """The plan as JSON-safe data (keys: ``sweeps``, ``options``,
    ``laws``, ``training``, ``serving``, ``measured_k``, ``holdout``, ``predictions``,
    ``labels``, ``elapsed_s``).

    Raises:
        OrchestratorError: a refusal of :mod:`orchestrator.planning.inputs`, an unknown model or
            hardware, or a training cost the cost model cannot give.
    """
    from orchestrator.cost.hardware import check_hardware_name
    from workloads.roofline.hardware import LOCAL_CPU

    t0 = time.perf_counter()
    # 1. the sweeps, the roofline's target shape and hardware, and the labels they imply
    hw_name = check_hardware_name(opts.hardware or LOCAL_CPU)
    sw = choose_sweeps(store, opts.sweeps, allow_mixed_targets=opts.allow_mixed_targets)
    measured_shape = _shape_of(sw.tokens.target)
    model = _planned_shape(sw, opts, measured_shape)
    labels = _context_labels(sw, model, measured_shape, hw_name, opts)
    # 2. the laws: tokens (on the trials --holdout keeps), depth, the trials' draft depth
    laws = _fit_laws(sw, opts)
    # 3. training: its hours from the cost model, the budget where the gain falls off
    costed_as = costed_for(sw, model, measured_shape, hw_name)
    hours, cost_basis = hours_fn(store, sw, opts, costed_as)
    training = _plan_training(laws, hours, opts, labels)
    # 4. serving: k per batch size for the planned draft, checked against the measured one
    serve = _plan_serving(sw, opts, laws, training, labels, model, measured_shape, hw_name)
    # 5. the plan as data
    where = _Setting(hw_name, model, measured_shape, costed_as, cost_basis)
    data = _plan_data(store, sw, opts, where, laws, training, serve, labels)
    return {**data, "elapsed_s": time.perf_counter() - t0}


@dataclass(frozen=True)
class _Setting:
    """What a plan is for and how its training is costed."""

    hw_name: str
    model: str
    """the roofline target shape"""
    measured_shape: str | None
    """the measured target's shape (None: no built-in one)"""
    costed_as: Mapping[str, str]
    """target and dtype the training hours are costed for
    (:func:`~orchestrator.planning.hours.costed_for`)"""
    cost_basis: str
    """the bases of the training hours (``calibrated``, ``modelled``, joined by ``+``)"""


@dataclass(frozen=True)
class _Laws:
    """The laws a plan rests on."""

    xs: np.ndarray
    """pretraining tokens of the token trials kept (all, or those at or below --holdout)"""
    ys: np.ndarray
    """their acceptance lengths"""
    holdout: dict[str, Any] | None
    """the score of the budgets --holdout left out (None: no --holdout)"""
    fit: LogLinearFit
    """the token law's OLS fit (a, b, their CIs, R²)"""
    shared: BudgetEffect
    """the token law with a shared deviation per budget, for its intervals"""
    tokens: Law
    depth: Law | None
    d0: int
    """the draft decoder layers the token trials trained (their mode)"""


@dataclass(frozen=True)
class _Serving:
    """The serving half of a plan."""

    tau_k: TauKFit
    plan: ServingPlan
    rescale_note: str
    measured_k: list[dict[str, Any]]
    ladder: ServingPlan
    """k per power-of-two batch size up to the mix's largest (and 64), weighted evenly"""


def _planned_shape(sw: PlanSweeps, opts: PlanOptions, measured_shape: str | None) -> str:
    """The roofline target shape: --model's, else the measured target's."""
    model = resolve_shape_name(opts.model) if opts.model else measured_shape
    if model is None:
        raise OrchestratorError(
            f"the measured target {sw.tokens.target!r} has no built-in roofline shape. Fix: "
            "name one with --model (e.g. --model smollm2-135m)"
        )
    return model


def _fit_laws(sw: PlanSweeps, opts: PlanOptions) -> _Laws:
    """The token law on the trials --holdout keeps (with the score of those it leaves out),
    the depth law when there is a depth sweep, and the token trials' draft depth."""
    xs, ys = np.asarray(sw.tokens.x), np.asarray(sw.tokens.y)
    holdout = None
    if opts.holdout is not None:
        try:
            holdout = score_holdout(xs.tolist(), ys.tolist(), opts.holdout).to_dict()
        except ValueError as e:
            raise OrchestratorError(str(e)) from None
        keep = xs <= opts.holdout
        xs, ys = xs[keep], ys[keep]
    frame = pd.DataFrame({"x": xs, "y": ys})
    fit = fit_log_linear(frame, "x", "y", law="tokens", log_base=10)
    tokens = fit_law(
        "tokens",
        xs.tolist(),
        ys.tolist(),
        sweep=sw.tokens.sweep,
        n_resamples=opts.n_resamples,
        seed=opts.seed,
    )
    depth = None
    if sw.depth is not None:
        depth = fit_law(
            "layers",
            sw.depth.x,
            sw.depth.y,
            sweep=sw.depth.sweep,
            n_resamples=opts.n_resamples,
            seed=opts.seed + 1,
        )
    d0 = _mode(int((t.config.get("draft") or {}).get("layers", 1)) for t in sw.tokens.trials)
    shared = budget_effect(xs.tolist(), ys.tolist())
    return _Laws(xs, ys, holdout, fit, shared, tokens, depth, d0)


def _plan_training(
    laws: _Laws, hours: Callable[[float, int], float], opts: PlanOptions, labels: list[str]
) -> TrainingPlan:
    """The training plan (:func:`analysis.plan.plan_training`); adds to ``labels`` that the
    token law's slope is uncertain when its 95% CI reaches 0."""

    def mean_ci(t: float) -> tuple[float, float]:
        p = laws.shared.predict([t])  # an acceptance length is >= 1 (the bonus token): clipped
        return max(1.0, float(p["value_lo"][0])), max(1.0, float(p["value_hi"][0]))

    fit = laws.fit
    if not fit.a_ci[0] > 0:
        labels.append(
            f"uncertain: the token law's slope a = {fit.a:.4f} [{fit.a_ci[0]:.4f}, "
            f"{fit.a_ci[1]:.4f}] is not above 0 at 95%: more pretraining tokens may not help"
        )
    try:
        return plan_training(
            laws.tokens,
            laws.depth,
            d0=laws.d0,
            hours=hours,
            budget_hours=opts.budget_hours,
            min_gain=opts.min_gain,
            mean_ci=mean_ci,
        )
    except ValueError as e:
        raise OrchestratorError(f"{e}. Fix: a larger --budget-hours") from None


def _plan_serving(
    sw: PlanSweeps,
    opts: PlanOptions,
    laws: _Laws,
    training: TrainingPlan,
    labels: Sequence[str],
    model: str,
    measured_shape: str | None,
    hw_name: str,
) -> _Serving:
    """Acceptance versus k fitted on the decode sweep, rescaled to the planned draft; the k
    per batch size of the mix, of the measured setting
    (:func:`~orchestrator.planning.serving_inputs.check_measured_k`) and of a ladder
    of batch sizes."""
    dec = sw.decode
    tau_k = fit_tau_k(
        dec.table["num_draft_tokens"],
        dec.table["acceptance_length"],
        n_resamples=opts.n_resamples,
        seed=opts.seed + 2,
    )
    g, g_note = rescale(laws.tokens, laws.depth, laws.d0, training.tokens, training.layers, sw, dec)
    serving_inputs = roofline_inputs(model, hw_name, opts, dec)
    measured_b = sorted({int(b) for b in dec.table["batch_size"]})
    serving = plan_serving(
        tau_k,
        g,
        serving_inputs,
        measured_b=measured_b,
        labels=[*labels, *training.labels],
    )
    measured_k = check_measured_k(tau_k, dec, measured_shape, sw, opts, measured_b)
    top = max(64, *opts.batch_mix)
    ladder = sorted({2**i for i in range(13) if 2**i <= top} | set(opts.batch_mix))
    even = {b: 1.0 / len(ladder) for b in ladder}
    on_ladder = plan_serving(
        tau_k, g, roofline_inputs(model, hw_name, opts, dec, even), measured_b=measured_b
    )
    return _Serving(tau_k, serving, g_note, measured_k, on_ladder)


def _plan_data(
    store: ResultsStore,
    sw: PlanSweeps,
    opts: PlanOptions,
    where: _Setting,
    laws: _Laws,
    training: TrainingPlan,
    serve: _Serving,
    labels: Sequence[str],
) -> dict[str, Any]:
    """The plan as JSON-safe data, all but ``elapsed_s`` (:func:`make_plan`'s keys)."""
    dec, fit, shared = sw.decode, laws.fit, laws.shared
    return {
        "sweeps": {
            "tokens": sw.tokens.sweep,
            "depth": sw.depth.sweep if sw.depth else None,
            "decode": dec.sweep,
        },
        "targets": {
            "measured": sw.tokens.target,
            "decode": dec.target,
            "shape": where.model,
            "measured_shape": where.measured_shape,
        },
        "hardware": where.hw_name,
        "options": {
            "batch_mix": {str(b): w for b, w in sorted(opts.batch_mix.items())},
            "budget_hours": opts.budget_hours,
            "min_gain": opts.min_gain,
            "prefix": opts.prefix,
            "holdout": opts.holdout,
            "n_resamples": opts.n_resamples,
        },
        "laws": {
            "tokens": {
                **fit.to_dict(),
                "sweep": sw.tokens.sweep,
                "sigma2_between": shared.sigma2_between,
                "ms_pe": shared.ms_pe,
                "intervals": "budget means (a shared deviation per budget)"
                if shared.shared
                else "trials (OLS)",
            },
            "layers": _depth_summary(sw) if sw.depth else None,
            "d0": laws.d0,
            "tau_k": serve.tau_k.summary(),
        },
        "cost_basis": where.cost_basis,
        "costed_as": {**where.costed_as, "hardware": where.hw_name},
        "training": training.to_dict(),
        "serving": {**serve.plan.to_dict(), "rescale_note": serve.rescale_note},
        "measured_k": serve.measured_k,
        "k_ladder": [{"batch_size": r["batch_size"], "k": r["k"]} for r in serve.ladder.rows],
        "tree": {"depth": dec.depth, "topk": _topk(store, dec)},
        "decode_points": [
            {
                "batch_size": int(r.batch_size),
                "k": int(r.num_draft_tokens),
                "acceptance_length": float(r.acceptance_length),
                "tokens_per_s": float(r.tokens_per_s),
            }
            for r in dec.table.itertuples()
        ],
        "holdout": laws.holdout,
        "predictions": _predictions(shared, laws.tokens, training.tokens),
        "labels": list(dict.fromkeys([*labels, *training.labels, *serve.plan.labels])),
        "notes": sw.notes,
    }


# -- pieces ---------------------------------------------------------------------------------


def _shape_of(target: str) -> str | None:
    from workloads.roofline.models import canonical_name

    return canonical_name(target.split(", ")[0]) if target else None


def _context_labels(
    sw: PlanSweeps, model: str, measured: str | None, hw_name: str, opts: PlanOptions
) -> list[str]:
    """Labels every serving figure carries: another target shape or hardware than measured."""
    from workloads.roofline.hardware import LOCAL_CPU

    out = [
        f"extrapolated: {n} (the laws and the decode data come from different targets)"
        for n in sw.notes
        if n.startswith("mixed targets")
    ]
    if model != measured:
        out.append(
            f"another target: {model} (the laws were measured on {sw.tokens.target}); extrapolated"
        )
    measured_hw = "GPU" if sw.tokens.gpus else "CPU"
    if (hw_name == LOCAL_CPU) == sw.tokens.gpus:
        out.append(f"another hardware: {hw_name} (the trials ran on a {measured_hw}); extrapolated")
    elif hw_name == LOCAL_CPU and sw.tokens.hardware_ids and not _this_cpu(sw, opts):
        out.append("another CPU than the trials ran on (hardware.id differs); extrapolated")
    return out


def _this_cpu(sw: PlanSweeps, opts: PlanOptions) -> bool:
    from workloads.roofline.hardware import fingerprint_id, hardware_fingerprint

    threads = {
        int((t.config.get("resources") or {}).get("num_cpus", 1) or 1) for t in sw.tokens.trials
    }
    ids = {fingerprint_id(hardware_fingerprint(device="cpu", threads=n)) for n in threads | {1, 2}}
    return bool(ids & set(sw.tokens.hardware_ids))


def _mode(values: Any) -> int:
    vals = list(values)
    return max(set(vals), key=vals.count) if vals else 1


def _topk(store: ResultsStore, dec: DecodeData) -> int:
    info = store.get_sweep(dec.sweep)
    trials = store.trials(info.id, {"completed"}) if info is not None else []
    return int(((trials[0].config.get("decode") or {}).get("topk") or 4) if trials else 4)


def _depth_summary(sw: PlanSweeps) -> dict[str, Any]:
    assert sw.depth is not None
    frame = pd.DataFrame({"x": sw.depth.x, "y": sw.depth.y})
    return {**fit_log_linear(frame, "x", "y", law="layers").to_dict(), "sweep": sw.depth.sweep}


def _predictions(shared: BudgetEffect, tokens: Law, t_plan: float) -> list[dict[str, Any]]:
    """tau at each decade of budgets from the smallest measured to past the plan, with the
    law's value interval and one new trial's (:mod:`analysis.budget_effect`) and the
    extrapolation label."""
    lo = math.floor(math.log10(min(tokens.x)))
    hi = math.ceil(math.log10(max(t_plan, tokens.x_max) * 10))
    budgets = sorted({10.0**e for e in range(lo, hi + 1)} | set(tokens.x) | {t_plan})
    p = shared.predict(budgets)
    return [
        {
            "tokens": t,
            "acceptance_length": float(p["mean"][i]),
            "mean_ci": (float(p["value_lo"][i]), float(p["value_hi"][i])),
            "obs_ci": (float(p["obs_lo"][i]), float(p["obs_hi"][i])),
            "labels": tokens_labels(t, tokens),
        }
        for i, t in enumerate(budgets)
    ]
