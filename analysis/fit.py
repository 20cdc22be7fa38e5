"""What every fitted law shares: :class:`Fit`, the fields of one law fitted to points.

The specialised fits add their coefficients: :class:`analysis.laws.LogLinearFit` (``a``, ``b``,
Scylla Thm 1.1-1.3) and :class:`analysis.eq4.Eq4Fit` (``A``, ``B``, ``C``, Scylla Eq. 4);
results that compare or combine fits hold them (:class:`analysis.eq4.KOptFit`). Pure functions,
numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis._json import JsonRecord

Points = Sequence[float] | np.ndarray
"""values of n points, shape (n,)"""


@dataclass(frozen=True, kw_only=True)
class Fit(JsonRecord):
    """A law fitted to (x, y) points. When ``status != "ok"`` the coefficients, their intervals
    and ``r2`` are NaN; the points stay."""

    form: str
    """the law as text, e.g. "acceptance_length = a*log10(pretrain.tokens) + b" """
    status: str
    """ "ok", or why there is no fit"""
    r2: float
    """coefficient of determination"""
    n: int
    """points used in the fit"""
    x: tuple[float, ...]
    """x values used, in the column's unit"""
    y: tuple[float, ...]
    """y values used"""
    residuals: tuple[float, ...]
    """y - fitted, same order as x and y (NaN without a fit)"""
    alpha: float = 0.05
    """significance level of the intervals"""

    @property
    def ok(self) -> bool:
        """True when the fit has coefficients."""
        return self.status == "ok"


def points(xs: Points, ys: Points, resid: Points | None) -> dict[str, Any]:
    """The point fields of a :class:`Fit` (``n``, ``x``, ``y``, ``residuals``) as floats, from
    arrays of shape (n,); ``resid`` None (no fit): NaN residuals."""
    res = [math.nan] * len(xs) if resid is None else resid
    return {
        "n": len(xs),
        "x": tuple(float(v) for v in xs),
        "y": tuple(float(v) for v in ys),
        "residuals": tuple(float(v) for v in res),
    }


def r_squared(ys: np.ndarray, resid: np.ndarray) -> float:
    """Coefficient of determination of residuals ``resid`` on ``ys`` (both shape (n,)): 1 for
    a constant y fitted exactly, NaN for a constant y not fitted exactly."""
    ss_res = float(np.sum(resid**2))
    ss_tot = float(np.sum((ys - ys.mean()) ** 2))
    if ss_tot == 0.0:
        return 1.0 if ss_res == 0.0 else math.nan
    return 1.0 - ss_res / ss_tot
