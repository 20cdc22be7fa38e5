"""Bootstrap confidence intervals of a log-linear law by resampling trials.

A case (pairs) bootstrap: each resample draws n trials with replacement from the n fitted
trials (x and y together) and refits ``y = a*log_base(x) + b`` by least squares; the interval
is the (alpha/2, 1 - alpha/2) percentile of the refitted coefficients (Efron & Tibshirani 1993,
ch. 9 and 13). Resamples whose x values are all equal have no slope; they are dropped and
counted. Seeded: the same inputs and seed give the same interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analysis._json import JsonRecord

N_RESAMPLES = 2000
"""default number of resamples (the issue asks for at least 1000)"""


@dataclass(frozen=True)
class BootstrapCI(JsonRecord):
    """Percentile bootstrap intervals of the slope a and intercept b (y units)."""

    a_ci: tuple[float, float]
    b_ci: tuple[float, float]
    n_resamples: int
    """resamples drawn"""
    n_valid: int
    """resamples with at least two distinct x (the others have no slope and are dropped)"""
    seed: int
    alpha: float


def bootstrap_log_linear(
    x: Sequence[float],
    y: Sequence[float],
    *,
    log_base: int = 10,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    alpha: float = 0.05,
) -> BootstrapCI:
    """Case-bootstrap the fit of ``y = a*log_base(x) + b`` over the trials (x_i, y_i).

    Args:
        x: regressor values, all > 0 and finite (the caller drops the rest), shape (n,).
        y: responses, finite, shape (n,).
        log_base: 10 or 2, as in the law.
        n_resamples: resamples to draw (>= 1).
        seed: seed of ``numpy.random.default_rng``.
        alpha: the intervals are (1 - alpha) percentile intervals.

    Returns:
        The intervals; NaN when fewer than 3 trials or no valid resample.

    Raises:
        ValueError: x and y differ in length, or n_resamples < 1.
    """
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} values but y has {len(y)}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples={n_resamples}; use at least 1 (1000 or more for a CI)")
    nan2 = (math.nan, math.nan)
    slope, intercept = bootstrap_coefficients(
        x, y, log_base=log_base, n_resamples=n_resamples, seed=seed
    )
    valid = np.isfinite(slope)
    if not valid.any():
        return BootstrapCI(nan2, nan2, n_resamples, 0, seed, alpha)
    q = [100 * alpha / 2, 100 * (1 - alpha / 2)]
    a_lo, a_hi = np.percentile(slope[valid], q)
    b_lo, b_hi = np.percentile(intercept[valid], q)
    return BootstrapCI(
        (float(a_lo), float(a_hi)),
        (float(b_lo), float(b_hi)),
        n_resamples,
        int(valid.sum()),
        seed,
        alpha,
    )


def bootstrap_coefficients(
    x: Sequence[float],
    y: Sequence[float],
    *,
    log_base: int = 10,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """The refitted (slope, intercept) of every resample of :func:`bootstrap_log_linear`, each
    shape (n_resamples,); NaN for a resample whose x are all equal (no slope), and all NaN
    with fewer than 3 trials.

    Raises:
        ValueError: x and y differ in length.
    """
    xs = np.asarray(x, dtype=float)
    ys = np.asarray(y, dtype=float)
    if xs.shape != ys.shape:
        raise ValueError(f"x has {xs.size} values but y has {ys.size}")
    slope = np.full(max(0, n_resamples), np.nan)
    intercept = slope.copy()
    if xs.size < 3 or n_resamples < 1:
        return slope, intercept
    lx = np.log(xs) / math.log(log_base)
    idx = np.random.default_rng(seed).integers(0, xs.size, size=(n_resamples, xs.size))
    bx, by = lx[idx], ys[idx]
    dx = bx - bx.mean(axis=1, keepdims=True)
    sxx = (dx**2).sum(axis=1)
    valid = sxx > 1e-12 * max(1.0, float(np.abs(lx).max()) ** 2)
    a = (dx[valid] * (by[valid] - by[valid].mean(axis=1, keepdims=True))).sum(axis=1)
    a = a / sxx[valid]
    slope[valid] = a
    intercept[valid] = by[valid].mean(axis=1) - a * bx[valid].mean(axis=1)
    return slope, intercept
