"""Acceptance length vs verified tokens k (analysis.tau_k): the choice between the Eq. 8 and
log2 forms on synthetic curves, recovered parameters, predict()'s shape and clipping, the
bootstrap weights and replicates, input validation and seeding."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.tau_k import R_GRID, fit_tau_k, resample_weights

R_TRUE = 0.2 ** (1 / 30)
"""r of Scylla App. E Eq. 8 with c = 1: tau(k) = -6.25*(0.2c)**(k/30) + 6 = 6 - 6.25*r**k"""


def _eq8_data(seed: int = 0, reps: int = 3, sd: float = 0.05) -> tuple[list[float], list[float]]:
    rng = np.random.default_rng(seed)
    k = np.repeat(np.arange(2, 65, dtype=float), reps)
    tau = -6.25 * 0.2 ** (k / 30) + 6 + rng.normal(0.0, sd, k.size)
    return k.tolist(), tau.tolist()


def _log2_data(a: float = 0.8, b: float = 1.2) -> tuple[list[float], list[float]]:
    k = np.repeat([2.0, 4.0, 8.0, 16.0, 32.0, 64.0], 2)
    return k.tolist(), (a * np.log2(k) + b).tolist()


def test_eq8_data_chooses_eq8_and_recovers_r() -> None:
    k, tau = _eq8_data()
    fit = fit_tau_k(k, tau, n_resamples=0)
    assert fit.chosen == "eq8"
    assert fit.aicc["eq8"] < fit.aicc["log2"]
    a_, b_, r = fit.params["eq8"][0]
    assert r == pytest.approx(R_TRUE, abs=0.003)
    assert a_ == pytest.approx(6.0, abs=0.15)
    assert b_ == pytest.approx(6.25, abs=0.25)
    assert fit.r2["eq8"] > 0.99


def test_log_linear_data_chooses_log2_and_recovers_a_b() -> None:
    k, tau = _log2_data(0.8, 1.2)
    fit = fit_tau_k(k, tau, n_resamples=0)
    assert fit.chosen == "log2"
    a, b = fit.params["log2"][0]
    assert a == pytest.approx(0.8, abs=1e-9)
    assert b == pytest.approx(1.2, abs=1e-9)
    assert fit.r2["log2"] == pytest.approx(1.0)


def test_fit_reports_n_and_distinct_k() -> None:
    k, tau = _log2_data()
    fit = fit_tau_k(k, tau, n_resamples=0)
    assert fit.n == 12
    assert fit.ks == (2.0, 4.0, 8.0, 16.0, 32.0, 64.0)


def test_summary_reports_the_choice_and_point_fits() -> None:
    fit = fit_tau_k(*_log2_data(0.8, 1.2), n_resamples=0)
    summary = fit.summary()
    assert summary["chosen"] == "log2"
    assert summary["forms"]["log2"]["params"] == pytest.approx({"a": 0.8, "b": 1.2})
    assert set(summary["forms"]["eq8"]["params"]) == {"A", "B", "r"}
    assert summary["ks"] == [2.0, 4.0, 8.0, 16.0, 32.0, 64.0]


def test_predict_has_one_row_per_replicate_and_one_column_per_k() -> None:
    k, tau = _eq8_data()
    fit = fit_tau_k(k, tau, n_resamples=40, seed=1)
    got = fit.predict([2.0, 8.0, 30.0, 100.0])
    assert got.shape == (41, 4)
    assert fit.predict([5.0], form="log2").shape == (41, 1)


def test_predict_clips_below_at_one() -> None:
    """Eq. 8 with c = 1 gives tau(2) = 0.39 < 1: predict() reports 1 token per cycle."""
    k, tau = _eq8_data()
    fit = fit_tau_k(k, tau, n_resamples=40, seed=1)
    got = fit.predict([1.0, 2.0, 3.0, 64.0])
    assert np.all(got[:, :3] == 1.0)
    assert np.all(got[:, 3] > 1.0)


def test_predict_clips_above_at_k() -> None:
    """tau = 0.8*log2(k) + 3 is 3.8 at k = 2: a cycle cannot accept more than k tokens."""
    k, tau = _log2_data(0.8, 3.0)
    fit = fit_tau_k(k, tau, n_resamples=20, seed=2)
    ks = np.array([2.0, 3.0, 16.0, 64.0])
    got = fit.predict(ks)
    assert np.all(got >= 1.0) and np.all(got <= ks[None, :])
    assert got[0, 0] == 2.0 and got[0, 1] == 3.0
    assert got[0, 2] == pytest.approx(0.8 * 4 + 3.0)


def test_row_zero_equals_the_fit_without_resamples() -> None:
    k, tau = _eq8_data(seed=3)
    boot = fit_tau_k(k, tau, n_resamples=30, seed=5)
    alone = fit_tau_k(k, tau, n_resamples=0)
    for form, p in (("eq8", 3), ("log2", 2)):
        assert alone.params[form].shape == (1, p)
        assert boot.params[form].shape == (31, p)
        np.testing.assert_allclose(boot.params[form][0], alone.params[form][0])
    assert boot.chosen == alone.chosen
    assert boot.aicc == pytest.approx(alone.aicc, rel=1e-12)


def test_log2_replicates_equal_refits_of_the_resampled_trials() -> None:
    k_list, tau_list = _eq8_data(seed=4, reps=1)
    fit = fit_tau_k(k_list, tau_list, n_resamples=25, seed=9)
    k, tau = np.array(k_list), np.array(tau_list)
    w = resample_weights(k.size, 25, 9)
    for row in range(1, 26):
        idx = np.repeat(np.arange(k.size), w[row].astype(int))
        slope, intercept = np.polyfit(np.log2(k[idx]), tau[idx], 1)
        np.testing.assert_allclose(fit.params["log2"][row], [slope, intercept], rtol=1e-8)


def test_eq8_replicates_take_r_from_the_grid() -> None:
    k, tau = _eq8_data(seed=6)
    fit = fit_tau_k(k, tau, n_resamples=20, seed=0)
    r = fit.params["eq8"][:, 2]
    assert np.all(np.isin(r, R_GRID))
    assert np.all(fit.params["eq8"][:, 1] >= 0)


def test_eq8_never_fits_an_acceptance_that_falls_with_k() -> None:
    """tau = 2 + 3*0.9**k falls with k: every r needs B < 0, so Eq. 8 has no fit (NaN, AICc
    inf) and log2 is chosen, rather than the exact falling Eq. 8 curve."""
    k = np.repeat(np.arange(2.0, 33.0), 2)
    fit = fit_tau_k(k.tolist(), (2 + 3 * 0.9**k).tolist(), n_resamples=10, seed=0)
    assert fit.params["log2"][0, 0] < 0
    assert np.all(np.isnan(fit.params["eq8"]))
    assert fit.aicc["eq8"] == math.inf
    assert fit.chosen == "log2"


@pytest.mark.parametrize(
    ("k", "tau", "match"),
    [
        ([2.0, 2.0, 4.0, 4.0], [1.5, 1.6, 2.0, 2.1], "2 distinct k"),
        ([2.0, 4.0, 8.0], [1.5, 2.0], "3 k values but 2"),
        ([2.0, 4.0, math.nan], [1.5, 2.0, 2.5], "finite"),
        ([2.0, 4.0, 8.0], [1.5, math.inf, 2.5], "finite"),
        ([0.5, 4.0, 8.0], [1.0, 2.0, 2.5], "k >= 1"),
    ],
    ids=["two-distinct-k", "mismatched-lengths", "nan-k", "inf-tau", "k-below-one"],
)
def test_fit_rejects_bad_input(k: list[float], tau: list[float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        fit_tau_k(k, tau, n_resamples=0)


def test_resample_weights_row_zero_is_ones_and_rows_sum_to_n() -> None:
    w = resample_weights(7, 50, seed=3)
    assert w.shape == (51, 7)
    np.testing.assert_array_equal(w[0], np.ones(7))
    np.testing.assert_array_equal(w.sum(axis=1), np.full(51, 7.0))
    assert np.all(w >= 0) and np.all(w == np.round(w))
    assert not np.all(w[1:] == 1.0)  # the replicates do resample


def test_resample_weights_without_replicates_is_the_data_alone() -> None:
    np.testing.assert_array_equal(resample_weights(4, 0, seed=0), np.ones((1, 4)))


def test_same_seed_gives_the_same_fit_and_another_seed_other_replicates() -> None:
    k, tau = _eq8_data(seed=7)
    a = fit_tau_k(k, tau, n_resamples=30, seed=11)
    b = fit_tau_k(k, tau, n_resamples=30, seed=11)
    c = fit_tau_k(k, tau, n_resamples=30, seed=12)
    for form in ("eq8", "log2"):
        np.testing.assert_array_equal(a.params[form], b.params[form])
        np.testing.assert_array_equal(a.params[form][0], c.params[form][0])
        assert not np.array_equal(a.params[form][1:], c.params[form][1:])
