"""The saturating alternative to the log-linear law, compared by AIC.

The alternative to Thm 1.1 of Scylla (arXiv 2505.07858) is the power law with a ceiling
``y = c - A*x**(-alpha)`` (c: the asymptote, A > 0, alpha > 0), fitted by nonlinear
least squares (``scipy.optimize.curve_fit``). Both forms are scored by the Gaussian AIC
``n*ln(RSS/n) + 2*(p + 1)`` (p coefficients plus the noise variance; Burnham & Anderson 2002,
eq. 2.13); the lower AIC is preferred, and |delta| < 2 is no real preference.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from analysis._json import JsonRecord
from analysis.laws import constant_response, no_variation_status

MIN_POINTS = 4
"""fewest trials for a 3-coefficient fit with a residual"""


@dataclass(frozen=True)
class SaturatingFit(JsonRecord):
    """``y = c - A*(x/x0)**(-alpha)``; ``x0`` (the smallest x) keeps the fit well scaled, so the
    raw-unit coefficient is ``A*x0**alpha``."""

    c: float
    """asymptote (y units)"""
    A: float
    """gap below the asymptote at x = x0 (y units)"""
    alpha: float
    """decay exponent (> 0)"""
    x0: float
    """x scale (x units): the smallest fitted x"""
    rss: float
    """residual sum of squares"""
    aic: float
    n: int
    status: str
    """ "ok" or why there is no fit"""

    @property
    def ok(self) -> bool:
        """True when the fit converged."""
        return self.status == "ok"

    def predict(self, x: Sequence[float] | np.ndarray) -> np.ndarray:
        """The fitted curve at ``x`` (x units)."""
        return saturating(np.asarray(x, dtype=float) / self.x0, self.c, self.A, self.alpha)


@dataclass(frozen=True)
class FormComparison(JsonRecord):
    """AIC of the log-linear law and of the saturating form on the same trials."""

    aic_log_linear: float
    aic_saturating: float
    delta: float
    """aic_saturating - aic_log_linear (negative favours saturating)"""
    preferred: str
    """ "log-linear", "saturating", "no clear preference" (|delta| < 2) or "n/a" """


def saturating(u: np.ndarray, c: float, a: float, alpha: float) -> np.ndarray:
    """``c - a*u**(-alpha)`` for u > 0 (u = x/x0)."""
    return c - a * np.power(u, -alpha)


def gaussian_aic(rss: float, n: int, n_coef: int) -> float:
    """``n*ln(RSS/n) + 2*(n_coef + 1)``; -inf for a perfect fit, NaN when n = 0."""
    if n == 0:
        return math.nan
    if rss <= 0:
        return -math.inf
    return n * math.log(rss / n) + 2 * (n_coef + 1)


def fit_saturating(x: Sequence[float], y: Sequence[float], *, y_name: str = "y") -> SaturatingFit:
    """Fit ``y = c - A*(x/x0)**(-alpha)`` with A >= 0 and 0 < alpha <= 5.

    Args:
        x: regressor, all > 0 and finite, shape (n,).
        y: response, finite, shape (n,).
        y_name: the response's name, for the status.

    Returns:
        The fit; ``status`` says why there is none (fewer than 4 trials or 3 distinct x, a
        constant y, or no convergence), with NaN numbers. Never raises for data.
    """
    xs = np.asarray(x, dtype=float)
    ys = np.asarray(y, dtype=float)
    nan = math.nan
    x0 = float(xs.min()) if xs.size else nan
    if xs.size < MIN_POINTS or len(np.unique(xs)) < 3:
        status = f"not enough points: need >= {MIN_POINTS} trials at >= 3 distinct x"
        return SaturatingFit(nan, nan, nan, x0, nan, nan, int(xs.size), status)
    if constant_response(ys):  # a flat line has no ceiling to find (curve_fit returns noise)
        status = no_variation_status(y_name, ys)
        return SaturatingFit(nan, nan, nan, x0, nan, nan, int(xs.size), status)
    u = xs / x0
    spread = float(np.ptp(ys)) or 1.0
    start = (float(ys.max()) + 0.1 * spread, spread, 0.5)
    bounds = ([-np.inf, 0.0, 1e-6], [np.inf, np.inf, 5.0])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optimize.OptimizeWarning)
            coef, _ = optimize.curve_fit(saturating, u, ys, p0=start, bounds=bounds, maxfev=20000)
    except (RuntimeError, ValueError) as exc:
        return SaturatingFit(nan, nan, nan, x0, nan, nan, int(xs.size), f"no convergence: {exc}")
    c, a, alpha = (float(v) for v in coef)
    rss = float(np.sum((ys - saturating(u, c, a, alpha)) ** 2))
    return SaturatingFit(c, a, alpha, x0, rss, gaussian_aic(rss, xs.size, 3), int(xs.size), "ok")


def compare_forms(log_linear_rss: float, n: int, sat: SaturatingFit) -> FormComparison:
    """AIC of the log-linear law (2 coefficients, residual sum of squares ``log_linear_rss``
    over ``n`` trials) beside the saturating fit's; "n/a" when either is missing."""
    aic_log = gaussian_aic(log_linear_rss, n, 2) if math.isfinite(log_linear_rss) else math.nan
    aic_sat = sat.aic if sat.ok else math.nan
    delta = aic_sat - aic_log
    if not math.isfinite(delta):
        preferred = "n/a"
    elif abs(delta) < 2:
        preferred = "no clear preference"
    else:
        preferred = "saturating" if delta < 0 else "log-linear"
    return FormComparison(aic_log, aic_sat, delta, preferred)
