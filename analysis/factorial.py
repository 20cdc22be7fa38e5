"""Main effects of two-level factors in a sweep of variants (a 2^k factorial ablation).

A sweep of variants whose recipes differ in fields that take exactly two values across the
variants (e.g. ``pretrain.packing`` joined | isolated) is a two-level factorial design. Each
factor's main effect on a metric is the coefficient of its indicator (1 at the level the first
variant does *not* use) in an OLS fit over the completed trials, ``y = b0 + sum_f e_f * x_f``,
with a t-based 95% CI (statsmodels). In a balanced full factorial that coefficient equals the
difference of the two level means (averaged over the other factors); in a fraction it is aliased
with interactions of the others. Source: Box, Hunter & Hunter, *Statistics for Experimenters*,
ch. 5 (factorial designs at two levels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import statsmodels.api as sm

from analysis.variants import VARIANT


@dataclass(frozen=True)
class FactorEffect:
    """Main effect of one factor on one metric (``high`` minus ``low``)."""

    factor: str
    """the dotted config field"""
    low: str
    """its level in the first variant (the reference)"""
    high: str
    """its other level"""
    metric: str
    effect: float
    """mean change of the metric from low to high, in the metric's unit"""
    ci: tuple[float, float]
    """95% confidence interval of ``effect``"""
    p: float
    """two-sided p-value of effect = 0"""
    n: int
    """completed trials in the fit"""


def two_level_factors(variants: dict[str, dict[str, Any]]) -> dict[str, tuple[Any, Any]]:
    """Fields that every variant sets and that take exactly two values: field -> (low, high),
    low being the first variant's value. Empty for fewer than two variants."""
    names = list(variants)
    if len(names) < 2:
        return {}
    out: dict[str, tuple[Any, Any]] = {}
    for field in variants[names[0]]:
        values = [variants[n].get(field, None) for n in names]
        if any(field not in variants[n] for n in names):
            continue
        distinct = list(dict.fromkeys(map(repr, values)))
        if len(distinct) == 2:
            low = values[0]
            high = next(v for v in values if repr(v) != repr(low))
            out[field] = (low, high)
    return out


def factor_effects(
    trials: pd.DataFrame, variants: dict[str, dict[str, Any]], metric: str
) -> list[FactorEffect]:
    """Main effect of every two-level factor (see :func:`two_level_factors`) on ``metric``.

    Args:
        trials: wide trial table with ``variant``, ``state`` and the metric column.
        variants: the spec's variants (name -> dotted overrides), in file order.
        metric: the metric column, e.g. ``acceptance_length``.

    Returns:
        One :class:`FactorEffect` per factor, in field order; empty when there are no such
        factors, the metric is missing, or the completed trials leave no residual degree of
        freedom (a CI needs n > factors + 1).
    """
    factors = two_level_factors(variants)
    if not factors or metric not in trials.columns or VARIANT not in trials.columns:
        return []
    done = trials[trials["state"] == "completed"] if "state" in trials.columns else trials
    y = pd.to_numeric(done[metric], errors="coerce")
    keep = np.isfinite(y) & done[VARIANT].isin(list(variants))
    done, y = done[keep], y[keep].to_numpy(dtype=float)
    if len(y) <= len(factors) + 1:
        return []
    cols = {
        field: [float(repr(variants[v][field]) == repr(high)) for v in done[VARIANT]]
        for field, (_, high) in factors.items()
    }
    x = sm.add_constant(pd.DataFrame(cols), has_constant="add")
    if np.linalg.matrix_rank(x.to_numpy()) < x.shape[1]:
        return []  # confounded: some factor never varies independently of the others
    fit = sm.OLS(y, x).fit()
    ci = fit.conf_int(0.05)
    exact = float(fit.ssr) <= 1e-12 * max(1.0, float(np.sum((y - y.mean()) ** 2)))
    nan2 = (math.nan, math.nan)
    return [
        FactorEffect(
            factor=field,
            low=str(low),
            high=str(high),
            metric=metric,
            effect=float(fit.params[field]),
            # no residual variation (e.g. identical trials): no interval and no test
            ci=nan2 if exact else (float(ci.loc[field, 0]), float(ci.loc[field, 1])),
            p=math.nan if exact else float(fit.pvalues[field]),
            n=len(y),
        )
        for field, (low, high) in factors.items()
    ]
