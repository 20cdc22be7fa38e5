"""``orchestrator plan``: the measured laws of a results DB turned into what to train and how to
serve it (the rule: :mod:`analysis.plan`), every figure with its interval and, where it rests
on a value beyond the measured range, its extrapolation label.

Inputs: :mod:`orchestrator.planning.inputs`; training hours: :mod:`orchestrator.cost.model`
(see docs/plan.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.budget_effect import BudgetEffect, budget_effect
from analysis.holdout import score_holdout
from analysis.laws import LogLinearFit, fit_log_linear
from analysis.plan import (
    Law,
    ServingInputs,
    ServingPlan,
    TrainingPlan,
    fit_law,
    plan_serving,
    plan_training,
    tokens_labels,
)
from analysis.tau_k import TauKFit, fit_tau_k
from orchestrator.errors import OrchestratorError
from orchestrator.planning.inputs import (
    LAYERS,
    TOKENS,
    DecodeData,
    PlanSweeps,
    choose_sweeps,
    finite_number,
    resolve_shape_name,
)
from orchestrator.store.results import ResultsStore

__all__ = ["DEFAULT_MIN_GAIN", "DEFAULT_PREFIX", "PlanOptions", "make_plan"]

DEFAULT_MIN_GAIN = 0.05
"""acceptance length per added training hour below which the plan stops training for more"""

DEFAULT_PREFIX = 1024
"""prefix length s of the roofline's decoding step (tokens in each KV cache)"""


@dataclass(frozen=True)
class PlanOptions:
    """What the user asked for (the CLI's options, checked)."""

    sweeps: tuple[str, ...] = ()
    model: str | None = None
    """roofline target shape (None: the measured target's)"""
    hardware: str | None = None
    """hardware profile (None: local-cpu, this machine)"""
    batch_mix: Mapping[int, float] = field(default_factory=lambda: {1: 1.0})
    budget_hours: float | None = None
    min_gain: float = DEFAULT_MIN_GAIN
    prefix: int = DEFAULT_PREFIX
    holdout: float | None = None
    """plan from the token trials at budgets <= this and score the rest"""
    allow_mixed_targets: bool = False
    n_resamples: int = 1000
    seed: int = 0
    cache_dir: Path | None = None
    """where a local-cpu profile is cached (``hw.cached``)"""
    profile: Any = None
    """a :class:`~workloads.roofline.hardware.HardwareProfile` used instead of measuring
    local-cpu (tests, the synthetic DB)"""


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
    costed_as = _costed_as(sw, model, measured_shape, hw_name)
    hours, cost_basis = _hours_fn(store, sw, opts, costed_as)
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
    """target and dtype the training hours are costed for (:func:`_costed_as`)"""
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
    per batch size of the mix, of the measured setting (:func:`_measured_k`) and of a ladder
    of batch sizes."""
    dec = sw.decode
    tau_k = fit_tau_k(
        dec.table["num_draft_tokens"],
        dec.table["acceptance_length"],
        n_resamples=opts.n_resamples,
        seed=opts.seed + 2,
    )
    g, g_note = _rescale(
        laws.tokens, laws.depth, laws.d0, training.tokens, training.layers, sw, dec
    )
    serving_inputs = _serving_inputs(model, hw_name, opts, dec)
    measured_b = sorted({int(b) for b in dec.table["batch_size"]})
    serving = plan_serving(
        tau_k,
        g,
        serving_inputs,
        measured_b=measured_b,
        labels=[*labels, *training.labels],
    )
    measured_k = _measured_k(tau_k, dec, measured_shape, sw, opts, measured_b)
    top = max(64, *opts.batch_mix)
    ladder = sorted({2**i for i in range(13) if 2**i <= top} | set(opts.batch_mix))
    even = {b: 1.0 / len(ladder) for b in ladder}
    on_ladder = plan_serving(
        tau_k, g, _serving_inputs(model, hw_name, opts, dec, even), measured_b=measured_b
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


def _costed_as(sw: PlanSweeps, model: str, measured: str | None, hw_name: str) -> dict[str, str]:
    """The target and dtype the training hours are costed for: the token sweep's own config,
    with ``--model``'s shape as the target when it names another one, and bfloat16 on a GPU
    when the sweep trained in float32."""
    from workloads.roofline.hardware import LOCAL_CPU

    target = sw.tokens.trials[0].config.get("target") or {}
    out = {"target": str(target.get("model", "")), "dtype": str(target.get("dtype", "float32"))}
    if model != measured:
        out["target"] = model
    if hw_name != LOCAL_CPU and out["dtype"] == "float32":
        out["dtype"] = "bfloat16"
    return out


def _hours_fn(
    store: ResultsStore,
    sw: PlanSweeps,
    opts: PlanOptions,
    costed_as: Mapping[str, str] | None = None,
) -> tuple[Callable[[float, int], float], str]:
    """(tokens, layers) -> predicted training hours on one device (every stage but the
    evaluation) of one trial of the token sweep's config at that budget and depth, costed for
    ``costed_as`` (:func:`_costed_as`), and the figures' basis (another target or dtype than
    the trials ran: modelled). On this CPU the profile is the one cached under
    ``opts.cache_dir`` (measured and cached when there is none); nothing else cached counts."""
    from orchestrator.cost import model as costing
    from orchestrator.cost.hardware import check_hardware_name
    from orchestrator.spec.sweep import merge_overrides, parse_spec
    from workloads.roofline.hardware import LOCAL_CPU, get_profile

    info = store.get_sweep(sw.tokens.sweep)
    assert info is not None
    spec = parse_spec(info.spec_yaml, Path(f"<results DB: sweep {info.name}>"))

    hardware = opts.hardware
    local = hardware is None or check_hardware_name(hardware) == LOCAL_CPU
    profile = opts.profile if local else None
    if local and profile is None:
        dtype = (costed_as or {}).get("dtype", "float32")
        threads = max(1, int(spec.resources.num_cpus))
        profile = get_profile(LOCAL_CPU, dtype=dtype, threads=threads, cache_dir=opts.cache_dir)
    predict = costing.predictor(store, spec, hardware=hardware, profile=profile)
    bases: set[str] = set()
    extra: dict[str, Any] = {}
    if costed_as:
        extra = {"target.model": costed_as["target"], "target.dtype": costed_as["dtype"]}

    def hours(t: float, d: int) -> float:
        over = {**extra, TOKENS: int(round(t)), LAYERS: int(d), "seed": 0}
        cfg = spec.config_model.model_validate(merge_overrides(spec.base, over))
        cost = predict(cfg)
        stages = [s for s in cost.stages if s.stage != "eval"]
        if any(s.seconds is None for s in stages):
            raise OrchestratorError(
                f"the training cost of {t:,.0f} tokens is unknown to the cost model "
                f"({cost.basis}). Fix: run the token sweep on this hardware first, or name a "
                "hardware the cost model knows (--hardware h200)"
            )
        bases.update(s.basis for s in stages)
        return sum(s.seconds or 0.0 for s in stages) / 3600.0

    hours(min(sw.tokens.x), 1)  # refuse an unknown cost before planning
    return hours, "+".join(sorted(bases)) or "unknown"


def _rescale(
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


def _serving_inputs(
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


def _measured_k(
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
    inputs = _serving_inputs(measured_shape, LOCAL_CPU, opts, dec, mix)
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
