"""Scylla Eq. 4: the optimal number of verified tree tokens ``k_opt(b) = A*sqrt(1 + B/b) - C``
in the decoding batch size b, fitted to the measured best k per batch size (or the roofline's
k_opt), beside a log-linear alternative ``k = a*log2(b) + b0``.

Source: Scylla (arXiv 2505.07858) Sec. 3.2, Eq. 4; the paper's constants are in
``analysis/reference/scylla_2505_07858.yaml``. The best k per batch size comes from
:func:`analysis.throughput.best_per_batch`.

Pure functions over pandas tables: no I/O, no torch, Ray, SQL or MLflow.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, stats

from analysis.fit import Fit, points, r_squared
from analysis.laws import LogLinearFit, fit_log_linear
from analysis.paper import reference

MIN_DISTINCT_B_EQ4 = 4
"""Eq. 4 has three parameters (A, B, C): it needs >= 4 distinct batch sizes (1 residual dof)"""

PAPER_K_OPT: dict[str, Any] = {
    "source": "Scylla (arXiv 2505.07858) Eq. 4",
    "form": "k_opt = A*sqrt(1 + B/b) - C",
    "A": float(reference()["eq4"]["A"]),
    "B": float(reference()["eq4"]["B"]),
    "C": float(reference()["eq4"]["C"]),
    "conditions": "Qwen2.5-72B, 10K-token prefill, one H800 (roofline-derived)",
}
"""The paper's Eq. 4 constants (from ``analysis/reference/scylla_2505_07858.yaml``; 72B target,
H800)."""


@dataclass(frozen=True, kw_only=True)
class Eq4Fit(Fit):
    """A nonlinear least-squares fit of ``k = A*sqrt(1 + B/b) - C`` (Scylla Eq. 4), a
    :class:`Fit` whose points are the batch sizes (sequences, one point each) and the measured
    best k there (verified tokens).

    Made by :func:`fit_eq4`. When ``status != "ok"`` the parameters, intervals and ``r2`` are
    NaN.
    """

    A: float
    """amplitude (verified tokens)"""
    B: float
    """batch-size scale (sequences)"""
    C: float
    """offset (verified tokens)"""
    A_ci: tuple[float, float]
    """(lo, hi) confidence interval of A at level 1 - alpha (t, n - 3 dof)"""
    B_ci: tuple[float, float]
    """(lo, hi) confidence interval of B"""
    C_ci: tuple[float, float]
    """(lo, hi) confidence interval of C"""
    form: str = "best_num_draft_tokens = A*sqrt(1 + B/batch_size) - C"
    """the law as text"""

    def predict(self, batch_sizes: Iterable[float]) -> np.ndarray:
        """Fitted k at ``batch_sizes`` (verified tokens); NaN for b <= 0 or a fit that is not ok."""
        bs = np.asarray(list(batch_sizes), dtype=float)
        if not self.ok:
            return np.full_like(bs, np.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(bs > 0, _eq4(bs, self.A, self.B, self.C), np.nan)


@dataclass(frozen=True)
class KOptFit:
    """Fits of the measured best k vs batch size: Eq. 4 and a simpler log-linear law."""

    eq4: Eq4Fit
    """``k = A*sqrt(1 + B/b) - C`` (Scylla Eq. 4)"""
    log2: LogLinearFit
    """``k = a*log2(b) + b0`` by OLS (needs 3 distinct batch sizes)"""
    paper: Mapping[str, Any] = field(default_factory=lambda: dict(PAPER_K_OPT))
    """the paper's Eq. 4 constants (:data:`PAPER_K_OPT`)"""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe data of both fits and the paper constants."""
        return {"eq4": self.eq4.to_dict(), "log2": self.log2.to_dict(), "paper": dict(self.paper)}


def fit_k_opt(best: pd.DataFrame, *, alpha: float = 0.05) -> KOptFit:
    """Fit the measured best k vs batch size: Scylla Eq. 4 and a log-linear alternative.

    ``best`` is :func:`best_per_batch`'s table (``best_num_draft_tokens`` in verified tokens, b
    in sequences). Eq. 4 by :func:`fit_eq4`; ``k = a*log2(b) + b0`` by
    :func:`analysis.laws.fit_log_linear` (law "k_opt"). Raises ``ValueError`` when ``best``
    lacks ``batch_size`` or ``best_num_draft_tokens``.
    """
    missing = [c for c in ("batch_size", "best_num_draft_tokens") if c not in best.columns]
    if missing:
        raise ValueError(
            f"columns {missing} are not in the table; it has {list(best.columns)}. "
            "Pass the output of best_per_batch."
        )
    log2 = fit_log_linear(
        best, "batch_size", "best_num_draft_tokens", law="k_opt", log_base=2, alpha=alpha
    )
    return KOptFit(eq4=_fit_eq4(best, alpha), log2=log2)


def fit_eq4(batch_sizes: Iterable[float], ks: Iterable[float], *, alpha: float = 0.05) -> Eq4Fit:
    """Nonlinear least squares of Scylla Eq. 4, ``k = A*sqrt(1 + B/b) - C``, on (b, k) points.

    ``batch_sizes`` in sequences, ``ks`` in verified tokens (measured best k, or the roofline's
    k_opt); points with a non-finite value or b <= 0 are dropped. The start point is the best
    B on a log grid (:func:`_eq4_start`); :func:`scipy.optimize.curve_fit` then fits (A, log B,
    C). Intervals: t with n - 3 dof on the curve_fit covariance (B's by the delta method).

    Statuses instead of exceptions: "too few points" with fewer than
    :data:`MIN_DISTINCT_B_EQ4` distinct b, "did not converge" when the optimiser fails, "not
    identifiable" when the parameter covariance is not finite (e.g. the same k at every b).
    Raises ``ValueError`` when the two sequences differ in length.
    """
    xs = np.asarray(list(batch_sizes), dtype=float)
    ys = np.asarray(list(ks), dtype=float)
    if len(xs) != len(ys):
        raise ValueError(f"batch_sizes has {len(xs)} values but ks has {len(ys)}")
    keep = np.isfinite(xs) & np.isfinite(ys) & (xs > 0)
    xs, ys = xs[keep], ys[keep]
    distinct = len(np.unique(xs))
    if distinct < MIN_DISTINCT_B_EQ4:
        return _no_eq4(
            f"too few points: Eq. 4 has 3 parameters and needs >= {MIN_DISTINCT_B_EQ4} "
            f"distinct batch sizes, got {distinct}",
            xs,
            ys,
            alpha,
        )
    try:
        with warnings.catch_warnings(), np.errstate(over="ignore", invalid="ignore"):
            warnings.simplefilter("ignore", optimize.OptimizeWarning)
            params, pcov = optimize.curve_fit(
                _eq4_log_b, xs, ys, p0=_eq4_start(xs, ys), maxfev=20000
            )
    except (RuntimeError, ValueError) as exc:
        return _no_eq4(f"did not converge: {exc}", xs, ys, alpha)
    pcov = np.asarray(pcov, dtype=float)
    with np.errstate(over="ignore"):
        a, bb, c = float(params[0]), float(np.exp(params[1])), float(params[2])
    if not all(math.isfinite(v) for v in (a, bb, c)):
        return _no_eq4("did not converge: non-finite parameters", xs, ys, alpha)
    if not np.all(np.isfinite(pcov)) or not _eq4_identifiable(xs, a, bb):
        return _no_eq4(
            "not identifiable: the data do not pin down A, B and C (the Jacobian at the "
            "optimum is rank-deficient, e.g. the same k at every b); see the log2 fit",
            xs,
            ys,
            alpha,
        )
    resid = ys - _eq4(xs, a, bb, c)
    dof = len(xs) - 3
    se = np.sqrt(np.maximum(np.diag(pcov), 0.0)) * np.array([1.0, bb, 1.0])  # d B = B d log B
    half = stats.t.ppf(1 - alpha / 2, dof) * se
    return Eq4Fit(
        status="ok",
        A=a,
        B=bb,
        C=c,
        A_ci=(a - float(half[0]), a + float(half[0])),
        B_ci=(bb - float(half[1]), bb + float(half[1])),
        C_ci=(c - float(half[2]), c + float(half[2])),
        r2=r_squared(ys, resid),
        **points(xs, ys, resid),
        alpha=alpha,
    )


def _eq4(b: np.ndarray, a: float, bb: float, c: float) -> np.ndarray:
    return a * np.sqrt(1.0 + bb / b) - c


def _eq4_log_b(b: np.ndarray, a: float, log_b: float, c: float) -> np.ndarray:
    """Eq. 4 over (A, log B, C): the parametrisation curve_fit works in."""
    return a * np.sqrt(1.0 + np.exp(log_b) / b) - c


def _fit_eq4(best: pd.DataFrame, alpha: float) -> Eq4Fit:
    xs = pd.to_numeric(best["batch_size"], errors="coerce").to_numpy(dtype=float)
    ys = pd.to_numeric(best["best_num_draft_tokens"], errors="coerce").to_numpy(dtype=float)
    return fit_eq4(xs, ys, alpha=alpha)


def _eq4_start(xs: np.ndarray, ys: np.ndarray) -> tuple[float, float, float]:
    """Start point (A, log B, C) for curve_fit: the B on a log grid (1e-4 .. 1e6 sequences, 201
    points) whose linear least-squares solve for (A, C) fits best (the first on ties)."""
    best: tuple[float, tuple[float, float, float]] = (math.inf, (1.0, 0.0, 0.0))
    for log_b in np.linspace(math.log(1e-4), math.log(1e6), 201):
        design = np.column_stack([np.sqrt(1.0 + math.exp(log_b) / xs), -np.ones_like(xs)])
        coef, *_ = np.linalg.lstsq(design, ys, rcond=None)
        sse = float(np.sum((design @ coef - ys) ** 2))
        if sse < best[0]:
            best = (sse, (float(coef[0]), float(log_b), float(coef[1])))
    return best[1]


def _eq4_identifiable(xs: np.ndarray, a: float, bb: float) -> bool:
    """True when the Jacobian of Eq. 4 in (A, B, C), columns scaled to unit norm, has a
    smallest/largest singular value ratio over 1e-9."""
    root = np.sqrt(1.0 + bb / xs)
    jac = np.column_stack([root, a / (2.0 * xs * root), -np.ones_like(xs)])
    norms = np.linalg.norm(jac, axis=0)
    if not np.all(np.isfinite(norms)) or np.any(norms == 0.0):
        return False
    sv = np.linalg.svd(jac / norms, compute_uv=False)
    return bool(sv[-1] / sv[0] > 1e-9)


def _no_eq4(status: str, xs: np.ndarray, ys: np.ndarray, alpha: float) -> Eq4Fit:
    nan = math.nan
    return Eq4Fit(
        status=status,
        A=nan,
        B=nan,
        C=nan,
        A_ci=(nan, nan),
        B_ci=(nan, nan),
        C_ci=(nan, nan),
        r2=nan,
        **points(xs, ys, None),
        alpha=alpha,
    )
