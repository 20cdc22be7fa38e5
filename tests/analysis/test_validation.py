"""Extrapolation to the largest budget and leave-one-out errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

from analysis.laws import fit_log_linear
from analysis.validation import extrapolate_largest, leave_one_out


def test_extrapolation_predicts_the_largest_x_from_the_others() -> None:
    rng = np.random.default_rng(2)
    x = np.repeat([1e3, 1e4, 1e5, 1e6, 1e7], 2)
    y = 0.1 * np.log10(x) + 1.0 + rng.normal(0, 0.01, x.size)
    ex = extrapolate_largest(x, y, law="tokens")
    small = fit_log_linear(pd.DataFrame({"x": x[:8], "y": y[:8]}), "x", "y", law="t")
    assert ex.status == "ok" and ex.x_heldout == 1e7 and ex.n_train == 8 and ex.n_heldout == 2
    assert ex.predicted == pytest.approx(small.a * 7 + small.b)
    assert ex.observed == pytest.approx(y[8:].mean())
    assert ex.error == pytest.approx(ex.predicted - ex.observed)
    assert ex.covered and ex.pred_lo < ex.predicted < ex.pred_hi


def test_extrapolation_flags_a_saturating_top_budget() -> None:
    x = np.repeat([1e3, 1e4, 1e5, 1e6, 1e7], 2)
    y = 0.1 * np.log10(x) + 1.0 + np.tile([0.002, -0.002], 5)
    y[-2:] -= 0.2  # gains stop at the largest budget
    ex = extrapolate_largest(x, y, law="tokens")
    assert ex.error == pytest.approx(0.2, abs=0.01) and not ex.covered


def test_extrapolation_needs_three_smaller_budgets() -> None:
    ex = extrapolate_largest([1.0, 10.0, 100.0], [1.0, 1.1, 1.2], law="tokens")
    assert ex.status.startswith("not enough points") and not ex.covered
    assert ex.to_dict()["predicted"] is None
    assert extrapolate_largest([], [], law="tokens").status == "no trials"


def test_leave_one_out_equals_refitting_without_each_trial() -> None:
    rng = np.random.default_rng(4)
    x = np.repeat([1e3, 1e4, 1e5, 1e6], 3)
    y = 0.1 * np.log10(x) + 1.0 + rng.normal(0, 0.02, x.size)
    loo = leave_one_out(x, y)
    errors = []
    for i in range(x.size):
        keep = np.arange(x.size) != i
        m = sm.OLS(y[keep], sm.add_constant(np.log10(x[keep]))).fit()
        errors.append(y[i] - (m.params[0] + m.params[1] * np.log10(x[i])))
    errs = np.asarray(errors)
    assert loo.status == "ok" and loo.n == 12
    assert loo.rmse == pytest.approx(np.sqrt(np.mean(errs**2)))
    assert loo.mae == pytest.approx(np.mean(np.abs(errs)))
    assert loo.max_abs == pytest.approx(np.max(np.abs(errs)))
    assert leave_one_out([1.0, 10.0], [1.0, 2.0]).status.startswith("not enough points")
