"""Two fits side by side: slope difference and per-x means."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.compare import per_x_means, slope_difference
from analysis.laws import fit_log_linear


def _fit(slope: float, seed: int, base: int = 10):
    rng = np.random.default_rng(seed)
    x = np.repeat([1e3, 1e4, 1e5, 1e6], 3)
    y = slope * np.log10(x) + 1 + rng.normal(0, 0.01, x.size)
    return fit_log_linear(pd.DataFrame({"x": x, "y": y}), "x", "y", law="t", log_base=base)


def test_slope_difference_uses_both_hc3_errors() -> None:
    a, b = _fit(0.1, 0), _fit(0.2, 1)
    d = slope_difference(a, b)
    half = stats.t.ppf(0.975, 10) * math.sqrt(a.a_se**2 + b.a_se**2)
    assert d.status == "ok" and d.diff == pytest.approx(b.a - a.a)
    assert (d.lo, d.hi) == pytest.approx((d.diff - half, d.diff + half))
    assert d.excludes_zero
    assert not slope_difference(a, _fit(0.1, 2)).excludes_zero


def test_slope_difference_refuses_mixed_bases_and_missing_fits() -> None:
    assert slope_difference(_fit(0.1, 0), _fit(0.1, 0, base=2)).status.startswith("the fits")
    empty = fit_log_linear(pd.DataFrame({"x": [1.0], "y": [1.0]}), "x", "y", law="t")
    assert slope_difference(empty, _fit(0.1, 0)).status == "both sweeps need a fit"


def test_per_x_means_aligns_both_tables() -> None:
    a = pd.DataFrame({"x": [1, 1, 2, 3], "y": [1.0, 2.0, 3.0, 4.0], "state": ["completed"] * 4})
    b = pd.DataFrame(
        {"x": [2, 3, 4], "y": [1.0, 2.0, 3.0], "state": ["completed", "failed", "completed"]}
    )
    m = per_x_means(a, b, "x", "y")
    assert m["x"].tolist() == [1, 2, 3, 4]
    assert m["n_a"].tolist() == [2, 1, 1, 0] and m["n_b"].tolist() == [0, 1, 0, 1]
    assert m.loc[1, "delta"] == pytest.approx(-2.0)
    assert m.loc[0, "sd_a"] == pytest.approx(math.sqrt(0.5))
    assert math.isnan(m.loc[0, "delta"])
