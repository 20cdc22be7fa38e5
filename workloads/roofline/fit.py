"""Fits of the roofline's batch-size laws (Scylla arXiv 2505.07858, Thm 1.3 and Eq. 4).

- Eq. 4 form: k_opt(b) = A*sqrt(1 + B/b) - C, by nonlinear least squares (scipy ``curve_fit``);
- Thm 1.3: peak throughput = a*log2(b) + b0, by OLS through :func:`analysis.laws.fit_log_linear`.

scipy, statsmodels and pandas are imported inside the functions, so importing the roofline
package stays cheap.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from analysis.laws import LogLinearFit


@dataclass(frozen=True)
class Eq4Fit:
    """k = A*sqrt(1 + B/b) - C fitted to (b, k) points (Scylla Eq. 4 has A=27904, B=0.034,
    C=27897)."""

    A: float
    """scale, tokens"""
    B: float
    """batch-size scale (sequences)"""
    C: float
    """offset, tokens"""
    r2: float
    """coefficient of determination of the fit"""
    n: int
    """points fitted"""

    def predict(self, b: float) -> float:
        """Fitted k at batch size ``b`` (> 0)."""
        return self.A * math.sqrt(1.0 + self.B / b) - self.C


def fit_eq4_form(bs: Sequence[float], ks: Sequence[float]) -> Eq4Fit:
    """Least-squares fit of k = A*sqrt(1 + B/b) - C to batch sizes ``bs`` and k values ``ks``.

    Scylla Eq. 4. The form is badly conditioned (the paper's own A and C differ by 7 in 27904),
    so B is first scanned on a log grid (1e-4 .. 1e6 sequences) with A and C solved linearly for
    each B, and the best point refines a ``curve_fit`` over (A, log B, C). Needs >= 3 distinct
    positive b with finite k; raises ``ValueError`` otherwise or when the lengths differ.
    """
    import numpy as np
    from scipy.optimize import OptimizeWarning, curve_fit

    if len(bs) != len(ks):
        raise ValueError(f"bs has {len(bs)} values but ks has {len(ks)}")
    x = np.asarray(bs, dtype=float)
    y = np.asarray(ks, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y) & (x > 0)
    x, y = x[keep], y[keep]
    if len(np.unique(x)) < 3:
        raise ValueError(
            f"the Eq. 4 form has 3 parameters: need >= 3 distinct batch sizes, got "
            f"{len(np.unique(x))}. Fix: e.g. --batch-sizes 1-64"
        )

    def linear(log_b: float) -> tuple[float, float, float]:
        z = np.sqrt(1.0 + math.exp(log_b) / x)
        design = np.column_stack([z, -np.ones_like(z)])
        (a, c), *_ = np.linalg.lstsq(design, y, rcond=None)
        return float(a), float(c), float(np.sum((design @ np.array([a, c]) - y) ** 2))

    grid = np.linspace(math.log(1e-4), math.log(1e6), 201)
    a0, c0, sse0 = linear(float(grid[0]))
    log_b0 = float(grid[0])
    for g in grid[1:]:
        a, c, sse = linear(float(g))
        if sse < sse0:
            a0, c0, sse0, log_b0 = a, c, sse, float(g)

    def model(b: np.ndarray, a: float, log_b: float, c: float) -> np.ndarray:
        return a * np.sqrt(1.0 + np.exp(log_b) / b) - c

    params = (a0, log_b0, c0)
    try:
        with warnings.catch_warnings():  # the covariance is not used (3 points fit exactly)
            warnings.simplefilter("ignore", OptimizeWarning)
            popt, _ = curve_fit(model, x, y, p0=params, maxfev=20000)
        if np.all(np.isfinite(popt)) and _sse(model(x, *popt), y) <= sse0:
            params = tuple(float(p) for p in popt)  # type: ignore[assignment]
    except (RuntimeError, ValueError, OverflowError):  # keep the grid optimum
        pass
    a, log_b, c = params
    fitted = model(x, a, log_b, c)
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - _sse(fitted, y) / ss_tot if ss_tot > 0 else math.nan
    return Eq4Fit(A=float(a), B=math.exp(log_b), C=float(c), r2=r2, n=len(x))


def fit_thm13(bs: Sequence[float], throughputs: Sequence[float]) -> LogLinearFit:
    """OLS fit of peak throughput = a*log2(b) + b0 (Scylla Thm 1.3; paper: a ~ 286.79, b0 ~ 7.54).

    ``bs`` are batch sizes, ``throughputs`` tokens/s. Returns
    :class:`analysis.laws.LogLinearFit` (law "batch"): ``a`` and ``b`` (= b0) with 95% CIs
    ``a_ci``/``b_ci`` and ``r2``; with fewer than 3 distinct b its ``status`` says so and the
    coefficients are NaN. Raises ``ValueError`` when the lengths differ.
    """
    import pandas as pd

    from analysis.laws import fit_log_linear

    if len(bs) != len(throughputs):
        raise ValueError(f"bs has {len(bs)} values but throughputs has {len(throughputs)}")
    df = pd.DataFrame({"batch_size": list(bs), "tokens_per_s": list(throughputs)})
    return fit_log_linear(df, "batch_size", "tokens_per_s", law="batch", log_base=2)


def _sse(fitted: object, y: object) -> float:
    import numpy as np

    return float(np.sum((np.asarray(fitted) - np.asarray(y)) ** 2))
