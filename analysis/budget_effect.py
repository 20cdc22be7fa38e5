"""A law's deviation shared by the trials of one budget (lack of fit), and the intervals of a
prediction at a new budget that carry it.

The classical lack-of-fit decomposition (Draper & Smith, *Applied Regression Analysis*, 3rd ed.,
Sec. 2.1): with m distinct x, n_i trials at x_i and the line fitted to all trials,

- pure error ``SS_PE = sum_ij (y_ij - mean_i)**2`` on ``n - m`` degrees of freedom;
- lack of fit ``SS_LOF = sum_i n_i (mean_i - fitted_i)**2`` on ``m - 2``;
- the variance of a budget's deviation, the ANOVA (method-of-moments) estimator of a random
  budget effect, ``sigma2_between = max(0, (MS_LOF - MS_PE) / n0)`` with n0 the mean n_i.

When ``sigma2_between > 0`` the line's covariance is that of the budget means' regression (WLS
with weights n_i, scale MS_LOF: the means vary by the budget effect and the seeds' noise), and a
new trial at a new budget has variance ``var_line(x) + sigma2_between + MS_PE``, t-based on
``m - 2`` degrees of freedom; the interval of the law's value there drops MS_PE. Otherwise the
trial-level OLS intervals stand. Why: docs/plan.md.

Pure functions over arrays: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["BudgetEffect", "budget_effect"]


@dataclass(frozen=True)
class BudgetEffect:
    """A log-linear law fitted to trials, with its lack-of-fit decomposition."""

    a: float
    """slope per decade of x (y units)"""
    b: float
    """intercept (y at x = 1)"""
    m: int
    """distinct x"""
    n: int
    """trials"""
    ms_pe: float
    """pure-error mean square: the seeds' variance at one budget (NaN with one trial per x)"""
    ms_lof: float
    """lack-of-fit mean square (NaN with m = 2)"""
    sigma2_between: float
    """variance of a budget's shared deviation from the law (0: none seen)"""
    line_cov: tuple[tuple[float, float], tuple[float, float]]
    """covariance of (a, b) the intervals use"""
    df: float
    """degrees of freedom of the t quantile"""
    scale: float
    """residual variance of one trial around the law, as the intervals use it"""
    log_base: int = 10

    @property
    def shared(self) -> bool:
        """Whether the budgets' shared deviation widens the intervals."""
        return self.sigma2_between > 0

    def predict(self, x: Sequence[float], alpha: float = 0.05) -> dict[str, np.ndarray]:
        """At each x (> 0): ``mean``; ``value_lo/hi``, the (1 - alpha) interval of the law's
        value at a new budget (the budget's deviation included, the seeds' noise not);
        ``obs_lo/hi``, the interval of one new trial there. Arrays of shape (len(x),)."""
        lx = np.log(np.asarray(x, dtype=float)) / math.log(self.log_base)
        cov = np.asarray(self.line_cov)
        var = cov[0, 0] * lx**2 + 2 * cov[0, 1] * lx + cov[1, 1]
        t = float(stats.t.ppf(1 - alpha / 2, self.df)) if self.df > 0 else math.nan
        mean = self.a * lx + self.b
        value = t * np.sqrt(np.maximum(var, 0.0) + self.sigma2_between)
        obs = t * np.sqrt(np.maximum(var, 0.0) + self.scale)
        return {
            "mean": mean,
            "value_lo": mean - value,
            "value_hi": mean + value,
            "obs_lo": mean - obs,
            "obs_hi": mean + obs,
        }


def budget_effect(x: Sequence[float], y: Sequence[float], *, log_base: int = 10) -> BudgetEffect:
    """Fit ``y = a*log_base(x) + b`` to trials (x_j, y_j) by OLS and split its residuals into
    the seeds' noise and the budgets' shared deviation (see the module docstring).

    Args:
        x: each trial's budget (> 0, e.g. pretraining tokens), shape (n,).
        y: each trial's response (e.g. acceptance length, tokens per cycle), shape (n,).
        log_base: 10 (Scylla Thm 1.1) or 2.

    Raises:
        ValueError: lengths differ, a value is not finite or x <= 0, or fewer than 3 distinct x.
    """
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.shape != ys.shape:
        raise ValueError(f"{xs.size} budgets but {ys.size} responses")
    if not (np.isfinite(xs).all() and np.isfinite(ys).all()) or (xs <= 0).any():
        raise ValueError("budgets must be finite and > 0, responses finite")
    levels, inverse, counts = np.unique(xs, return_inverse=True, return_counts=True)
    m, n = levels.size, xs.size
    if m < 3:
        raise ValueError(f"{m} distinct budgets: a law with a lack-of-fit term needs >= 3")
    lx = np.log(xs) / math.log(log_base)
    design = np.column_stack([lx, np.ones(n)])
    (a, b), *_ = np.linalg.lstsq(design, ys, rcond=None)
    means = np.bincount(inverse, weights=ys) / counts
    fitted = a * np.log(levels) / math.log(log_base) + b
    ss_pe = float(((ys - means[inverse]) ** 2).sum())
    ss_lof = float((counts * (means - fitted) ** 2).sum())
    ms_pe = ss_pe / (n - m) if n > m else math.nan
    ms_lof = ss_lof / (m - 2)
    n0 = n / m
    between = max(0.0, (ms_lof - ms_pe) / n0) if math.isfinite(ms_pe) else 0.0
    if between > 0:
        lm = np.log(levels) / math.log(log_base)
        xtwx = np.array([[(counts * lm**2).sum(), (counts * lm).sum()], [(counts * lm).sum(), n]])
        cov = ms_lof * np.linalg.inv(xtwx)
        df, scale = float(m - 2), between + ms_pe
    else:
        resid = ys - design @ np.array([a, b])
        scale = float(resid @ resid) / (n - 2)
        cov = scale * np.linalg.inv(design.T @ design)
        df = float(n - 2)
    return BudgetEffect(
        a=float(a),
        b=float(b),
        m=int(m),
        n=int(n),
        ms_pe=ms_pe,
        ms_lof=ms_lof,
        sigma2_between=float(between),
        line_cov=((float(cov[0, 0]), float(cov[0, 1])), (float(cov[1, 0]), float(cov[1, 1]))),
        df=df,
        scale=float(scale),
        log_base=log_base,
    )
