"""Main effects of two-level factors in a sweep of variants (a 2^k factorial ablation).

A factor is a field that every variant sets and that takes exactly two values
(:func:`two_level_factors`). Its main effect on a metric is the coefficient of its indicator (1
at the level the first variant does *not* use) in an OLS fit over the completed trials,
``y = b0 + sum_f e_f * x_f``, with a t-based 95% CI (statsmodels). In a fractional design it is
aliased with interactions. Source: Box, Hunter & Hunter, *Statistics for Experimenters*, ch. 5.

:func:`effects_across_sets` gives each factor's effect on every ``acceptance_length/<set>`` and
on the per-trial mean over sets (:data:`SET_MEAN`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import statsmodels.api as sm

from analysis.variants import VARIANT

__all__ = [
    "PER_SET_PREFIX",
    "SET_MEAN",
    "FactorAcrossSets",
    "FactorEffect",
    "effects_across_sets",
    "factor_effects",
    "per_set_columns",
    "two_level_factors",
    "with_set_mean",
]

PER_SET_PREFIX = "acceptance_length/"
"""prefix of a trial's per-prompt-set acceptance lengths (``acceptance_length/<set>``)"""
SET_MEAN = "acceptance_length_set_mean"
"""the derived column of :func:`with_set_mean`: a trial's mean over its prompt sets of the
per-set (pooled) acceptance lengths, tokens per cycle"""


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


@dataclass(frozen=True)
class FactorAcrossSets:
    """One factor's main effect on every prompt set and on the mean over the sets."""

    factor: str
    """the dotted config field"""
    low: str
    """its level in the first variant"""
    high: str
    """its other level"""
    per_set: tuple[FactorEffect, ...]
    """the effect on each ``acceptance_length/<set>``, in set order (metric names the set)"""
    mean: FactorEffect
    """the effect on :data:`SET_MEAN`, the per-trial mean over the sets"""

    @property
    def preferred(self) -> str:
        """The level the mean over sets prefers (the higher acceptance length); "" when the
        effect is undefined or exactly 0."""
        sign = _sign(self.mean.effect)
        return "" if sign == 0 else (self.high if sign > 0 else self.low)

    @property
    def resolved(self) -> bool:
        """Whether the 95% CI of the mean-over-sets effect excludes 0."""
        return _side(self.mean) != 0

    @property
    def agreeing_sets(self) -> int:
        """Prompt sets whose effect's 95% CI excludes 0 on the side of the mean-over-sets
        effect."""
        return sum(1 for e in self.per_set if _side(e) == _sign(self.mean.effect) != 0)

    @property
    def opposing_sets(self) -> int:
        """Prompt sets whose effect's 95% CI excludes 0 on the other side."""
        return sum(1 for e in self.per_set if _side(e) == -_sign(self.mean.effect) != 0)


def _sign(x: float) -> int:
    return 0 if not math.isfinite(x) or x == 0 else (1 if x > 0 else -1)


def _side(e: FactorEffect) -> int:
    """+1 / -1 when the effect's CI lies above / below 0; 0 when it holds 0 or is undefined."""
    lo, hi = e.ci
    return 1 if lo > 0 else (-1 if hi < 0 else 0)


def per_set_columns(trials: pd.DataFrame, prefix: str = PER_SET_PREFIX) -> list[str]:
    """The per-prompt-set metric columns of ``trials`` (``acceptance_length/<set>``), sorted."""
    return sorted(str(c) for c in trials.columns if str(c).startswith(prefix))


def with_set_mean(trials: pd.DataFrame, prefix: str = PER_SET_PREFIX) -> pd.DataFrame:
    """``trials`` with the column :data:`SET_MEAN`: each row's mean of its
    ``acceptance_length/<set>`` values (NaN unless every set's value is finite, so each mean
    is over the same sets); a copy, the input is left alone. Without per-set columns the
    table is returned unchanged."""
    cols = per_set_columns(trials, prefix)
    if not cols:
        return trials
    values = trials[cols].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
    complete = np.isfinite(values).all(axis=1)
    mean = np.where(complete, np.where(complete[:, None], values, 0.0).mean(axis=1), np.nan)
    # one concat, not an insert: a wide table from the store is fragmented (PerformanceWarning)
    column = pd.Series(mean, index=trials.index, name=SET_MEAN)
    return pd.concat([trials.drop(columns=[SET_MEAN], errors="ignore"), column], axis=1)


def effects_across_sets(
    trials: pd.DataFrame, variants: dict[str, dict[str, Any]], prefix: str = PER_SET_PREFIX
) -> list[FactorAcrossSets]:
    """Each two-level factor's main effect (:func:`factor_effects`) on every prompt set's
    acceptance length and on the per-trial mean over the sets (:func:`with_set_mean`).

    Args:
        trials: wide trial table with ``variant``, ``state`` and ``acceptance_length/<set>``
            columns (tokens per cycle, pooled per set).
        variants: the spec's variants (name -> dotted overrides), in file order.
        prefix: the per-set column prefix.

    Returns:
        One :class:`FactorAcrossSets` per factor, in field order; empty with fewer than two
        prompt sets or when :func:`factor_effects` gives none for the mean over sets.
    """
    cols = per_set_columns(trials, prefix)
    if len(cols) < 2:
        return []
    table = with_set_mean(trials, prefix)
    mean = {e.factor: e for e in factor_effects(table, variants, SET_MEAN)}
    by_set = [{e.factor: e for e in factor_effects(table, variants, c)} for c in cols]
    return [
        FactorAcrossSets(
            factor=f,
            low=e.low,
            high=e.high,
            per_set=tuple(s[f] for s in by_set if f in s),
            mean=e,
        )
        for f, e in mean.items()
    ]
