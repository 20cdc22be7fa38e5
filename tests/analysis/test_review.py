"""review_law: the fit with every check, and the trials it left out, counted."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis.review import review_law


def _table() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for i, x in enumerate(np.repeat([1e4, 3e4, 1e5, 3e5, 1e6], 2)):
        y = 0.1 * math.log10(x) + 0.8 + rng.normal(0, 0.01)
        rows.append({"trial_key": f"k{i}", "state": "completed", "x": x, "y": y})
    rows += [
        {"trial_key": "base", "state": "completed", "x": 0.0, "y": 1.1},
        {"trial_key": "nan", "state": "completed", "x": 1e5, "y": math.nan},
        {"trial_key": "inf", "state": "completed", "x": 1e5, "y": math.inf},
        {"trial_key": "fail", "state": "failed", "x": 1e6, "y": math.nan},
        {"trial_key": "run", "state": "running", "x": 1e6, "y": math.nan},
    ]
    return pd.DataFrame(rows)


def test_counts_exclusions_and_runs_every_check() -> None:
    rv = review_law(_table(), "x", "y", law="tokens", n_resamples=1000)
    c = rv.counts
    assert (c.total, c.used, c.not_completed, c.nan, c.nonpositive_x) == (15, 10, 2, 2, 1)
    assert c.text() == (
        "10 of 15 trials fitted; left out: 2 not completed (failed or unfinished), "
        "2 with NaN/inf values, 1 at x <= 0 (baseline)"
    )
    assert rv.fit.ok and rv.fit.n == 10 and rv.fit.cov_type == "HC3"
    assert rv.bootstrap.n_resamples == 1000 and rv.bootstrap.a_ci[0] < 0.1 < rv.bootstrap.a_ci[1]
    assert rv.extrapolation.status == "ok" and rv.loo.status == "ok"
    assert rv.saturating.status in ("ok",) or rv.saturating.status.startswith("no convergence")
    assert rv.paper is not None and rv.paper.slope_ratio == pytest.approx(rv.fit.a / 0.08)
    json.dumps(rv.details(), allow_nan=False)  # JSON-safe for the results store


def test_fewer_than_three_distinct_x_gives_not_enough_points_everywhere() -> None:
    t = _table()
    t = t[t["x"].isin([0.0, 1e4, 3e4])]
    rv = review_law(t, "x", "y", law="tokens")
    assert not rv.fit.ok and "not enough points" in rv.fit.status
    assert rv.bootstrap.n_valid == 0 and math.isnan(rv.bootstrap.a_ci[0])
    assert rv.extrapolation.status.startswith("not enough points")
    assert rv.loo.status.startswith("not enough points")
    assert not rv.saturating.ok and rv.forms.preferred == "n/a"
    assert rv.paper is not None and not rv.paper.ci_covers_paper
    json.dumps(rv.details(), allow_nan=False)


def test_empty_and_missing_columns() -> None:
    rv = review_law(pd.DataFrame({"x": [], "y": [], "state": []}), "x", "y", law="tokens")
    assert rv.counts.total == 0 and not rv.fit.ok
    with pytest.raises(ValueError, match="column 'y' is not in the table"):
        review_law(pd.DataFrame({"x": [1.0]}), "x", "y", law="tokens")


def _constant_table(value: float = 1.5) -> pd.DataFrame:
    xs = np.repeat([1e4, 3e4, 1e5, 3e5, 1e6], 2)
    return pd.DataFrame({"x": xs, "y": [value] * xs.size, "state": "completed"})


@pytest.mark.parametrize("value", [1.5, 1.0, 0.0])
def test_a_constant_response_gives_no_verdict(value: float) -> None:
    """Every y equal: slope, R², AIC and the paper's ratio are undefined (NaN, "n/a", None),
    not a ~1e-16 slope, a ~1e-14 ratio to the paper and an AIC "winner"."""
    rv = review_law(_constant_table(value), "x", "y", law="tokens", n_resamples=200)
    assert not rv.fit.ok and rv.fit.status.startswith("no variation: every y is")
    assert math.isnan(rv.fit.a) and math.isnan(rv.fit.r2) and rv.fit.n == 10
    assert rv.counts.used == 10 and rv.bootstrap.n_valid == 0
    assert not rv.saturating.ok and rv.saturating.status.startswith("no variation")
    assert rv.forms.preferred == "n/a" and math.isnan(rv.forms.delta)
    assert rv.loo.status.startswith("no variation") and math.isnan(rv.loo.rmse)
    assert rv.extrapolation.status.startswith("no variation") and rv.extrapolation.covered is None
    assert rv.paper is not None and math.isnan(rv.paper.slope_ratio)
    assert rv.paper.ci_covers_paper is None and rv.paper.boot_covers_paper is None
    details = rv.details()
    json.dumps(details, allow_nan=False)
    assert details["forms"]["delta"] is None and details["paper"]["slope_ratio"] is None
    assert details["paper"]["ci_covers_paper"] is None


def test_a_response_that_varies_a_little_is_still_fitted() -> None:
    t = _constant_table()
    t.loc[t.index[-1], "y"] = 1.5 + 1e-6
    rv = review_law(t, "x", "y", law="tokens", n_resamples=200)
    assert rv.fit.ok and rv.paper is not None and rv.paper.ci_covers_paper is not None


def test_a_constant_response_stays_a_fit_where_a_flat_line_is_an_answer() -> None:
    from analysis.laws import constant_response, fit_log_linear

    assert constant_response([2.0, 2.0, 2.0 + 1e-15]) and not constant_response([2.0, 2.001])
    fit = fit_log_linear(_constant_table(), "x", "y", law="k_opt")  # default: allowed
    assert fit.ok and fit.a == pytest.approx(0.0, abs=1e-12)
