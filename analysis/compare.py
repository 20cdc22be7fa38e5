"""Two sweeps' fits of the same law side by side: slope difference and per-x means.

Pure functions over :class:`analysis.laws.LogLinearFit` and trial tables (pandas).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from analysis.laws import LogLinearFit


@dataclass(frozen=True)
class SlopeDifference:
    """``a_B - a_A`` with an approximate (1 - alpha) CI from the two fits' HC3 standard errors
    (independent sweeps: se = sqrt(se_A² + se_B²); t with min(df_A, df_B) degrees of freedom,
    conservative)."""

    diff: float
    lo: float
    hi: float
    df: float
    status: str

    @property
    def excludes_zero(self) -> bool:
        """True when the interval does not contain 0 (the slopes differ at level alpha)."""
        return self.status == "ok" and not (self.lo <= 0.0 <= self.hi)


def slope_difference(a: LogLinearFit, b: LogLinearFit, *, alpha: float = 0.05) -> SlopeDifference:
    """Slope of ``b`` minus slope of ``a``; NaN with a status when either fit is missing or the
    log bases differ (slopes per decade and per doubling are not comparable)."""
    nan = math.nan
    if not (a.ok and b.ok):
        return SlopeDifference(nan, nan, nan, nan, "both sweeps need a fit")
    if a.log_base != b.log_base:
        return SlopeDifference(nan, nan, nan, nan, "the fits use different log bases")
    diff = b.a - a.a
    se = math.sqrt(a.a_se**2 + b.a_se**2)
    df = min(a.df_resid, b.df_resid)
    half = float(stats.t.ppf(1 - alpha / 2, df)) * se
    return SlopeDifference(diff, diff - half, diff + half, df, "ok")


def per_x_means(table_a: pd.DataFrame, table_b: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Mean, sd (ddof=1) and n of ``y`` per ``x`` for both tables (completed, finite rows only)
    and ``delta = mean_b - mean_a``. Columns: x, mean_a, sd_a, n_a, mean_b, sd_b, n_b, delta;
    one row per x present in either table, sorted by x."""
    parts = []
    for tag, t in (("a", table_a), ("b", table_b)):
        done = t[t["state"] == "completed"] if "state" in t.columns else t
        xs = pd.to_numeric(done.get(x), errors="coerce")
        ys = pd.to_numeric(done.get(y), errors="coerce")
        frame = pd.DataFrame({"x": xs, "y": ys}).dropna()
        frame = frame[np.isfinite(frame["y"])]
        g = frame.groupby("x")["y"].agg(["mean", "std", "count"])
        g.columns = [f"mean_{tag}", f"sd_{tag}", f"n_{tag}"]
        parts.append(g)
    out = pd.concat(parts, axis=1).sort_index()
    for c in ("n_a", "n_b"):
        out[c] = out[c].fillna(0).astype(int)
    out["delta"] = out["mean_b"] - out["mean_a"]
    return out.reset_index().rename(columns={"index": "x"})
