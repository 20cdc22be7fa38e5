"""Tests of the token law's break-even crossing (analysis/break_even.py) against known truths:
data drawn from ``acceptance_length = 0.2*log10(T) + 0.5 + N(0, 0.03)`` over T = 2^13..2^17
with 2 seeds, so the law reaches tau* = 1.4 at T = 10^4.5."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis.break_even import STATUSES, batch_crossing, crossing_budget, end_to_end_break_even
from analysis.laws import LogLinearFit, fit_log_linear

A, B, NOISE = 0.2, 0.5, 0.03
BUDGETS = np.array([2.0**e for e in range(13, 18)] * 2)
"""T = 2^13..2^17 tokens, two seeds each"""
TAU_STAR = 1.4
TRUTH = 10**4.5
"""tokens where the true law is TAU_STAR: (1.4 - 0.5) / 0.2 = 4.5 decades"""


def _fit(ys: np.ndarray, xs: np.ndarray = BUDGETS, log_base: int = 10) -> LogLinearFit:
    df = pd.DataFrame({"pretrain.tokens": xs, "acceptance_length": ys})
    return fit_log_linear(df, "pretrain.tokens", "acceptance_length", law="tokens",
                          log_base=log_base)  # fmt: skip


def _law(rng: np.random.Generator, a: float = A, b: float = B) -> LogLinearFit:
    return _fit(a * np.log10(BUDGETS) + b + rng.normal(0.0, NOISE, BUDGETS.size))


def test_a_noisy_law_crosses_near_the_truth_and_its_interval_brackets_it() -> None:
    c = crossing_budget(_law(np.random.default_rng(3)), TAU_STAR)
    assert c.status == "ok" and c.region == "interval" and c.bounded and not c.extrapolated
    assert abs(c.log_budget - 4.5) < 0.15  # within 40% of 10^4.5 tokens
    assert c.budget == pytest.approx(10**c.log_budget)
    assert c.budget_lo < TRUTH < c.budget_hi and c.covers(TRUTH)
    assert (c.budget_lo, c.budget_hi) == pytest.approx((10**c.log_lo, 10**c.log_hi))
    assert c.budget_lo < c.budget < c.budget_hi
    assert c.measured == (2.0**13, 2.0**17)
    assert not c.covers(c.budget_lo * 0.9) and not c.covers(c.budget_hi * 1.1)


def test_the_interval_ends_are_where_the_mean_lines_band_meets_tau_star() -> None:
    """Fieller's set is the inverse of the mean's confidence band (LogLinearFit.predict, the
    same HC3 covariance and t): the band's upper edge meets tau* at the lower budget, its lower
    edge at the upper one. A swapped Var(a)/Var(b) or a z for the t would miss both."""
    fit = _law(np.random.default_rng(11))
    c = crossing_budget(fit, TAU_STAR)
    band = fit.predict([c.budget_lo, c.budget, c.budget_hi])
    assert band["mean_hi"][0] == pytest.approx(TAU_STAR, abs=1e-9)
    assert band["mean"][1] == pytest.approx(TAU_STAR, abs=1e-9)
    assert band["mean_lo"][2] == pytest.approx(TAU_STAR, abs=1e-9)


def test_the_interval_covers_the_true_budget_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(2026)
    crossings = [crossing_budget(_law(rng), TAU_STAR) for _ in range(200)]
    coverage = np.mean([c.covers(TRUTH) for c in crossings])
    assert 0.90 <= coverage <= 0.99, coverage
    at_99 = np.mean([crossing_budget(_law(rng), TAU_STAR, alpha=0.01).covers(TRUTH)
                     for _ in range(200)])  # fmt: skip
    assert at_99 >= 0.96, at_99


def test_a_flat_law_supports_no_budget() -> None:
    rng = np.random.default_rng(5)
    flat = [crossing_budget(_law(rng, a=0.0, b=1.2), TAU_STAR) for _ in range(100)]
    unbounded = [c for c in flat if c.status == "unbounded"]
    assert len(unbounded) >= 90  # the slope's t-test at 5% keeps about 95 of 100
    for c in unbounded:
        assert not c.bounded and c.quadratic[0] <= 0
        assert (c.budget_lo, c.budget_hi) == (0.0, math.inf)
        assert c.note.startswith("the slope is not resolved from 0")
    constant = crossing_budget(_fit(np.full(BUDGETS.size, 1.2)), TAU_STAR)
    assert constant.status == "unbounded" and not constant.covers(TRUTH)


def test_tau_star_below_the_band_at_the_smallest_budget_is_already() -> None:
    fit = _law(np.random.default_rng(3))
    low = crossing_budget(fit, 1.0)  # the law is ~1.28 at 2^13 tokens
    assert low.status == "already" and low.extrapolated
    assert low.budget_hi < 2.0**13 and low.budget < 2.0**13
    assert low.note.startswith("tau* is below")
    edge = crossing_budget(fit, fit.a * math.log10(2.0**13) + fit.b - 0.01)
    assert edge.status == "ok" and edge.extrapolated  # below the line, inside the band
    assert edge.budget < 2.0**13 < edge.budget_hi


def test_a_nearly_noiseless_law_crosses_exactly_where_the_formula_says() -> None:
    rng = np.random.default_rng(0)
    fit = _fit(A * np.log10(BUDGETS) + B + rng.normal(0.0, 1e-9, BUDGETS.size))
    c = crossing_budget(fit, TAU_STAR)
    assert c.budget == pytest.approx(TRUTH, rel=1e-6)
    assert c.log_hi - c.log_lo < 1e-6 and c.status == "ok"
    beyond = crossing_budget(fit, 2.0)  # (2.0 - 0.5) / 0.2 = 7.5 decades
    assert beyond.budget == pytest.approx(10**7.5, rel=1e-6) and beyond.extrapolated
    base2 = _fit(0.3 * np.log2(BUDGETS) + 0.1 + rng.normal(0.0, 1e-9, BUDGETS.size), log_base=2)
    assert crossing_budget(base2, 0.3 * 15 + 0.1).budget == pytest.approx(2.0**15, rel=1e-6)


def test_a_law_that_falls_with_training_is_decreasing() -> None:
    c = crossing_budget(_law(np.random.default_rng(1), a=-0.2, b=2.3), TAU_STAR)
    assert c.status == "decreasing" and c.bounded
    assert c.budget == pytest.approx(TRUTH, rel=0.5)


def test_no_fit_and_no_break_even_say_so() -> None:
    two = _fit(np.array([1.0, 1.2]), xs=np.array([1e4, 1e5]))
    c = crossing_budget(two, TAU_STAR)
    assert c.status == "no fit" and "not enough points" in c.note and math.isnan(c.budget)
    assert not c.covers(TRUTH)
    nan = crossing_budget(_law(np.random.default_rng(3)), math.nan)
    assert nan.status == "no break-even" and math.isnan(nan.budget_hi)
    assert {c.status, nan.status} <= set(STATUSES)
    with pytest.raises(ValueError, match="alpha"):
        crossing_budget(two, TAU_STAR, alpha=1.5)


def test_a_crossing_is_plain_json() -> None:
    c = crossing_budget(_law(np.random.default_rng(5), a=0.0, b=1.2), TAU_STAR)
    data = json.loads(json.dumps(c.to_dict()))
    assert data["status"] == c.status and data["tau_star"] == TAU_STAR


def test_end_to_end_break_even_is_acceptance_over_speedup() -> None:
    assert end_to_end_break_even(2.0, 1.25) == pytest.approx(1.6)
    assert end_to_end_break_even(1.5, 0.5) == pytest.approx(3.0)  # slower than plain decoding
    for tau, speedup in [(math.nan, 1.0), (2.0, math.nan), (2.0, 0.0), (2.0, -1.0),
                         (0.0, 1.0), (2.0, math.inf)]:  # fmt: skip
        assert math.isnan(end_to_end_break_even(tau, speedup)), (tau, speedup)
    assert math.isnan(end_to_end_break_even(None, 1.0))  # type: ignore[arg-type]


def _speedups(values: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"batch_size": [1, 2, 4, 8, 16, 32][: len(values)], "speedup": values})


def test_batch_crossing_finds_where_a_falling_speedup_crosses_one() -> None:
    """speedup = -0.25*log2(b) + 1.5 (+ small noise) crosses 1 at b* = 4."""
    noise = [0.01, -0.012, 0.008, -0.01, 0.012, -0.008]
    values = [
        1.5 - 0.25 * math.log2(b) + e for b, e in zip([1, 2, 4, 8, 16, 32], noise, strict=True)
    ]
    fit, c = batch_crossing(_speedups(values))
    assert fit.law == "speedup" and fit.log_base == 2 and fit.a < 0
    assert c.status == "decreasing" and not c.extrapolated
    assert c.budget == pytest.approx(4.0, rel=0.1) and c.budget_lo < 4.0 < c.budget_hi
    assert c.covers(4.0) and not c.covers(32.0)


def test_batch_crossing_below_every_measured_b_is_extrapolated() -> None:
    """A speedup below 1 at every b (SmolLM2 in this engine): b* lies below b = 1."""
    fit, c = batch_crossing(_speedups([0.9, 0.8, 0.62, 0.5, 0.41, 0.3]))
    assert c.status == "decreasing" and c.extrapolated and c.budget < 1.0


def test_batch_crossing_of_a_flat_speedup_supports_none() -> None:
    _, c = batch_crossing(_speedups([1.01, 0.97, 1.02, 0.99, 1.0, 0.98]))
    assert c.status == "unbounded"
    _, few = batch_crossing(_speedups([1.2, 0.9]))
    assert few.status == "no fit"


def test_a_measured_tau_star_widens_the_set_by_its_variance() -> None:
    """With tau*'s standard error s, the set's ends are where the mean line's half-width
    sqrt(band^2 + t^2 s^2) meets tau*; s = 0 gives the exact-tau* set; a negative variance is
    refused. Coverage: tau* drawn with that error around the truth, the widened set holds the
    true budget about 95% of the time, the exact-tau* one less often."""
    fit = _law(np.random.default_rng(11))
    exact = crossing_budget(fit, TAU_STAR)
    assert crossing_budget(fit, TAU_STAR, tau_star_var=0.0) == exact
    wide = crossing_budget(fit, TAU_STAR, tau_star_var=0.05**2)
    assert wide.tau_star_var == 0.05**2 and exact.tau_star_var == 0.0
    assert wide.budget == exact.budget
    assert wide.budget_lo < exact.budget_lo and wide.budget_hi > exact.budget_hi
    for end in (wide.budget_lo, wide.budget_hi):
        p = fit.predict([end])
        half = (p["mean_hi"][0] - p["mean"][0]) / wide.t
        gap = abs(p["mean"][0] - TAU_STAR)
        assert gap == pytest.approx(wide.t * math.sqrt(half**2 + 0.05**2), rel=1e-9)
    with pytest.raises(ValueError, match="tau_star_var"):
        crossing_budget(fit, TAU_STAR, tau_star_var=-1.0)
    rng = np.random.default_rng(7)
    se = 0.08
    hits = {"wide": 0, "exact": 0}
    for _ in range(200):
        law, tau = _law(rng), TAU_STAR + rng.normal(0.0, se)
        hits["wide"] += crossing_budget(law, tau, tau_star_var=se**2).covers(TRUTH)
        hits["exact"] += crossing_budget(law, tau).covers(TRUTH)
    assert 0.90 <= hits["wide"] / 200 <= 0.995, hits
    assert hits["exact"] < hits["wide"] - 20, hits
