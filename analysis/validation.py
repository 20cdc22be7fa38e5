"""Out-of-sample checks of a log-linear law: extrapolation to the largest x and leave-one-out.

Extrapolation: a fit on the smaller budgets predicts the largest one. Leave-one-out (LOO)
predicts each trial from a fit without it; its residuals are the PRESS residuals
``e_i / (1 - h_ii)`` (statsmodels ``OLSInfluence``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import statsmodels.api as sm
from statsmodels.stats.outliers_influence import OLSInfluence

from analysis._json import JsonRecord
from analysis.laws import MIN_DISTINCT_X, constant_response, fit_log_linear, no_variation_status


@dataclass(frozen=True)
class Extrapolation(JsonRecord):
    """A fit on every x below the largest, predicting the mean y at the largest x."""

    x_heldout: float
    """the largest x (x units); its trials are held out"""
    n_train: int
    """trials fitted (x < x_heldout)"""
    n_heldout: int
    observed: float
    """mean y of the held-out trials"""
    predicted: float
    """the smaller-budget fit's mean at x_heldout"""
    pred_lo: float
    """(1 - alpha) prediction interval of the mean of n_heldout new trials at x_heldout"""
    pred_hi: float
    error: float
    """predicted - observed (y units)"""
    rel_error: float
    """error / observed"""
    covered: bool | None
    """observed within [pred_lo, pred_hi]; None when there is no prediction (no verdict)"""
    status: str


@dataclass(frozen=True)
class LeaveOneOut(JsonRecord):
    """Leave-one-out prediction errors over the fitted trials (y units)."""

    n: int
    rmse: float
    mae: float
    max_abs: float
    status: str


def extrapolate_largest(
    x: Sequence[float],
    y: Sequence[float],
    *,
    law: str,
    log_base: int = 10,
    alpha: float = 0.05,
    y_name: str = "y",
) -> Extrapolation:
    """Fit ``y = a*log_base(x) + b`` on the trials with x below the largest x and predict the
    largest. Needs 3 distinct x below it (4 in all) and a y that varies there; otherwise
    ``status`` says why (naming ``y_name``) and the numbers are NaN. ``x`` > 0 and finite,
    ``y`` finite, shape (n,)."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    nan = math.nan
    if xs.size == 0:
        return Extrapolation(nan, 0, 0, nan, nan, nan, nan, nan, nan, None, "no trials")
    top = float(xs.max())
    held = xs == top
    fit = fit_log_linear(
        pd.DataFrame({"x": xs[~held], "y": ys[~held]}),
        "x",
        "y",
        law=law,
        log_base=log_base,
        allow_constant=False,
    )
    observed = float(ys[held].mean())
    if not fit.ok:
        train = ys[~held]
        enough = len(np.unique(xs[~held])) >= MIN_DISTINCT_X
        reason = (
            no_variation_status(y_name, train)
            if enough and constant_response(train)
            else fit.status
        )
        status = f"{reason} below the largest x"
        return Extrapolation(
            top, fit.n, int(held.sum()), observed, nan, nan, nan, nan, nan, None, status
        )
    row = fit.predict([top], alpha=alpha, n_obs=int(held.sum())).iloc[0]
    pred, lo, hi = float(row["mean"]), float(row["obs_lo"]), float(row["obs_hi"])
    return Extrapolation(
        x_heldout=top,
        n_train=fit.n,
        n_heldout=int(held.sum()),
        observed=observed,
        predicted=pred,
        pred_lo=lo,
        pred_hi=hi,
        error=pred - observed,
        rel_error=(pred - observed) / observed if observed else nan,
        covered=bool(lo <= observed <= hi),
        status="ok",
    )


def leave_one_out(
    x: Sequence[float], y: Sequence[float], *, log_base: int = 10, y_name: str = "y"
) -> LeaveOneOut:
    """LOO errors of ``y = a*log_base(x) + b`` over the trials: each trial predicted by the fit
    on all the others. Needs 3 distinct x and a y that varies; otherwise ``status`` says why
    (NaN numbers; ``y_name`` names the response there)."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    nan = math.nan
    if len(np.unique(xs)) < 3:
        return LeaveOneOut(int(xs.size), nan, nan, nan, "not enough points: need >= 3 distinct x")
    if constant_response(ys):
        return LeaveOneOut(int(xs.size), nan, nan, nan, no_variation_status(y_name, ys))
    model = sm.OLS(ys, sm.add_constant(np.log(xs) / math.log(log_base))).fit()
    press = np.asarray(OLSInfluence(model).resid_press, dtype=float)
    return LeaveOneOut(
        n=int(xs.size),
        rmse=float(np.sqrt(np.mean(press**2))),
        mae=float(np.mean(np.abs(press))),
        max_abs=float(np.max(np.abs(press))),
        status="ok",
    )
