"""Tests of the log-linear law fit (Scylla, arXiv 2505.07858, Thm 1.1-1.3)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

from analysis.laws import baseline_summary, fit_log_linear
from analysis.paper import PAPER_CONSTANTS

PAPER_BUDGETS_B = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
"""Scylla Thm 1.1 pretraining budgets, billions of tokens"""


def _frame(xs: list[float], ys: list[float], x: str = "pretrain.tokens") -> pd.DataFrame:
    return pd.DataFrame({x: xs, "acceptance_length": ys})


def test_exact_log_linear_data_recovers_a_and_b() -> None:
    xs = [1e6, 3e6, 1e7, 3e7, 1e8]
    ys = [0.3 * math.log10(v) + 1.2 for v in xs]
    fit = fit_log_linear(_frame(xs, ys), "pretrain.tokens", "acceptance_length", law="tokens")
    assert fit.status == "ok"
    assert fit.a == pytest.approx(0.3, abs=1e-9)
    assert fit.b == pytest.approx(1.2, abs=1e-8)
    assert fit.r2 == pytest.approx(1.0)
    assert fit.n == 5 and fit.excluded == 0
    assert fit.form == "acceptance_length = a*log10(pretrain.tokens) + b"
    assert max(abs(r) for r in fit.residuals) < 1e-9


def test_paper_thm_1_1_constants_round_trip() -> None:
    paper = PAPER_CONSTANTS["tokens"]
    ys = [paper["a"] * math.log10(t) + paper["b"] for t in PAPER_BUDGETS_B]
    fit = fit_log_linear(
        _frame(PAPER_BUDGETS_B, ys), "pretrain.tokens", "acceptance_length", law="tokens"
    )
    assert fit.a == pytest.approx(0.08, abs=1e-9)
    assert fit.b == pytest.approx(5.05, abs=1e-9)
    # Endpoints as the law gives them with T in billions: 1B -> 5.05, 100B -> 5.21.
    ends = fit.predict([1.0, 100.0])["mean"].tolist()
    assert ends == pytest.approx([5.05, 5.21], abs=1e-9)
    # Raw token counts keep the slope and move the intercept by 9*a.
    raw = fit_log_linear(
        _frame([t * 1e9 for t in PAPER_BUDGETS_B], ys),
        "pretrain.tokens",
        "acceptance_length",
        law="tokens",
    )
    assert raw.a == pytest.approx(0.08, abs=1e-9)
    assert raw.b == pytest.approx(5.05 - 9 * 0.08, abs=1e-8)


def test_log2_batch_law() -> None:
    batches = [1, 2, 4, 8, 16, 32, 64]
    ys = [286.79 * math.log2(b) + 7.54 for b in batches]
    df = pd.DataFrame({"batch_size": batches, "tokens_per_s": ys})
    fit = fit_log_linear(df, "batch_size", "tokens_per_s", law="batch", log_base=2)
    assert fit.a == pytest.approx(286.79, rel=1e-9)
    assert fit.b == pytest.approx(7.54, abs=1e-6)
    assert fit.form == "tokens_per_s = a*log2(batch_size) + b"


def test_noisy_fit_cis_contain_truth_and_match_statsmodels() -> None:
    rng = np.random.default_rng(1234)
    xs = np.repeat([1e5, 1e6, 1e7, 1e8, 1e9], 4)
    ys = 0.5 * np.log10(xs) + 2.0 + rng.normal(0, 0.05, size=xs.size)
    fit = fit_log_linear(
        _frame(xs.tolist(), ys.tolist()), "pretrain.tokens", "acceptance_length", law="t"
    )
    assert fit.a_ci[0] < 0.5 < fit.a_ci[1]
    assert fit.b_ci[0] < 2.0 < fit.b_ci[1]
    assert 0.9 < fit.r2 < 1.0
    ref = sm.OLS(ys, sm.add_constant(np.log10(xs))).fit(cov_type="HC3", use_t=True)
    assert fit.cov_type == "HC3"
    assert fit.r2 == pytest.approx(ref.rsquared)
    assert fit.r2_adj == pytest.approx(ref.rsquared_adj)
    assert fit.a_ci == pytest.approx(tuple(ref.conf_int()[1]))
    assert fit.b_ci == pytest.approx(tuple(ref.conf_int()[0]))
    assert fit.a_se == pytest.approx(ref.bse[1])
    classic = sm.OLS(ys, sm.add_constant(np.log10(xs))).fit()
    assert fit.a_se != pytest.approx(classic.bse[1], rel=1e-6)  # robust, not the classical SE


def test_hc3_widens_the_ci_under_heteroskedastic_noise() -> None:
    rng = np.random.default_rng(3)
    xs = np.repeat([1e3, 1e4, 1e5, 1e6, 1e7], 6)
    noise = rng.normal(0, 1, size=xs.size) * np.where(xs >= 1e6, 0.3, 0.01)
    ys = 0.1 * np.log10(xs) + 1.0 + noise
    fit = fit_log_linear(_frame(xs.tolist(), ys.tolist()), "pretrain.tokens", "acceptance_length",
                         law="t")  # fmt: skip
    classic = sm.OLS(ys, sm.add_constant(np.log10(xs))).fit()
    assert fit.a_se > 1.2 * classic.bse[1]


def test_fewer_than_three_distinct_x_is_a_status_not_an_error() -> None:
    fit = fit_log_linear(
        _frame([1e6, 1e6, 1e7, 1e7], [1.0, 1.1, 1.2, 1.3]),
        "pretrain.tokens",
        "acceptance_length",
        law="t",
    )
    assert fit.status == "not enough points: need >= 3 distinct x values, got 2"
    assert not fit.ok
    assert math.isnan(fit.a) and math.isnan(fit.b) and math.isnan(fit.r2)
    assert fit.n == 4
    assert fit.predict([1e6])["mean"].isna().all()
    d = fit.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["a"] is None and d["a_ci"] == [None, None]


def test_empty_frame_is_not_ok() -> None:
    fit = fit_log_linear(_frame([], []), "pretrain.tokens", "acceptance_length", law="t")
    assert fit.status.endswith("got 0") and fit.n == 0


def test_bad_rows_are_excluded_and_counted() -> None:
    xs = [0.0, -1.0, 1e6, 1e7, 1e8, float("nan"), 1e9, 1e9]
    ys = [1.0, 1.0, 1.6, 1.9, 2.2, 3.0, float("nan"), float("inf")]
    fit = fit_log_linear(_frame(xs, ys), "pretrain.tokens", "acceptance_length", law="t")
    assert fit.excluded == 5
    assert fit.n == 3
    assert fit.x == (1e6, 1e7, 1e8)
    assert fit.a == pytest.approx(0.3)


def test_missing_column_and_bad_base_raise_value_error() -> None:
    df = _frame([1, 2, 3], [1, 2, 3])
    with pytest.raises(ValueError, match="not in the table"):
        fit_log_linear(df, "draft.layers", "acceptance_length", law="layers")
    with pytest.raises(ValueError, match="Use 10 or 2"):
        fit_log_linear(df, "pretrain.tokens", "acceptance_length", law="t", log_base=3)


def test_predict_band_contains_mean_and_matches_statsmodels() -> None:
    rng = np.random.default_rng(7)
    xs = np.repeat([1.0, 2.0, 5.0, 10.0], 3)
    ys = 0.74 * np.log10(xs) + 4.61 + rng.normal(0, 0.1, size=xs.size)
    fit = fit_log_linear(
        pd.DataFrame({"draft.layers": xs, "acceptance_length": ys}),
        "draft.layers",
        "acceptance_length",
        law="layers",
    )
    grid = [1.0, 1.5, 3.0, 7.0, 10.0]
    band = fit.predict(grid)
    assert list(band.columns) == ["x", "mean", "mean_lo", "mean_hi", "obs_lo", "obs_hi"]
    assert (band["mean_lo"] < band["mean"]).all() and (band["mean"] < band["mean_hi"]).all()
    assert (band["obs_lo"] < band["mean_lo"]).all() and (band["mean_hi"] < band["obs_hi"]).all()
    ref = sm.OLS(ys, sm.add_constant(np.log10(xs))).fit(cov_type="HC3", use_t=True)
    frame = ref.get_prediction(sm.add_constant(np.log10(grid))).summary_frame(alpha=0.05)
    assert band["mean"].to_numpy() == pytest.approx(frame["mean"].to_numpy())
    assert band["mean_lo"].to_numpy() == pytest.approx(frame["mean_ci_lower"].to_numpy())
    assert band["mean_hi"].to_numpy() == pytest.approx(frame["mean_ci_upper"].to_numpy())
    assert band["obs_lo"].to_numpy() == pytest.approx(frame["obs_ci_lower"].to_numpy())
    assert band["obs_hi"].to_numpy() == pytest.approx(frame["obs_ci_upper"].to_numpy())
    assert fit.predict([0.0, -2.0])["mean"].isna().all()


def test_to_dict_is_json_safe() -> None:
    xs = [1.0, 2.0, 5.0, 10.0]
    fit = fit_log_linear(
        _frame(xs, [1.0, 1.5, 1.9, 2.4]), "pretrain.tokens", "acceptance_length", law="t"
    )
    d = json.loads(json.dumps(fit.to_dict(), allow_nan=False))
    assert d["status"] == "ok" and d["x"] == xs and len(d["cov"]) == 2


def test_baseline_summary_uses_x_zero_rows_only() -> None:
    df = _frame([0, 0, 0, 1e6, 0], [1.0, 1.2, float("nan"), 9.0, 1.4])
    base = baseline_summary(df, "pretrain.tokens", "acceptance_length")
    assert base["n"] == 3
    assert base["mean"] == pytest.approx(1.2)
    assert base["std"] == pytest.approx(0.2)
    none = baseline_summary(_frame([1.0], [1.0]), "pretrain.tokens", "acceptance_length")
    assert none["n"] == 0 and math.isnan(none["mean"])
    one = baseline_summary(_frame([0.0], [1.0]), "pretrain.tokens", "acceptance_length")
    assert one["n"] == 1 and math.isnan(one["std"])


# --- weighting by the per-trial measurement variance (issue 24, item 2) -----------------------

XS8 = [1e4, 3e4, 1e5, 3e5, 1e6, 3e6, 1e7, 3e7]


def test_the_default_fit_is_unweighted_and_equal_variances_change_nothing() -> None:
    ys = [
        0.1 * math.log10(x) + 1.0 + e
        for x, e in zip(XS8, [0.02, -0.03, 0.01, 0.04, -0.02, 0, 0.03, -0.01], strict=True)
    ]
    df = _frame(XS8, ys).assign(var=0.01)
    ols = fit_log_linear(df, "pretrain.tokens", "acceptance_length", law="t")
    wls = fit_log_linear(df, "pretrain.tokens", "acceptance_length", law="t", variance="var")
    assert ols.weights == "none" and wls.weights == "1/var"
    assert wls.a == pytest.approx(ols.a) and wls.a_ci == pytest.approx(ols.a_ci)
    assert wls.scale == pytest.approx(ols.scale) and wls.r2 == pytest.approx(ols.r2)


def test_a_weighted_fit_discounts_the_trials_measured_imprecisely() -> None:
    """Hand-built: the exact law at the precise trials, two imprecise ones far off it; a zero
    variance is raised to the smallest positive one and a NaN one drops its row."""
    ys = [0.1 * math.log10(x) + 1.0 for x in XS8]
    ys[1] += 0.5
    ys[6] -= 0.5
    var = [1e-4, 1.0, 1e-4, 0.0, 1e-4, 1e-4, 1.0, float("nan")]
    df = _frame(XS8, ys).assign(var=var)
    ols = fit_log_linear(df, "pretrain.tokens", "acceptance_length", law="t")
    wls = fit_log_linear(df, "pretrain.tokens", "acceptance_length", law="t", variance="var")
    assert wls.excluded == 1 and wls.n == 7
    assert abs(wls.a - 0.1) < 0.002 < abs(ols.a - 0.1)
    with pytest.raises(ValueError, match="not in the table"):
        fit_log_linear(df, "pretrain.tokens", "acceptance_length", law="t", variance="nope")


def test_weighting_pays_when_the_trials_variances_differ() -> None:
    """The synthetic check behind the option: 8 budgets x 2 seeds, measurement sd 0.02 or 0.2
    alternating (4 vs ~400 prompts), seed sd 0.01; 300 draws. WLS's slope error is smaller at
    equal cost (same trials)."""
    rng = np.random.default_rng(0)
    lx = np.log10(np.repeat(XS8, 2))
    sd = np.where(np.arange(lx.size) % 2, 0.2, 0.02)
    err = {"ols": [], "wls": []}
    for _ in range(300):
        y = 0.1 * lx + 1.0 + rng.normal(0, 0.01, lx.size) + rng.normal(0, sd)
        df = _frame(list(10**lx), list(y)).assign(var=sd**2 + 0.01**2)
        for kind, col in (("ols", None), ("wls", "var")):
            fit = fit_log_linear(df, "pretrain.tokens", "acceptance_length", law="t", variance=col)
            err[kind].append(fit.a - 0.1)
    rmse = {k: float(np.sqrt(np.mean(np.square(v)))) for k, v in err.items()}
    assert rmse["wls"] < 0.6 * rmse["ols"]


def test_ci_variance_inverts_a_normal_interval() -> None:
    from analysis.laws import ci_variance

    v = ci_variance([1.0, 2.0, float("nan")], [1.0 + 2 * 1.959964, 2.0, 3.0])
    assert v[0] == pytest.approx(1.0, rel=1e-6) and v[1] == 0.0 and math.isnan(v[2])
    with pytest.raises(ValueError, match="level"):
        ci_variance([1.0], [2.0], level=1.5)
