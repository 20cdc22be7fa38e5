"""A stage's measured seconds fitted linear in its work (seconds at utilisation 1): OLS
(statsmodels) with an intercept, else a ratio through the origin, else a mean; what
:mod:`orchestrator.cost.model` calibrates a stage's predicted seconds on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["StageFit", "fit_stage"]


@dataclass(frozen=True)
class StageFit:
    """Measured seconds of one stage, linear in its work (seconds at utilisation 1)."""

    stage: str
    a: float
    """seconds at zero work (0 for a ratio)"""
    b: float
    """seconds per second of work at utilisation 1 (1 / the effective utilisation)"""
    r2: float | None
    """R² of the OLS fit (None: a ratio or a mean, no variation to explain)"""
    n: int
    """trials used"""
    method: Literal["ols", "ratio", "mean"]
    x_max: float
    """the largest work fitted (a prediction beyond it extrapolates)"""
    at_zero: float | None = None
    """mean seconds of the trials that did none of this work (None: no such trial)"""

    def predict(self, x: float) -> float:
        """Seconds at work ``x`` (at least 0)."""
        if x <= 0 or self.method == "mean":
            return self.at_zero if x <= 0 and self.at_zero is not None else max(0.0, self.a)
        return max(0.0, self.a + self.b * x)

    def detail(self, x: float | None = None) -> str:
        """The fit in words (and whether ``x`` extrapolates beyond it)."""
        if self.method == "mean":
            text = f"mean of {self.n} trials"
        elif self.method == "ratio":
            text = f"ratio to the work, {self.n} trial{'s' if self.n != 1 else ''}"
        else:
            text = f"OLS on the work, n={self.n}, R² {self.r2:.3f}"
        if x is not None and self.x_max > 0 and x > 2 * self.x_max:
            text += f", extrapolated {x / self.x_max:.3g}x beyond the largest"
        return text


def fit_stage(stage: str, points: Sequence[tuple[float, float]]) -> StageFit | None:
    """The fit of one stage's (work, seconds) points: OLS with an intercept over the points
    with work when there are at least 3 of them with 2 distinct values and the slope is
    positive, else a ratio through the origin; None without a point with work. ``at_zero``:
    the mean seconds of the points without work."""
    import numpy as np
    import statsmodels.api as sm

    pts = [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y) and y >= 0]
    zero = [y for x, y in pts if x <= 0]
    work = [(x, y) for x, y in pts if x > 0]
    at_zero = float(np.mean(zero)) if zero else None
    if not work:
        return None
    xs = np.array([x for x, _ in work])
    ys = np.array([y for _, y in work])
    if len(work) >= 3 and len(set(xs.tolist())) >= 2:
        res = sm.OLS(ys, sm.add_constant(xs)).fit()
        a, b = float(res.params[0]), float(res.params[1])
        if b > 0:
            r2 = float(res.rsquared)
            return StageFit(stage, a, b, r2, len(work), "ols", float(xs.max()), at_zero)
    b = float(sm.OLS(ys, xs).fit().params[0])
    return StageFit(stage, 0.0, b, None, len(work), "ratio", float(xs.max()), at_zero)
