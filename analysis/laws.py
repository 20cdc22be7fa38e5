"""Log-linear scaling-law fits: ``y = a*log_base(x) + b`` by OLS with HC3 robust errors.

Source: Scylla, "Scaling Laws for Speculative Decoding" (arXiv 2505.07858):

- Thm 1.1: acceptance length vs draft pretraining tokens, ``tau = a*log10(T) + b``;
- Thm 1.2: acceptance length vs draft decoder layers, ``tau = a*log10(D) + b``;
- Thm 1.3: peak throughput (tokens/s) vs decoding batch size, ``a*log2(b) + b0``.

Pure functions over pandas tables: no I/O, no torch, Ray, SQL or MLflow.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import statsmodels.api as sm
from scipy import stats

from analysis.fit import Fit, points, r_squared

MIN_DISTINCT_X = 3
"""Fewest distinct x values a fit needs (two points always fit a line exactly)."""

CONSTANT_RTOL = 1e-12
"""a response whose range is at most this fraction of its largest magnitude is constant"""


@dataclass(frozen=True, kw_only=True)
class LogLinearFit(Fit):
    """An OLS fit of ``y = a*log_base(x) + b`` with its uncertainty (a :class:`Fit`).

    Standard errors HC3 (MacKinnon & White 1985), intervals t-based with ``df_resid`` degrees
    of freedom. When ``status != "ok"`` (fewer than 3 distinct x, or a refused constant
    response) the coefficients, intervals and ``r2`` are NaN.
    """

    law: str
    """short name of the law, e.g. "tokens" (a key of ``analysis.paper.PAPER_CONSTANTS`` when it
    is one)"""
    x_name: str
    """column of the regressor, e.g. "pretrain.tokens" (in the column's own unit)"""
    y_name: str
    """column of the response, e.g. "acceptance_length" (tokens per cycle)"""
    log_base: int
    """10 or 2"""
    a: float
    """slope: change of y per factor ``log_base`` in x (y units)"""
    b: float
    """intercept: y at x = 1 (y units)"""
    a_ci: tuple[float, float]
    """(lo, hi) confidence interval of a at level 1 - alpha"""
    b_ci: tuple[float, float]
    """(lo, hi) confidence interval of b at level 1 - alpha"""
    r2_adj: float
    """adjusted R², ``1 - (1 - r2)*(n - 1)/(n - 2)``"""
    excluded: int
    """rows dropped because x <= 0 or x or y is not finite"""
    cov: tuple[tuple[float, float], tuple[float, float]]
    """covariance matrix of (a, b)"""
    df_resid: float
    """residual degrees of freedom (n - 2)"""
    scale: float = math.nan
    """residual variance ``sum(residuals**2) / df_resid`` (y units squared)"""
    cov_type: str = "HC3"
    """covariance estimator of a_ci, b_ci and cov (statsmodels ``cov_type``)"""
    weights: str = "none"
    """"none" (OLS) or ``"1/<column>"`` (WLS by that variance column, :func:`fit_log_linear`)"""

    @property
    def a_se(self) -> float:
        """Standard error of a (``cov_type``)."""
        return math.sqrt(self.cov[0][0]) if self.cov[0][0] >= 0 else math.nan

    def predict(
        self, x_values: Iterable[float], alpha: float = 0.05, n_obs: int = 1
    ) -> pd.DataFrame:
        """Fitted mean, its (1 - alpha) confidence band and prediction band at ``x_values``.

        As statsmodels ``get_prediction(...).summary_frame(alpha)``; the obs band is for the
        mean of ``n_obs`` new trials. Columns: x, mean, mean_lo, mean_hi, obs_lo, obs_hi, in y's
        unit; NaN rows where x <= 0, all NaN for a fit that is not ok.
        """
        xs = np.asarray(list(x_values), dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            lx = np.where(xs > 0, np.log(xs) / math.log(self.log_base), np.nan)
        cov = np.asarray(self.cov, dtype=float)
        mean = self.a * lx + self.b
        var = cov[0, 0] * lx**2 + 2 * cov[0, 1] * lx + cov[1, 1]
        ok = self.ok and self.df_resid > 0
        t = float(stats.t.ppf(1 - alpha / 2, self.df_resid)) if ok else math.nan
        half = t * np.sqrt(np.maximum(var, 0.0))
        obs = t * np.sqrt(np.maximum(var, 0.0) + self.scale / n_obs)
        return pd.DataFrame(
            {
                "x": xs,
                "mean": mean,
                "mean_lo": mean - half,
                "mean_hi": mean + half,
                "obs_lo": mean - obs,
                "obs_hi": mean + obs,
            }
        )


def constant_response(y: Iterable[float]) -> bool:
    """Whether the finite values ``y`` (shape (n,), n >= 1) do not vary: their range is at most
    :data:`CONSTANT_RTOL` of their largest magnitude. False for no values."""
    ys = np.asarray(list(y), dtype=float)
    if ys.size == 0:
        return False
    return float(np.ptp(ys)) <= CONSTANT_RTOL * float(np.max(np.abs(ys)))


def no_variation_status(y_name: str, y: Iterable[float]) -> str:
    """The status of a fit of a constant response (see :func:`constant_response`)."""
    ys = list(y)
    value = format(ys[0], ".6g") if ys else "?"
    return (
        f"no variation: every {y_name} is {value} ({len(ys)} points); slope, R² and "
        "comparisons are undefined"
    )


def law_form(x: str, y: str, log_base: int) -> str:
    """The law as text, e.g. ``"acceptance_length = a*log10(pretrain.tokens) + b"``."""
    return f"{y} = a*log{log_base}({x}) + b"


def fit_log_linear(
    df: pd.DataFrame,
    x: str,
    y: str,
    *,
    law: str,
    log_base: int = 10,
    alpha: float = 0.05,
    allow_constant: bool = True,
    variance: str | None = None,
) -> LogLinearFit:
    """Fit ``y = a*log_base(x) + b`` by OLS (statsmodels) with HC3 t-based (1 - alpha) CIs.

    Scylla (arXiv 2505.07858) Thm 1.1 and 1.2 (log10), Thm 1.3 (log2). Rows where x <= 0 (the
    SFT-only baseline) or x or y is not finite are dropped and counted in ``excluded``. Fewer
    than 3 distinct x, or a constant y (:func:`constant_response`) unless ``allow_constant``,
    give a fit whose ``status`` says so, coefficients NaN. Raises ``ValueError`` when a column
    is missing or ``log_base`` is not 2 or 10; never for data.

    ``variance`` (None: OLS) names a column of each row's measurement variance (y units
    squared, e.g. :func:`ci_variance`): the fit is then WLS with weights 1/variance, still HC3.
    Rows with a non-finite or negative variance are dropped (counted in ``excluded``); a zero
    variance is raised to the smallest positive one. ``r2``, ``residuals`` and ``scale`` stay
    unweighted. When to weight: docs/analysis.md.
    """
    if log_base not in (2, 10):
        raise ValueError(f"log_base={log_base} is not supported. Use 10 or 2.")
    missing = [c for c in (x, y) if c not in df.columns]
    if missing:
        raise ValueError(f"columns {missing} are not in the table; it has {list(df.columns)}")
    xs = pd.to_numeric(df[x], errors="coerce").to_numpy(dtype=float)
    ys = pd.to_numeric(df[y], errors="coerce").to_numpy(dtype=float)
    vs = _variances(df, variance)
    keep = np.isfinite(xs) & np.isfinite(ys) & (xs > 0) & np.isfinite(vs) & (vs >= 0)
    xs, ys, vs = xs[keep], ys[keep], vs[keep]
    excluded = int((~keep).sum())
    head: dict[str, Any] = {"law": law, "x_name": x, "y_name": y, "log_base": log_base}
    head |= {"form": law_form(x, y, log_base), "excluded": excluded, "alpha": alpha}
    distinct = len(np.unique(xs))
    if distinct < MIN_DISTINCT_X:
        status = f"not enough points: need >= {MIN_DISTINCT_X} distinct x values, got {distinct}"
        return _empty_fit(head, xs, ys, status)
    if not allow_constant and constant_response(ys):
        status = no_variation_status(y, ys)
        return _empty_fit(head, xs, ys, status)
    lx = np.log(xs) / math.log(log_base)
    if variance is None:
        model = sm.OLS(ys, sm.add_constant(lx)).fit(cov_type="HC3", use_t=True)
    else:
        positive = vs[vs > 0]
        floor = float(positive.min()) if positive.size else 1.0  # all zero: equal weights
        w = 1.0 / np.maximum(vs, floor)
        model = sm.WLS(ys, sm.add_constant(lx), weights=w).fit(cov_type="HC3", use_t=True)
    resid = np.asarray(model.resid)  # y - fitted, unweighted under WLS too
    # statsmodels orders parameters (const, slope); the dataclass orders them (a=slope, b=const).
    b, a = (float(v) for v in model.params)
    ci = np.asarray(model.conf_int(alpha))
    cov = np.asarray(model.cov_params())[::-1, ::-1]
    return LogLinearFit(
        **head,
        a=a,
        b=b,
        a_ci=(float(ci[1, 0]), float(ci[1, 1])),
        b_ci=(float(ci[0, 0]), float(ci[0, 1])),
        r2=(r2 := r_squared(ys, resid)),
        r2_adj=1.0 - (1.0 - r2) * (len(xs) - 1) / model.df_resid,
        **points(xs, ys, resid),
        status="ok",
        cov=((float(cov[0, 0]), float(cov[0, 1])), (float(cov[1, 0]), float(cov[1, 1]))),
        df_resid=float(model.df_resid),
        scale=float(model.scale if variance is None else np.sum(resid**2) / model.df_resid),
        weights="none" if variance is None else f"1/{variance}",
    )


def ci_variance(lo: Iterable[float], hi: Iterable[float], level: float = 0.95) -> np.ndarray:
    """Each row's variance (units squared, shape (n,)) implied by its two-sided ``level`` CI
    ``(lo, hi)`` under a normal approximation: ``((hi - lo) / (2 z))**2``, z the normal
    quantile at ``(1 + level) / 2`` (1.96 at 95%); NaN where a bound is not finite.

    Raises:
        ValueError: ``level`` outside (0, 1) or ``lo`` and ``hi`` of different lengths.
    """
    if not 0 < level < 1:
        raise ValueError(f"level={level} must be in (0, 1). Fix: e.g. level=0.95.")
    a, b = np.asarray(list(lo), dtype=float), np.asarray(list(hi), dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"lo and hi must have one value per row (got {a.shape} and {b.shape})")
    z = float(stats.norm.ppf((1 + level) / 2))
    return ((b - a) / (2 * z)) ** 2


def _variances(df: pd.DataFrame, column: str | None) -> np.ndarray:
    """The ``variance`` column of :func:`fit_log_linear` as floats (zeros when None)."""
    if column is None:
        return np.zeros(len(df))
    if column not in df.columns:
        raise ValueError(f"column {column!r} is not in the table; it has {list(df.columns)}")
    return pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)


def baseline_summary(df: pd.DataFrame, x: str, y: str) -> dict[str, float | int]:
    """Mean, std (ddof=1; NaN when n < 2) and n of finite ``y`` over rows with ``x == 0``.

    The x == 0 rows are the SFT-only baseline. Returns mean NaN and n 0 when there is none (or
    a column is missing).
    """
    if x not in df.columns or y not in df.columns:
        return {"mean": math.nan, "std": math.nan, "n": 0}
    xs = pd.to_numeric(df[x], errors="coerce").to_numpy(dtype=float)
    ys = pd.to_numeric(df[y], errors="coerce").to_numpy(dtype=float)
    vals = ys[(xs == 0) & np.isfinite(ys)]
    n = len(vals)
    mean = float(vals.mean()) if n else math.nan
    std = float(vals.std(ddof=1)) if n > 1 else math.nan
    return {"mean": mean, "std": std, "n": n}


def _empty_fit(head: dict[str, Any], xs: np.ndarray, ys: np.ndarray, status: str) -> LogLinearFit:
    """A fit with no coefficients (``status`` says why) of the points ``xs``, ``ys``; ``head``
    the fit's law, names, form, base, exclusions and level."""
    nan = math.nan
    return LogLinearFit(
        **head,
        a=nan,
        b=nan,
        a_ci=(nan, nan),
        b_ci=(nan, nan),
        r2=nan,
        r2_adj=nan,
        **points(xs, ys, None),
        status=status,
        cov=((nan, nan), (nan, nan)),
        df_resid=nan,
    )
