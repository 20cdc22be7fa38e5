"""The saturating alternative y = c - A*x^-alpha and the AIC comparison."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.saturating import compare_forms, fit_saturating, gaussian_aic


def test_recovers_a_saturating_curve_and_prefers_it() -> None:
    rng = np.random.default_rng(0)
    x = np.repeat([1e3, 3e3, 1e4, 3e4, 1e5, 3e5, 1e6], 3)
    y = 2.0 - 0.8 * (x / 1e3) ** -0.5 + rng.normal(0, 0.005, x.size)
    sat = fit_saturating(x, y)
    assert sat.ok and sat.x0 == 1e3
    assert sat.c == pytest.approx(2.0, abs=0.02)
    assert pytest.approx(0.8, abs=0.03) == sat.A and sat.alpha == pytest.approx(0.5, abs=0.05)
    line = np.polyfit(np.log10(x), y, 1)
    rss_line = float(np.sum((y - np.polyval(line, np.log10(x))) ** 2))
    cmp = compare_forms(rss_line, x.size, sat)
    assert cmp.preferred == "saturating" and cmp.delta < -10


def test_log_linear_data_does_not_favour_saturating() -> None:
    rng = np.random.default_rng(1)
    x = np.repeat([1e3, 1e4, 1e5, 1e6, 1e7], 3)
    y = 0.1 * np.log10(x) + 1.0 + rng.normal(0, 0.01, x.size)
    sat = fit_saturating(x, y)
    line = np.polyfit(np.log10(x), y, 1)
    rss_line = float(np.sum((y - np.polyval(line, np.log10(x))) ** 2))
    cmp = compare_forms(rss_line, x.size, sat)
    assert cmp.preferred in ("log-linear", "no clear preference")


def test_aic_formula() -> None:
    assert gaussian_aic(2.0, 10, 2) == pytest.approx(10 * math.log(0.2) + 6)
    assert gaussian_aic(0.0, 5, 2) == -math.inf
    assert math.isnan(gaussian_aic(1.0, 0, 2))


def test_not_enough_points_is_a_status() -> None:
    sat = fit_saturating([1.0, 10.0, 100.0], [1.0, 1.5, 1.7])
    assert not sat.ok and sat.status.startswith("not enough points")
    assert compare_forms(0.1, 3, sat).preferred == "n/a"
    assert sat.to_dict()["c"] is None
