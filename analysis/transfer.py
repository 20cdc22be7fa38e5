"""Does a log-linear law transfer across targets? Two answers from two or more sweeps' trials.

:func:`factor_slope_difference`: one OLS over both sweeps' completed trials at x > 0,

    y = b0 + a*L + g*d + s*L*d,    L = log_base(x),  d = 1 for group B, 0 for group A,

with HC3 standard errors (MacKinnon & White 1985) and t-based intervals on the joint residual
degrees of freedom. ``a`` is A's slope, ``a + s`` B's, and the interaction ``s`` is the slope
difference a_B - a_A. The full interaction makes the estimate and its HC3 variance equal to
those of two separate fits (var_A + var_B; the leverages do not change); what one fit adds is
the pooled residual degrees of freedom, n - 4, and a p-value. Source: the "separate slopes"
test of analysis of covariance (e.g. Weisberg, *Applied Linear Regression*, ch. 5, factors and
interactions) with heteroskedasticity-consistent errors.

:func:`pooled_slope`: each (group, prompt set) slope with its HC3 standard error
(:func:`analysis.laws.fit_log_linear`), pooled by a random-effects meta-analysis (DerSimonian &
Laird 1986, via statsmodels ``combine_effects(method_re="dl")``). tau² is the variance of the
true slopes between the studies (squared slope units); I² = max(0, (Q - df) / Q) the
share of the slopes' spread beyond sampling error (Higgins & Thompson 2002); Q's chi² p-value
tests that one slope fits all. The per-set slopes of one sweep come from the same drafts, so
they are not independent: read the pooled interval as optimistic. docs/analysis.md says how to
read both figures.

Pure functions over pandas tables (columns ``state``, x, y, ``acceptance_length/<set>``): no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import statsmodels.api as sm
from statsmodels.stats.meta_analysis import combine_effects

from analysis.laws import MIN_DISTINCT_X, fit_log_linear

__all__ = [
    "FactorSlopeDifference",
    "PooledSlope",
    "StudySlope",
    "factor_slope_difference",
    "pooled_slope",
]

EXACT_RTOL = 1e-12
"""residuals whose sum of squares is at most this fraction of y's leave no variation to test"""


@dataclass(frozen=True)
class FactorSlopeDifference:
    """The slopes of two groups and their difference from one OLS with the group as a factor.

    When ``status`` is not "ok" the numbers that could not be had are NaN (an exact fit keeps
    its slopes and difference but has no interval or p-value).
    """

    labels: tuple[str, str]
    """group names (A, B), e.g. the two sweeps' names"""
    x: str
    y: str
    log_base: int
    """10 or 2: the slopes are change of y per factor ``log_base`` in x"""
    slopes: tuple[float, float]
    """a_A and a_B, y units per factor ``log_base`` in x"""
    slope_cis: tuple[tuple[float, float], tuple[float, float]]
    """(lo, hi) at level 1 - alpha of each slope (HC3, t with ``df`` degrees of freedom)"""
    diff: float
    """a_B - a_A: the coefficient of log_base(x) x group"""
    ci: tuple[float, float]
    """(lo, hi) at level 1 - alpha of ``diff``"""
    p: float
    """two-sided p-value of diff = 0 (HC3, t)"""
    df: float
    """residual degrees of freedom, n_A + n_B - 4"""
    n: tuple[int, int]
    """trials fitted per group"""
    status: str
    """ "ok", or why there is no fit or no interval"""
    alpha: float = 0.05

    @property
    def ok(self) -> bool:
        """True when the slope difference has an interval."""
        return self.status == "ok"

    @property
    def excludes_zero(self) -> bool:
        """True when the interval does not contain 0 (the slopes differ at level alpha)."""
        return self.ok and not (self.ci[0] <= 0.0 <= self.ci[1])


@dataclass(frozen=True)
class StudySlope:
    """One (group, prompt set) slope that :func:`pooled_slope` pools."""

    group: str
    """the table's name, e.g. the sweep"""
    y: str
    """the response column, e.g. ``acceptance_length/humaneval``"""
    slope: float
    """y units per factor ``log_base`` in x (NaN without a fit)"""
    se: float
    """its HC3 standard error"""
    n: int
    """trials fitted"""
    status: str
    """ "ok", or why it is left out of the pooling"""


@dataclass(frozen=True)
class PooledSlope:
    """A random-effects (DerSimonian-Laird) pooled slope over per-(group, set) slopes.

    When ``status`` is not "ok" (fewer than 2 usable slopes) the pooled numbers are NaN.
    """

    x: str
    log_base: int
    studies: tuple[StudySlope, ...]
    """every (group, column) present, in input order; only those with status "ok" are pooled"""
    estimate: float
    """random-effects mean slope, y units per factor ``log_base`` in x"""
    ci: tuple[float, float]
    """(lo, hi) at level 1 - alpha, normal, scale 1 (statsmodels' ``ci_eff_re``)"""
    tau2: float
    """between-study variance of the true slopes (DerSimonian-Laird, truncated at 0)"""
    i2: float
    """share of the slopes' spread beyond sampling error, in [0, 1]"""
    q: float
    """Cochran's Q"""
    q_p: float
    """chi² p-value of Q with k - 1 degrees of freedom (H0: one common slope)"""
    k: int
    """slopes pooled"""
    status: str
    alpha: float = 0.05

    @property
    def ok(self) -> bool:
        """True when there is a pooled slope."""
        return self.status == "ok"


def _completed(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["state"] == "completed"] if "state" in table.columns else table


def _points(table: pd.DataFrame, x: str, y: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of the completed rows with x > 0 and both finite."""
    done = _completed(table)
    xs = pd.to_numeric(done[x], errors="coerce").to_numpy(dtype=float)
    ys = pd.to_numeric(done[y], errors="coerce").to_numpy(dtype=float)
    keep = np.isfinite(xs) & np.isfinite(ys) & (xs > 0)
    return xs[keep], ys[keep]


def factor_slope_difference(
    table_a: pd.DataFrame,
    table_b: pd.DataFrame,
    x: str,
    y: str,
    labels: tuple[str, str] = ("A", "B"),
    *,
    log_base: int = 10,
    alpha: float = 0.05,
) -> FactorSlopeDifference:
    """The module's one-fit slope difference a_B - a_A of ``y = a*log_base(x) + b``.

    Args:
        table_a, table_b: trial tables with ``x``, ``y`` and optionally ``state`` (only
            ``completed`` rows count); rows with x <= 0 or a non-finite x or y are dropped.
        labels: the groups' names (distinct).

    Returns:
        The fit; ``status`` says why not when a group has fewer than 3 distinct x
        (:data:`analysis.laws.MIN_DISTINCT_X`) or the fit leaves no residual variation.

    Raises:
        ValueError: a column is missing, the labels are equal, or ``log_base`` is not 2 or 10.
    """
    if log_base not in (2, 10):
        raise ValueError(f"log_base={log_base} is not supported. Use 10 or 2.")
    if labels[0] == labels[1]:
        raise ValueError(f"labels {labels} are equal. Fix: name the two groups differently")
    for label, t in zip(labels, (table_a, table_b), strict=True):
        missing = [c for c in (x, y) if c not in t.columns]
        if missing:
            raise ValueError(f"table {label!r} lacks columns {missing}; it has {list(t.columns)}")
    (xa, ya), (xb, yb) = _points(table_a, x, y), _points(table_b, x, y)
    nan, nan2 = math.nan, (math.nan, math.nan)
    n = (len(xa), len(xb))

    def empty(status: str) -> FactorSlopeDifference:
        return FactorSlopeDifference(
            labels, x, y, log_base, (nan, nan), (nan2, nan2), nan, nan2, nan, nan, n, status, alpha
        )

    for label, xs in zip(labels, (xa, xb), strict=True):
        distinct = len(np.unique(xs))
        if distinct < MIN_DISTINCT_X:
            return empty(
                f"not enough points: {label} needs >= {MIN_DISTINCT_X} distinct {x} values "
                f"with completed trials, got {distinct}"
            )
    lx = np.log(np.concatenate([xa, xb])) / math.log(log_base)
    d = np.concatenate([np.zeros(len(xa)), np.ones(len(xb))])
    ys = np.concatenate([ya, yb])
    design = np.column_stack([np.ones_like(lx), lx, d, lx * d])  # b0, a, g, s
    fit = sm.OLS(ys, design).fit(cov_type="HC3", use_t=True)
    params = np.asarray(fit.params)
    slopes = (float(params[1]), float(params[1] + params[3]))
    diff = float(params[3])
    if float(fit.ssr) <= EXACT_RTOL * max(1.0, float(np.sum((ys - ys.mean()) ** 2))):
        status = "exact fit: the trials leave no residual variation, so no interval"
        return FactorSlopeDifference(
            labels,
            x,
            y,
            log_base,
            slopes,
            (nan2, nan2),
            diff,
            nan2,
            nan,
            float(fit.df_resid),
            n,
            status,
            alpha,
        )
    ci = np.asarray(fit.conf_int(alpha))
    # B's slope a + s: its variance var(a) + var(s) + 2 cov(a, s), the same t quantile
    contrast = fit.t_test(np.array([[0.0, 1.0, 0.0, 1.0]]))
    b_ci = np.asarray(contrast.conf_int(alpha))[0]
    return FactorSlopeDifference(
        labels=labels,
        x=x,
        y=y,
        log_base=log_base,
        slopes=slopes,
        slope_cis=((float(ci[1, 0]), float(ci[1, 1])), (float(b_ci[0]), float(b_ci[1]))),
        diff=diff,
        ci=(float(ci[3, 0]), float(ci[3, 1])),
        p=float(fit.pvalues[3]),
        df=float(fit.df_resid),
        n=n,
        status="ok",
        alpha=alpha,
    )


def pooled_slope(
    tables: Mapping[str, pd.DataFrame],
    x: str,
    y_columns: Sequence[str],
    *,
    log_base: int = 10,
    alpha: float = 0.05,
) -> PooledSlope:
    """The module's random-effects pooled slope over every (group, column) of ``tables`` x
    ``y_columns`` where the table has the column (e.g. ``acceptance_length/<set>``).

    Each slope is :func:`analysis.laws.fit_log_linear` over the table's completed trials
    (HC3). A slope without a fit or with a zero or undefined standard error (an exact fit) is
    listed but not pooled. With fewer than 2 pooled slopes, ``status`` says so and the pooled
    numbers are NaN. statsmodels 0.15's DerSimonian-Laird step does not truncate a negative
    tau² at 0; here it is, and the estimate and interval are then the fixed-effect ones (what
    tau² = 0 gives).

    Raises:
        ValueError: ``tables`` has no table with ``x``, or ``log_base`` is not 2 or 10.
    """
    if log_base not in (2, 10):
        raise ValueError(f"log_base={log_base} is not supported. Use 10 or 2.")
    if not any(x in t.columns for t in tables.values()):
        raise ValueError(f"no table has the column {x!r}; tables: {list(tables)}")
    studies = []
    for group, table in tables.items():
        if x not in table.columns:
            continue
        done = _completed(table)
        for col in y_columns:
            if col not in table.columns:
                continue
            fit = fit_log_linear(done, x, col, law="transfer", log_base=log_base, alpha=alpha)
            se = fit.a_se if fit.ok else math.nan
            status = fit.status
            if fit.ok and not (math.isfinite(se) and se > 0):
                status = "no standard error (an exact fit): not pooled"
            studies.append(StudySlope(group, col, fit.a, se, fit.n, status))
    used = [s for s in studies if s.status == "ok"]
    nan, nan2 = math.nan, (math.nan, math.nan)
    if len(used) < 2:
        status = f"not enough slopes: need >= 2 with a standard error, got {len(used)}"
        return PooledSlope(x, log_base, tuple(studies), nan, nan2, nan, nan, nan, nan, 0, status)
    eff = np.array([s.slope for s in used])
    var = np.array([s.se**2 for s in used])
    names = [f"{s.group}:{s.y}" for s in used]
    with np.errstate(invalid="ignore"):  # a negative raw tau² takes square roots of < 0
        res = combine_effects(eff, var, method_re="dl", row_names=names, alpha=alpha)
        ci_fe, ci_re = res.conf_int(alpha=alpha)[:2]
    q, df = max(0.0, float(res.q)), float(res.df)  # a sum of squares; rounding can dip < 0
    if res.tau2 > 0:
        estimate, ci, tau2 = float(res.mean_effect_re), ci_re, float(res.tau2)
    else:
        estimate, ci, tau2 = float(res.mean_effect_fe), ci_fe, 0.0
    return PooledSlope(
        x=x,
        log_base=log_base,
        studies=tuple(studies),
        estimate=estimate,
        ci=(float(ci[0]), float(ci[1])),
        tau2=tau2,
        i2=max(0.0, (q - df) / q) if q > 0 else 0.0,
        q=q,
        q_p=float(res.test_homogeneity().pvalue),
        k=len(used),
        status="ok",
        alpha=alpha,
    )
