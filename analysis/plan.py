"""From measured laws to a training-and-serving plan, with intervals and extrapolation labels.

**Training** (Scylla, arXiv 2505.07858, Sec. 4.4). The token law ``tau = a_T*log10(T) + b_T``
(Thm 1.1) and, when a depth sweep exists, the depth law ``tau = a_D*log10(D) + b_D`` (Thm 1.2)
are taken as additive:
``tau(T, D) = a_T*log10(T) + b_T + a_D*log10(D / D0)``, D0 the depth the token sweep trained.
Starting from the smallest measured budget T0 at D0, the plan takes, one at a time, the move
(double T, or add a layer) with the larger predicted gain in tau per added training hour
(``hours(T, D)``: the cost model), while that gain is at least ``min_gain`` and the hours stay
within the budget; it stops when neither move qualifies (``min_gain``, ``budget``) or at the
ladder's end (``cap``: 2**20 x T0 or :data:`MAX_LAYERS` layers). Each bootstrap replicate of the
laws runs the same rule, which gives the interval of the recommended T and D.

**Serving** (Scylla Sec. 3.2 and Table 5, "Opt. top_k"). The measured acceptance-versus-k curve
(:mod:`analysis.tau_k`) of the decode sweep's draft is rescaled to the planned draft by the
token law, ``tau_plan(k) = 1 + g*(tau_k(k) - 1)`` with ``g = (tau(T*, D*) - 1) / (tau(T_dec, D0)
- 1)`` (T_dec: the decode draft's budget; g = 1 when it is unknown), at most k. Per batch size b
the plan's k maximises the roofline throughput ``b*tau_plan(k) / step_s(b, k)`` over the
measured k range, or is 1 (no speculation) where even that best k is slower than the
autoregressive step; the speedup is over the
roofline's autoregressive step ``b / ar_s(b)``, and the mix's speedup is ``sum_b w_b *
speedup_b``. Every figure is computed for the fit and for each replicate (the token law's and
the tau(k) curve's, paired by index): the interval is the replicates' (alpha/2, 1 - alpha/2)
percentiles; the acceptance length at the plan also has the token law's t-based interval of
its value there (:mod:`analysis.budget_effect`, passed in as ``mean_ci``).

**Extrapolation labels**: tokens beyond the largest measured budget, layers beyond the deepest
measured draft, batch sizes outside the decode sweep's, another target or hardware; a k at the
top of the measured range is labelled ``capped``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from analysis._json import JsonRecord
from analysis.bootstrap import bootstrap_coefficients
from analysis.tau_k import TauKFit

__all__ = [
    "MAX_LAYERS",
    "Law",
    "ServingInputs",
    "TrainingPlan",
    "ServingPlan",
    "fit_law",
    "plan_training",
    "plan_serving",
    "tokens_labels",
]

MAX_LAYERS = 16
"""the deepest draft the training rule considers"""

TOKEN_DOUBLINGS = 20
"""the ladder of budgets: T0 * 2**j for j up to this"""


@dataclass(frozen=True)
class Law:
    """A log10 law ``y = a*log10(x) + b`` fitted to trials, with bootstrap replicates.

    ``coef`` has shape (1 + n_resamples, 2): row 0 the OLS fit (a, b), then the replicates
    (NaN rows: a replicate with one distinct x)."""

    name: str
    """``tokens`` or ``layers``"""
    x: tuple[float, ...]
    y: tuple[float, ...]
    coef: np.ndarray
    sweep: str
    """the sweep the trials came from"""

    @property
    def a(self) -> float:
        return float(self.coef[0, 0])

    @property
    def b(self) -> float:
        return float(self.coef[0, 1])

    @property
    def x_max(self) -> float:
        return max(self.x)

    def at(self, x: float) -> np.ndarray:
        """y at x for the fit and every replicate, shape (1 + n_resamples,)."""
        return self.coef[:, 0] * math.log10(x) + self.coef[:, 1]


def fit_law(
    name: str, x: Sequence[float], y: Sequence[float], *, sweep: str, n_resamples: int, seed: int
) -> Law:
    """OLS fit of ``y = a*log10(x) + b`` and its case-bootstrap replicates (x > 0;
    :func:`analysis.bootstrap.bootstrap_coefficients`, the resamples of the sweep's fit).

    Raises:
        ValueError: fewer than 3 distinct x, or an x <= 0 or a value not finite.
    """
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if (xs <= 0).any() or not (np.isfinite(xs).all() and np.isfinite(ys).all()):
        raise ValueError(f"{name} law: x must be > 0 and every value finite")
    if len(set(xs.tolist())) < 3:
        raise ValueError(f"{name} law: {len(set(xs.tolist()))} distinct x; a law needs >= 3")
    a, b = np.polyfit(np.log10(xs), ys, 1)
    slopes, intercepts = bootstrap_coefficients(
        xs.tolist(), ys.tolist(), log_base=10, n_resamples=n_resamples, seed=seed
    )
    coef = np.vstack([[a, b], np.column_stack([slopes, intercepts])])
    return Law(name, tuple(xs.tolist()), tuple(ys.tolist()), coef, sweep)


@dataclass
class TrainingPlan(JsonRecord):
    """The recommended pretraining tokens and draft depth, and why."""

    tokens: float
    layers: int
    hours: float
    """predicted training hours of that trial (the cost model)"""
    stop: str
    """``min_gain``, ``budget`` or ``cap``"""
    tokens_ci: tuple[float, float]
    layers_ci: tuple[float, float]
    acceptance_length: float
    """tau at (tokens, layers) at the token sweep's evaluation tree"""
    acceptance_ci: tuple[float, float]
    """the token law's t-based 95% interval of its value there (``mean_ci`` of
    :func:`plan_training`), plus the depth law's replicates' half-spread when layers move"""
    acceptance_boot_ci: tuple[float, float]
    """the replicates' percentile interval of the same"""
    path: list[dict[str, Any]] = field(default_factory=list)
    """each move taken: tokens, layers, hours, gain per hour"""
    labels: list[str] = field(default_factory=list)
    """extrapolation labels"""
    min_gain: float = math.nan
    budget_hours: float | None = None


@dataclass(frozen=True)
class ServingInputs:
    """What serving needs besides the laws: roofline step times per (b, k) and per b."""

    batch_mix: Mapping[int, float]
    """batch size -> share of decoding steps at it (sums to 1)"""
    ks: tuple[int, ...]
    """candidate k (verified tokens per sequence per cycle), the decode sweep's range"""
    step_s: Callable[[int, int, float], float]
    """(b, k, tau) -> roofline seconds of one speculative decoding cycle"""
    ar_step_s: Callable[[int], float]
    """b -> roofline seconds of one autoregressive step"""
    max_accept: float = math.inf
    """tokens a cycle can accept at most (tree depth + 1)"""


@dataclass
class ServingPlan(JsonRecord):
    """k per batch size with the predicted acceptance, throughput and speedup."""

    rows: list[dict[str, Any]]
    """per b: batch_size, share, k, k_ci, acceptance_length (+_ci), tokens_per_s (+_ci),
    speculate, ar_tokens_per_s, speedup (+_ci), speedup_by_k ({candidate k: the fit's predicted
    speedup over AR at that k}), labels"""
    mix_speedup: float
    mix_speedup_ci: tuple[float, float]
    rescale: float
    """g of the rescaled tau(k) curve (1: not rescaled)"""
    tau_k: dict[str, Any]
    """the tau(k) fits (:meth:`TauKFit.summary`)"""
    labels: list[str] = field(default_factory=list)


def tokens_labels(tokens: float, law: Law) -> list[str]:
    """The extrapolation label of a budget beyond the token law's largest measured one."""
    decades = math.log10(tokens / law.x_max)
    if decades <= 1e-9:
        return []
    return [
        f"extrapolated: {tokens:,.0f} pretraining tokens is {decades:.2f} decades beyond the "
        f"largest measured budget ({law.x_max:,.0f}, sweep {law.sweep})"
    ]


def _depth_labels(layers: float, depth: Law | None, d0: int) -> list[str]:
    if depth is None or layers <= depth.x_max:
        return []
    return [
        f"extrapolated: {layers:g} draft layers, beyond the deepest measured draft "
        f"({depth.x_max:g}, sweep {depth.sweep})"
    ]


def _k_interval(k_r: np.ndarray, b: int, alpha: float) -> tuple[tuple[float, float], list[str]]:
    """The interval of the planned k: the replicates' (``k_r[1:]``) discrete percentiles,
    widened to hold the fit's own k (``k_r[0]``) when they leave it out, with a label saying
    how many replicates chose another k (a plan on a knife edge between speculating or not)."""
    k0 = float(k_r[0])
    if k_r.size < 2:
        return (k0, k0), []
    lo, hi = _ci(k_r[1:], alpha, discrete=True)
    if lo <= k0 <= hi:
        return (lo, hi), []
    other = float(np.mean(k_r[1:] != k0))
    label = (
        f"k at b = {b}: the fit says {k0:g}, {other:.0%} of the bootstrap replicates chose "
        f"another k ({lo:g}..{hi:g}); the interval is widened to hold the fit's k"
    )
    return (min(lo, k0), max(hi, k0)), [label]


def _ci(values: np.ndarray, alpha: float, *, discrete: bool = False) -> tuple[float, float]:
    """The replicates' (alpha/2, 1 - alpha/2) percentiles; ``discrete``: values the replicates
    took (k, layers: no interpolation between two integers)."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return (math.nan, math.nan)
    q = [100 * alpha / 2, 100 * (1 - alpha / 2)]
    if discrete:
        return (
            float(np.percentile(v, q[0], method="lower")),
            float(np.percentile(v, q[1], method="higher")),
        )
    lo, hi = np.percentile(v, q)
    return (float(lo), float(hi))


def _greedy(
    a_t: float,
    a_d: float | None,
    t0: float,
    d0: int,
    hours: Callable[[float, int], float],
    budget: float | None,
    min_gain: float,
) -> tuple[float, int, str, list[dict[str, Any]]]:
    """The training rule for one (a_T, a_D): (tokens, layers, stop, moves)."""
    t, d = t0, d0
    path: list[dict[str, Any]] = []
    t_max = t0 * 2**TOKEN_DOUBLINGS
    while True:
        h = hours(t, d)
        moves = []
        if t * 2 <= t_max:
            moves.append((a_t * math.log10(2.0), t * 2, d))
        if a_d is not None and d + 1 <= MAX_LAYERS:
            moves.append((a_d * math.log10((d + 1) / d), t, d + 1))
        if not moves:
            return t, d, "cap", path
        scored = []
        for gain, nt, nd in moves:
            dh = hours(nt, nd) - h
            per_h = gain / dh if dh > 0 else (math.inf if gain > 0 else -math.inf)
            scored.append((per_h, nt, nd, hours(nt, nd)))
        scored.sort(key=lambda s: -s[0])
        per_h, nt, nd, nh = scored[0]
        if per_h < min_gain:
            return t, d, "min_gain", path
        if budget is not None and nh > budget:
            affordable = [s for s in scored if s[3] <= budget and s[0] >= min_gain]
            if not affordable:
                return t, d, "budget", path
            per_h, nt, nd, nh = affordable[0]
        path.append({"tokens": nt, "layers": nd, "hours": nh, "gain_per_hour": per_h})
        t, d = nt, nd


def plan_training(
    tokens: Law,
    depth: Law | None,
    *,
    d0: int,
    hours: Callable[[float, int], float],
    budget_hours: float | None,
    min_gain: float,
    mean_ci: Callable[[float], tuple[float, float]],
    alpha: float = 0.05,
) -> TrainingPlan:
    """The training rule of the module docstring, for the fit and every replicate.

    Args:
        tokens: the token law (its x the measured budgets, > 0).
        depth: the depth law, or None (the depth stays ``d0``).
        d0: the draft depth the token sweep trained.
        hours: (tokens, layers) -> predicted training hours of one such trial.
        budget_hours: the most hours the recommended trial may take (None: no budget).
        min_gain: the least acceptance-length gain per added training hour worth a move.
        mean_ci: tokens -> the token law's (1 - alpha) interval of its value at that budget.
        alpha: level of the intervals.

    Raises:
        ValueError: min_gain < 0, a budget <= 0, or the smallest budget already over it.
    """
    if min_gain < 0:
        raise ValueError(f"min_gain {min_gain} must be >= 0")
    if budget_hours is not None and budget_hours <= 0:
        raise ValueError(f"budget {budget_hours} h must be > 0")
    t0 = min(tokens.x)
    if budget_hours is not None and hours(t0, d0) > budget_hours:
        raise ValueError(
            f"the smallest measured budget ({t0:,.0f} tokens, {d0} draft layer(s)) already takes "
            f"{hours(t0, d0):.3g} h, more than the budget of {budget_hours:g} h"
        )
    cache: dict[tuple[float, int], float] = {}

    def cached(t: float, d: int) -> float:
        if (t, d) not in cache:
            cache[(t, d)] = hours(t, d)
        return cache[(t, d)]

    a_d = depth.coef[:, 0] if depth is not None else None
    runs = []
    for r in range(tokens.coef.shape[0]):
        a_t = float(tokens.coef[r, 0])
        ad = float(a_d[r]) if a_d is not None and r < a_d.size else None
        if not math.isfinite(a_t) or (ad is not None and not math.isfinite(ad)):
            continue
        runs.append((r, _greedy(a_t, ad, t0, d0, cached, budget_hours, min_gain)))
    if not runs or runs[0][0] != 0:
        raise ValueError("the token law's fit has no finite slope")
    _, (t, d, stop, path) = runs[0]
    ts = np.array([x[1][0] for x in runs[1:]], dtype=float)
    ds = np.array([x[1][1] for x in runs[1:]], dtype=float)
    tau = tokens.at(t)
    if depth is not None:
        tau = tau + depth.coef[:, 0] * math.log10(d / d0)
    lo, hi = mean_ci(t)
    if depth is not None and d != d0:  # plus the depth term, its replicates' half-spread added
        term = depth.coef[:, 0] * math.log10(d / d0)
        spread = _ci(term[1:], alpha)
        half = (spread[1] - spread[0]) / 2
        lo, hi = lo + float(term[0]) - half, hi + float(term[0]) + half
    labels = tokens_labels(t, tokens) + _depth_labels(d, depth, d0)
    return TrainingPlan(
        tokens=t,
        layers=d,
        hours=cached(t, d),
        stop=stop,
        tokens_ci=_ci(ts, alpha, discrete=True) if ts.size else (t, t),
        layers_ci=_ci(ds, alpha, discrete=True) if ds.size else (float(d), float(d)),
        acceptance_length=float(tau[0]),
        acceptance_ci=(float(lo), float(hi)),
        acceptance_boot_ci=_ci(tau[1:], alpha),
        path=path,
        labels=labels,
        min_gain=min_gain,
        budget_hours=budget_hours,
    )


def plan_serving(
    tau_k: TauKFit,
    rescale: np.ndarray,
    inputs: ServingInputs,
    *,
    measured_b: Sequence[int],
    labels: Sequence[str] = (),
    alpha: float = 0.05,
) -> ServingPlan:
    """k per batch size and the predicted figures (the module docstring's serving rule).

    Args:
        tau_k: the decode sweep's acceptance-versus-k fit with replicates.
        rescale: g for the fit and each replicate, shape (1 + n_resamples,) (or (1,): one g).
        inputs: the batch mix, candidate k and roofline step times.
        measured_b: the batch sizes the decode sweep measured (others are labelled).
        labels: labels every figure carries (target, hardware, tokens extrapolation).
        alpha: level of the intervals.
    """
    ks = np.asarray(inputs.ks, dtype=float)
    curve = tau_k.predict(ks)  # (R, K)
    g = np.asarray(rescale, dtype=float).reshape(-1, 1)
    n = min(curve.shape[0], g.shape[0]) if g.shape[0] > 1 else curve.shape[0]
    curve, g = curve[:n], (g[:n] if g.shape[0] > 1 else np.repeat(g, n, axis=0))
    tau = np.minimum(1.0 + g * (curve - 1.0), np.minimum(ks[None, :], inputs.max_accept))
    lo_b, hi_b = min(measured_b), max(measured_b)
    rows: list[dict[str, Any]] = []
    seen: list[str] = []
    mix = np.zeros(n)
    for b, share in sorted(inputs.batch_mix.items()):
        step = np.array([inputs.step_s(b, int(k), float(tau[0, j])) for j, k in enumerate(ks)])
        tps = b * tau / step[None, :]  # (R, K)
        best = np.nanargmax(np.where(np.isfinite(tps), tps, -np.inf), axis=1)
        rr = np.arange(n)
        ar = b / inputs.ar_step_s(b)
        off = tps[rr, best] < ar  # speculation slower than AR: k = 1, decoding without a draft
        k_r = np.where(off, 1.0, ks[best])
        tau_r = np.where(off, 1.0, tau[rr, best])
        tps_r = np.where(off, ar, tps[rr, best])
        speed = tps_r / ar
        mix += share * speed
        k_ci, k_labels = _k_interval(k_r, b, alpha)
        row_labels = list(labels) + k_labels
        if b < lo_b or b > hi_b:
            row_labels.append(
                f"extrapolated: batch size {b} is outside the decode sweep's measured "
                f"{lo_b}..{hi_b}"
            )
        if not off[0] and best[0] == ks.size - 1 and ks.size > 1:
            row_labels.append(
                f"capped: k = {int(ks[-1])} is the largest k the decode sweep measured; the "
                "throughput still rose there, so the best k may be larger (measure larger k)"
            )
        seen += row_labels
        rows.append(
            {
                "batch_size": b,
                "share": share,
                "k": int(k_r[0]),
                "k_ci": k_ci,
                "acceptance_length": float(tau_r[0]),
                "acceptance_ci": _ci(tau_r[1:], alpha),
                "tokens_per_s": float(tps_r[0]),
                "tokens_per_s_ci": _ci(tps_r[1:], alpha),
                "speculate": not bool(off[0]),
                "ar_tokens_per_s": float(ar),
                "speedup": float(speed[0]),
                "speedup_ci": _ci(speed[1:], alpha),
                "speedup_by_k": {int(k): float(tps[0, j] / ar) for j, k in enumerate(ks)},
                "labels": row_labels,
            }
        )
    all_labels = list(dict.fromkeys(seen))
    return ServingPlan(
        rows=rows,
        mix_speedup=float(mix[0]),
        mix_speedup_ci=_ci(mix[1:], alpha),
        rescale=float(g[0, 0]),
        tau_k=tau_k.summary(),
        labels=all_labels,
    )
