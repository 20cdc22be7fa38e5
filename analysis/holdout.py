"""Scoring a law's prediction against trials it was not fitted on (``orchestrator plan
--holdout``): fit on the trials at x <= a cut, predict each held-out trial's y with the (1 -
alpha) prediction interval of one new trial at a new budget (:mod:`analysis.budget_effect`:
the OLS interval, widened by the budgets' shared deviation from the law when the fitted part
shows one), and count how many fall inside.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analysis._json import dataclass_dict, json_safe
from analysis.budget_effect import budget_effect
from analysis.laws import fit_log_linear

__all__ = ["HoldoutScore", "score_holdout"]


@dataclass
class HoldoutScore:
    """The held-out trials' predictions, errors and coverage."""

    cut: float
    """the largest x fitted on"""
    n_fit: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    """per held-out trial: x, y, predicted, lo, hi, inside, error (y - predicted)"""
    alpha: float = 0.05
    a: float = float("nan")
    a_ci: tuple[float, float] = (float("nan"), float("nan"))
    sigma2_between: float = 0.0
    """variance of a budget's shared deviation in the fitted part (0: the OLS intervals)"""

    @property
    def inside(self) -> int:
        return sum(1 for r in self.rows if r["inside"])

    @property
    def coverage(self) -> float:
        return self.inside / len(self.rows) if self.rows else float("nan")

    @property
    def mean_abs_error(self) -> float:
        return float(np.mean([abs(r["error"]) for r in self.rows])) if self.rows else float("nan")

    def to_dict(self) -> dict[str, Any]:
        out = dataclass_dict(self)
        out.update(inside=self.inside, coverage=self.coverage, mean_abs_error=self.mean_abs_error)
        return json_safe(out)


def score_holdout(
    x: Sequence[float], y: Sequence[float], cut: float, *, alpha: float = 0.05, log_base: int = 10
) -> HoldoutScore:
    """Fit ``y = a*log(x) + b`` on the trials at x <= ``cut``, score the others.

    Raises:
        ValueError: fewer than 3 distinct x at or below the cut, or none above it.
    """
    frame = pd.DataFrame({"x": np.asarray(x, dtype=float), "y": np.asarray(y, dtype=float)})
    fit_part, held = frame[frame["x"] <= cut], frame[frame["x"] > cut]
    if fit_part["x"].nunique() < 3:
        raise ValueError(
            f"--holdout {cut:,.0f}: {fit_part['x'].nunique()} distinct budgets at or below it; the "
            "law needs >= 3 to fit. Fix: a larger cut"
        )
    if held.empty:
        raise ValueError(
            f"--holdout {cut:,.0f}: no trial above it to score. Fix: a cut below the largest "
            f"budget ({frame['x'].max():,.0f})"
        )
    fit = fit_log_linear(fit_part, "x", "y", law="holdout", log_base=log_base, alpha=alpha)
    law = budget_effect(fit_part["x"].tolist(), fit_part["y"].tolist(), log_base=log_base)
    pred = law.predict(held["x"].tolist(), alpha=alpha)
    score = HoldoutScore(
        cut=cut,
        n_fit=len(fit_part),
        alpha=alpha,
        a=fit.a,
        a_ci=fit.a_ci,
        sigma2_between=law.sigma2_between,
    )
    for i, (_, h) in enumerate(held.iterrows()):
        lo, hi, mean = (float(pred[k][i]) for k in ("obs_lo", "obs_hi", "mean"))
        score.rows.append(
            {
                "x": float(h["x"]),
                "y": float(h["y"]),
                "predicted": mean,
                "lo": lo,
                "hi": hi,
                "inside": bool(lo <= h["y"] <= hi),
                "error": float(h["y"] - mean),
            }
        )
    return score
