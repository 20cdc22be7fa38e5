"""The machinery of :mod:`analysis.design` (the rule is stated there): its data types, the
design's state, the picks and the cost estimate. Pure functions; no I/O."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
from scipy import stats

from analysis.laws import LogLinearFit, fit_log_linear

Stop = Literal["goal", "budget", "candidates"]

COST_EPS_S = 1e-9
"""a predicted cost below this (seconds) ranks as this: a free trial is worth the most"""
BUDGET_RTOL = 1e-9
"""relative slack of the budget test, for sums of float seconds"""


@dataclass(frozen=True)
class Point:
    """A completed trial."""

    value: float
    """axis value (> 0; the law is in its log), e.g. pretraining tokens"""
    seed: int
    """the trial's seed"""
    y: float
    """the response, e.g. acceptance length (tokens per cycle)"""
    cost_s: float
    """its measured compute, seconds (GPU trials: GPU-seconds)"""


@dataclass(frozen=True)
class Candidate:
    """A trial the design may run (or, in ``pending``, one in flight)."""

    value: float
    """axis value (> 0)"""
    seed: int
    """the trial's seed"""
    cost_s: float | None
    """predicted compute, seconds; None: unknown (estimated from the completed trials)"""


@dataclass(frozen=True)
class Pick:
    """A trial the rule chose, with why."""

    value: float
    """axis value"""
    seed: int
    """the trial's seed"""
    predicted_cost_s: float
    """its predicted compute, seconds (0 when nothing is known to predict it from)"""
    expected_half_width: float | None
    """the slope's 95% CI half-width expected once this pick and the batch's earlier picks are
    in (y units per factor ``log_base``); None when sigma is unknown or too few trials"""
    reason: str
    """why this value, as a sentence"""


@dataclass(frozen=True)
class Step:
    """The rule's answer: picks to run, or a stop."""

    picks: tuple[Pick, ...]
    """the trials to run now, in order (at most ``slots``)"""
    stop: Stop | None
    """why the design stops now; None: keep going"""
    half_width: float | None
    """the completed trials' slope 95% CI half-width (HC3); None: < 3 distinct values"""
    spent_s: float
    """measured compute of the completed trials, seconds"""
    message: str
    """what the step decided, as a sentence"""


# -- the design's state -------------------------------------------------------------------


@dataclass
class Noise:
    """sigma of y for expected half-widths, its basis, and the HC3/OLS ratio."""

    sigma: float | None
    basis: str
    ratio: float = 1.0

    @classmethod
    def of(
        cls,
        fit: LogLinearFit,
        measured: Sequence[Point],
        log_base: float,
        alpha: float,
        prior_sd: float | None,
        match_hc3: bool,
    ) -> Noise:
        if not (fit.ok and fit.df_resid >= 1):
            if prior_sd is None:
                return cls(None, "sigma unknown (no fit yet, no prior_sd)")
            return cls(float(prior_sd), f"sigma {prior_sd:.3g} (prior_sd: no fit yet)")
        scale, df = float(fit.scale), float(fit.df_resid)
        sigma = math.sqrt(max(scale, 0.0))
        basis = f"sigma {sigma:.3g}: residual sd of {len(measured)} completed trials ({df:g} df)"
        if not match_hc3:
            return cls(sigma, basis)
        xs = [log_x(p.value, log_base) for p in measured]
        t = float(stats.t.ppf(1 - alpha / 2, df))
        ols = t * math.sqrt(scale / sxx(xs)) if scale > 0 else 0.0
        hc3 = half_width(fit)
        if hc3 is None or ols <= 0:
            return cls(sigma, basis)
        ratio = hc3 / ols
        return cls(sigma, f"{basis}, times the HC3/OLS ratio {ratio:.3g}", ratio)


@dataclass
class DesignState:
    """The x of the completed, pending and picked trials, and the budget left (seconds)."""

    xs: list[float]
    values: set[float]
    left: float
    budget_s: float
    noise: Noise
    used: set[tuple[float, int]] = field(default_factory=set)

    def fits(self, cost: float) -> bool:
        return cost <= self.left + BUDGET_RTOL * max(1.0, abs(self.budget_s))

    def gain(self, x: float) -> float:
        """``1/Sxx - 1/Sxx'`` for one more trial at ``x`` (``Sxx'`` when ``Sxx`` is 0)."""
        s = sxx(self.xs)
        after = s + _added(self.xs, x)
        if s <= 0:
            return after
        return 1.0 / s - 1.0 / after if after > 0 else 0.0

    def expected(self, x: float, alpha: float) -> float | None:
        xs = [*self.xs, x]
        s, df = sxx(xs), len(xs) - 2
        if self.noise.sigma is None or df < 1 or s <= 0:
            return None
        t = float(stats.t.ppf(1 - alpha / 2, df))
        return t * self.noise.sigma * math.sqrt(1.0 / s) * self.noise.ratio

    def add(self, c: Candidate, x: float, cost: float) -> None:
        self.xs.append(x)
        self.values.add(c.value)
        self.left -= cost
        self.used.add((c.value, c.seed))


def initial_picks(
    design: DesignState,
    pool: list[Candidate],
    start: list[float],
    slots: int,
    model: CostModel,
    log_base: float,
    alpha: float,
) -> list[Pick]:
    """The initial design's values not completed or in flight: the lowest seed of each that
    fits the budget (an unaffordable one is left to the rule after it)."""
    picks: list[Pick] = []
    for v in start:
        if len(picks) >= slots or v in design.values:
            continue
        at = [c for c in pool if c.value == v and (c.value, c.seed) not in design.used]
        if not at:
            continue
        c = at[0]
        cost, basis = model.of(c)
        if not design.fits(cost):
            continue
        x = log_x(v, log_base)
        expected = design.expected(x, alpha)
        design.add(c, x, cost)
        where = "lowest" if v == start[0] else "highest" if v == start[-1] else "log-middle"
        reason = (
            f"initial design: {v:g} is the {where} of the {len(start)} values "
            f"{_values(start)} spread in log space; seed {c.seed}, {_cost(cost, basis)}; "
            f"expected half-width {fmt(expected)} ({design.noise.basis})"
        )
        picks.append(Pick(v, c.seed, cost, expected, reason))
    return picks


def best_pick(
    design: DesignState,
    pool: list[Candidate],
    floor: int,
    model: CostModel,
    log_base: float,
    alpha: float,
) -> Pick | None:
    """The candidate with the largest Var(a) reduction per predicted second that fits the
    budget (a new distinct value while the floor is not met); None when none does."""
    free = [c for c in pool if (c.value, c.seed) not in design.used]
    need_new = len(design.values) < floor and any(c.value not in design.values for c in free)
    scored = []
    for c in free:
        if need_new and c.value in design.values:
            continue
        cost, basis = model.of(c)
        if not design.fits(cost):
            continue
        x = log_x(c.value, log_base)
        gain = design.gain(x)
        scored.append((-gain / max(cost, COST_EPS_S), cost, c.value, c.seed, gain, basis, x))
    if not scored:
        return None
    scored.sort(key=lambda s: s[:4])
    _, cost, value, seed, gain, basis, x = scored[0]
    c = next(c for c in free if (c.value, c.seed) == (value, seed))
    s = sxx(design.xs)
    expected = design.expected(x, alpha)
    values = len({v for _, _, v, *_ in scored})
    among = f"{len(scored)} candidates ({values} values) that fit the budget"
    if need_new:
        among += f", at values new to the design ({len(design.values)} of the {floor} kept)"
    runner = ""
    other = next((o for o in scored if o[2] != value), None)
    if other is not None:
        share = other[0] / scored[0][0] if scored[0][0] else 1.0
        runner = f"; next best value {other[2]:g} at {share:.2f} of that"
    reason = (
        f"largest Var(a) reduction per second among {among}: 1/Sxx {_inv(s)} -> "
        f"{_inv(s + _added(design.xs, x))} per (log{log_base:g} unit)^2, {_cost(cost, basis)}; "
        f"expected half-width {fmt(expected)} ({design.noise.basis}){runner}"
    )
    design.add(c, x, cost)
    return Pick(value, seed, cost, expected, reason)


# -- costs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CostModel:
    """Predicted seconds for a candidate without ``cost_s``: ``intercept + slope*value``, at
    least ``ref_cost * min(1, value/ref_value)`` (ref: the cheapest measured trial)."""

    intercept: float
    slope: float
    ref_value: float
    ref_cost: float
    basis: str
    known: bool

    @classmethod
    def from_points(cls, points: Sequence[Point]) -> CostModel:
        data = [(p.value, p.cost_s) for p in points if math.isfinite(p.cost_s) and p.value > 0]
        if not data:
            basis = (
                "unknown (no trial measured yet: all candidates taken as equal cost, the "
                "budget not checked)"
            )
            return cls(0.0, 0.0, 1.0, 0.0, basis, False)
        v, c = np.asarray(data, dtype=float).T
        ref = int(np.argmin(c))
        if len(set(v.tolist())) >= 2:
            slope, intercept = (float(k) for k in np.polyfit(v, c, 1))
            if slope >= 0:
                basis = (
                    f"estimated: cost linear in value over {len(data)} measured trials, "
                    f"{intercept:,.1f} s + {slope:.4g} s per unit"
                )
                return cls(intercept, slope, float(v[ref]), float(c[ref]), basis, True)
        mean = float(c.mean())
        why = "at one value" if len(set(v.tolist())) < 2 else "(cost does not grow with value)"
        basis = f"estimated: equal costs, the mean of {len(data)} measured trial(s) {why}"
        return cls(mean, 0.0, 1.0, 0.0, basis, True)

    def of(self, c: Candidate) -> tuple[float, str]:
        """(predicted seconds, basis) of ``c``."""
        if c.cost_s is not None:
            return float(c.cost_s), "given"
        floor = self.ref_cost * min(1.0, c.value / self.ref_value)
        return max(floor, self.intercept + self.slope * c.value), self.basis


# -- small helpers ------------------------------------------------------------------------


def fit_points(points: Sequence[Point], log_base: float, alpha: float) -> LogLinearFit:
    frame = pd.DataFrame({"value": [p.value for p in points], "y": [p.y for p in points]})
    return fit_log_linear(frame, "value", "y", law="design", log_base=int(log_base), alpha=alpha)


def half_width(fit: LogLinearFit) -> float | None:
    if not fit.ok:
        return None
    lo, hi = fit.a_ci
    hw = (hi - lo) / 2
    return float(hw) if math.isfinite(hw) else None


def positive(values: Sequence[float], what: str) -> list[float]:
    out = [float(v) for v in values]
    bad = [v for v in out if not (math.isfinite(v) and v > 0)]
    if bad:
        raise ValueError(f"{what} {bad} are not positive numbers: the law is in their log")
    return out


def log_x(value: float, base: float) -> float:
    return math.log(value) / math.log(base)


def sxx(xs: Sequence[float]) -> float:
    return float(np.sum((np.asarray(xs) - np.mean(xs)) ** 2)) if len(xs) else 0.0


def _added(xs: Sequence[float], x: float) -> float:
    n = len(xs)
    return n / (n + 1) * (x - float(np.mean(xs))) ** 2 if n else 0.0


def _cost(cost: float, basis: str) -> str:
    """A pick's cost as its reason says it: a figure only where one was given or measured."""
    if basis.startswith("unknown"):
        return f"cost {basis}"
    return f"predicted {cost:,.0f} s ({basis})"


def _inv(s: float) -> str:
    return f"{1.0 / s:.4g}" if s > 0 else "inf"


def fmt(v: float | None) -> str:
    return "unknown" if v is None else f"{v:.4g}"


def _values(vs: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:g}" for v in vs) + "]"
