"""Does the law transfer across targets: the one-fit slope difference and the pooled slope, on
tables with known slopes."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.laws import fit_log_linear
from analysis.transfer import factor_slope_difference, pooled_slope

X, Y = "pretrain.tokens", "acceptance_length"
BUDGETS = (1e3, 1e4, 1e5, 1e6, 1e7)


def _trials(slopes: dict[str, float], noise: float, seed: int, seeds: int = 3) -> pd.DataFrame:
    """Trials at every budget x ``seeds``: ``acceptance_length/<set>`` = 1 + slope[set] *
    log10(T) + N(0, noise), ``acceptance_length`` their mean; a baseline at T = 0 and a failed
    trial with absurd values, which every fit must leave out."""
    rng = np.random.default_rng(seed)
    rows = []
    for t in BUDGETS:
        for s in range(seeds):
            per_set = {
                f"{Y}/{name}": 1 + a * math.log10(t) + noise * rng.standard_normal()
                for name, a in slopes.items()
            }
            rows.append({X: t, "seed": s, "state": "completed", **per_set,
                         Y: float(np.mean(list(per_set.values())))})  # fmt: skip
    sets = {f"{Y}/{name}": 1.0 for name in slopes}
    rows.append({X: 0, "seed": 0, "state": "completed", **sets, Y: 1.0})
    bad = {f"{Y}/{name}": 99.0 for name in slopes}
    rows.append({X: 1e7, "seed": 9, "state": "failed", **bad, Y: 99.0})
    return pd.DataFrame(rows)


def test_equal_slopes_give_an_interval_that_holds_zero() -> None:
    a = _trials({"all": 0.2}, 0.02, seed=0)
    b = _trials({"all": 0.2}, 0.02, seed=1)
    d = factor_slope_difference(a, b, X, Y, labels=("smol", "gemma"))
    assert d.ok and d.labels == ("smol", "gemma") and d.n == (15, 15) and d.df == 26
    assert d.ci[0] < 0 < d.ci[1] and not d.excludes_zero and d.p > 0.05
    assert d.slopes == pytest.approx((0.2, 0.2), abs=0.02)


def test_the_interval_covers_the_true_difference_about_95_percent_of_the_time() -> None:
    """Calibration over 300 replicate pairs (true difference 0.1, heteroskedastic B): a wrong
    standard error (say a factor 2) would put the coverage near 68% or 100%."""
    covered = 0
    for rep in range(300):
        a = _trials({"all": 0.2}, 0.02, seed=2 * rep, seeds=2)
        b = _trials({"all": 0.3}, 0.05, seed=2 * rep + 1, seeds=2)
        d = factor_slope_difference(a, b, X, Y)
        covered += d.ci[0] <= 0.1 <= d.ci[1]
    assert 0.91 <= covered / 300 <= 0.99, covered


def test_slopes_point_one_and_point_three_differ_by_point_two() -> None:
    a = _trials({"all": 0.10}, 0.01, seed=3)
    b = _trials({"all": 0.30}, 0.01, seed=4)
    d = factor_slope_difference(a, b, X, Y)
    assert d.ok and d.excludes_zero and d.ci[0] > 0 and d.p < 1e-6
    assert d.diff == pytest.approx(0.20, abs=0.01)
    assert d.slopes == pytest.approx((0.10, 0.30), abs=0.01)
    for (lo, hi), true in zip(d.slope_cis, (0.10, 0.30), strict=True):
        assert lo < true < hi and hi - lo < 0.02


def test_one_fit_agrees_with_two_separate_fits_but_pools_the_residual_df() -> None:
    """The full interaction reproduces each group's own line: the difference of the separate
    HC3 fits, variance var_A + var_B; only the t degrees of freedom differ (n - 4)."""
    a = _trials({"all": 0.10}, 0.02, seed=5)
    b = _trials({"all": 0.25}, 0.06, seed=6, seeds=2)
    d = factor_slope_difference(a, b, X, Y)
    done = [t[t["state"] == "completed"] for t in (a, b)]
    fa, fb = (fit_log_linear(t, X, Y, law="tokens") for t in done)
    assert d.diff == pytest.approx(fb.a - fa.a, rel=1e-9)
    assert d.slopes == pytest.approx((fa.a, fb.a), rel=1e-9)
    se = math.sqrt(fa.a_se**2 + fb.a_se**2)
    half = float(stats.t.ppf(0.975, 15 + 10 - 4)) * se
    assert d.ci == pytest.approx((d.diff - half, d.diff + half), rel=1e-9)
    assert d.df == 21 and d.n == (15, 10)


def test_a_group_with_too_few_budgets_has_no_fit_and_mistakes_raise() -> None:
    a = _trials({"all": 0.1}, 0.01, seed=7)
    b = a[a[X].isin([0, 1e3, 1e4])]
    d = factor_slope_difference(a, b, X, Y, labels=("smol", "gemma"))
    assert not d.ok and "gemma needs >= 3 distinct" in d.status and "got 2" in d.status
    assert math.isnan(d.diff) and math.isnan(d.ci[0]) and not d.excludes_zero
    exact = a.assign(**{Y: 1 + 0.1 * np.log10(a[X].clip(lower=1))})
    e = factor_slope_difference(exact, exact.assign(**{Y: exact[Y] * 2}), X, Y)
    assert e.status.startswith("exact fit") and e.diff == pytest.approx(0.1)
    assert math.isnan(e.ci[0]) and not e.excludes_zero
    with pytest.raises(ValueError, match="are equal"):
        factor_slope_difference(a, a, X, Y, labels=("x", "x"))
    with pytest.raises(ValueError, match="lacks columns"):
        factor_slope_difference(a, a.drop(columns=[Y]), X, Y)


def _dersimonian_laird(y: np.ndarray, v: np.ndarray) -> tuple[float, float, float, float]:
    """(mu, lo, hi, tau²) by the textbook formulas (Borenstein et al. 2009, ch. 12)."""
    w = 1 / v
    fixed = np.sum(w * y) / np.sum(w)
    q = np.sum(w * (y - fixed) ** 2)
    c = np.sum(w) - np.sum(w**2) / np.sum(w)
    tau2 = max(0.0, (q - (len(y) - 1)) / c)
    ws = 1 / (v + tau2)
    mu = np.sum(ws * y) / np.sum(ws)
    half = 1.959963984540054 / math.sqrt(np.sum(ws))
    return float(mu), float(mu - half), float(mu + half), float(tau2)


def test_heterogeneous_per_set_slopes_give_tau2_and_a_high_i2() -> None:
    tables = {
        "smol": _trials({"humaneval": 0.05, "sharegpt": 0.20}, 0.01, seed=8),
        "gemma": _trials({"humaneval": 0.35, "sharegpt": 0.50}, 0.01, seed=9),
    }
    cols = [f"{Y}/humaneval", f"{Y}/sharegpt", f"{Y}/missing"]
    p = pooled_slope(tables, X, cols)
    assert p.ok and p.k == 4 and [(s.group, s.y) for s in p.studies] == [
        ("smol", f"{Y}/humaneval"), ("smol", f"{Y}/sharegpt"),
        ("gemma", f"{Y}/humaneval"), ("gemma", f"{Y}/sharegpt"),
    ]  # fmt: skip
    assert [s.slope for s in p.studies] == pytest.approx([0.05, 0.20, 0.35, 0.50], abs=0.01)
    assert all(s.n == 15 and s.se > 0 for s in p.studies)
    assert p.tau2 > 0.01 and p.i2 > 0.95 and p.q_p < 1e-6
    assert p.estimate == pytest.approx(0.275, abs=0.02) and p.ci[0] < 0.1 and p.ci[1] > 0.45
    slopes = np.array([s.slope for s in p.studies])
    var = np.array([s.se**2 for s in p.studies])
    assert (p.estimate, *p.ci, p.tau2) == pytest.approx(_dersimonian_laird(slopes, var))


def test_homogeneous_slopes_give_an_i2_near_zero() -> None:
    """One true slope for every (target, set): over 150 replicates I² is mostly 0, Q averages
    its df (3) and rejects about 5% of the time, tau² stays tiny and the interval covers the
    slope about 95% of the time. A wrong standard error would inflate or shrink Q."""
    cols = [f"{Y}/humaneval", f"{Y}/sharegpt"]
    reps = [
        pooled_slope(
            {
                "smol": _trials({"humaneval": 0.2, "sharegpt": 0.2}, 0.02, seed=2 * r),
                "gemma": _trials({"humaneval": 0.2, "sharegpt": 0.2}, 0.02, seed=2 * r + 1),
            },
            X,
            cols,
        )
        for r in range(150)
    ]
    assert all(p.ok and p.k == 4 and p.tau2 >= 0 and 0 <= p.i2 < 1 for p in reps)
    i2 = np.array([p.i2 for p in reps])
    assert float(np.median(i2)) == 0.0 and np.mean(i2 < 0.25) > 0.6
    assert 2.4 < np.mean([p.q for p in reps]) < 3.6
    assert 0.01 <= np.mean([p.q_p < 0.05 for p in reps]) <= 0.10
    assert max(p.tau2 for p in reps) < 1e-4
    assert 0.90 <= np.mean([p.ci[0] <= 0.2 <= p.ci[1] for p in reps]) <= 0.99
    first = reps[0]
    slopes = np.array([s.slope for s in first.studies])
    var = np.array([s.se**2 for s in first.studies])
    assert (first.estimate, *first.ci, first.tau2) == pytest.approx(_dersimonian_laird(slopes, var))


def test_identical_slopes_truncate_tau2_at_zero() -> None:
    """Q = 0 < df: statsmodels' raw DerSimonian-Laird tau² is negative; ours is 0 and the
    estimate is the (common) slope."""
    t = _trials({"humaneval": 0.2}, 0.02, seed=12)
    p = pooled_slope({"a": t, "b": t.copy(), "c": t.copy()}, X, [f"{Y}/humaneval"])
    assert p.ok and p.k == 3 and p.tau2 == 0.0 and p.i2 == 0.0
    assert p.q == pytest.approx(0.0, abs=1e-12)
    assert p.estimate == pytest.approx(p.studies[0].slope)
    half = 1.959963984540054 * p.studies[0].se / math.sqrt(3)
    assert p.ci == pytest.approx((p.estimate - half, p.estimate + half))


def test_slopes_without_a_fit_are_listed_but_not_pooled() -> None:
    full = _trials({"humaneval": 0.2}, 0.02, seed=13)
    short = full[full[X] <= 1e4]
    p = pooled_slope({"a": full, "b": short}, X, [f"{Y}/humaneval"])
    assert not p.ok and p.k == 0 and "got 1" in p.status and math.isnan(p.estimate)
    assert p.studies[1].status.startswith("not enough points") and math.isnan(p.studies[1].se)
    with pytest.raises(ValueError, match="no table has the column"):
        pooled_slope({"a": full}, "draft.layers", [Y])
