"""The training-and-serving plan (analysis.plan): fit_law's OLS and validation; plan_training's
greedy rule (token ladder, min_gain / budget / cap stops, layers first when the depth law pays
more per hour), its errors and extrapolation labels; the coverage of its acceptance intervals
over repeated synthetic sweeps; and plan_serving's k per batch size against an independent
argmax of a toy roofline, its caps, labels, rescaling and mix speedup."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from analysis.laws import fit_log_linear
from analysis.plan import (
    MAX_LAYERS,
    TOKEN_DOUBLINGS,
    Law,
    ServingInputs,
    ServingPlan,
    TrainingPlan,
    fit_law,
    plan_serving,
    plan_training,
)
from analysis.tau_k import TauKFit, fit_tau_k

BUDGETS = [8192.0, 16384.0, 32768.0, 65536.0, 131072.0]
"""the token sweep's measured budgets (x 2 seeds below)"""
A_T, B_T = 0.137, 0.7
"""the token law of the synthetic sweeps"""
DEPTHS = [1.0, 2.0, 3.0, 4.0]


def _hours(t: float, d: int) -> float:
    """A linear cost model: 0.5 h fixed plus 1 h per 65,536 tokens per layer."""
    return 0.5 + t * d / 65536


def _token_law(n_resamples: int = 20, seed: int = 0) -> Law:
    x = BUDGETS * 2
    y = [A_T * math.log10(v) + B_T for v in x]
    return fit_law("tokens", x, y, sweep="tok", n_resamples=n_resamples, seed=seed)


def _depth_law(a_d: float, n_resamples: int = 20) -> Law:
    x = DEPTHS * 2
    y = [a_d * math.log10(v) + 1.0 for v in x]
    return fit_law("layers", x, y, sweep="dep", n_resamples=n_resamples, seed=1)


def _no_ci(t: float) -> tuple[float, float]:
    return (0.0, 10.0)


def _plan(
    min_gain: float, budget: float | None = None, depth: Law | None = None
) -> tuple[Law, TrainingPlan]:
    law = _token_law()
    plan = plan_training(
        law, depth, d0=1, hours=_hours, budget_hours=budget, min_gain=min_gain, mean_ci=_no_ci
    )
    return law, plan


def _ladder_stop(a: float, t0: float, hours: Callable[[float, int], float], m: float) -> float:
    """The rule by hand for tokens alone: double while a*log10(2) per added hour >= m."""
    t = t0
    while a * math.log10(2) / (hours(2 * t, 1) - hours(t, 1)) >= m:
        t *= 2
    return t


# --- fit_law -------------------------------------------------------------------------------


def test_fit_law_row_zero_is_the_ols_fit() -> None:
    rng = np.random.default_rng(0)
    x = np.array(BUDGETS * 2)
    y = A_T * np.log10(x) + B_T + rng.normal(0, 0.03, x.size)
    law = fit_law("tokens", x.tolist(), y.tolist(), sweep="tok", n_resamples=50, seed=3)
    assert law.coef.shape == (51, 2)
    slope, intercept = np.polyfit(np.log10(x), y, 1)
    assert (law.a, law.b) == pytest.approx((slope, intercept), rel=1e-9)
    assert law.x_max == 131072.0
    assert law.at(1e6)[0] == pytest.approx(slope * 6 + intercept)


@pytest.mark.parametrize(
    ("x", "match"),
    [([1e3, 1e3, 1e4, 1e4], "2 distinct x"), ([0.0, 1e3, 1e4], "x must be > 0")],
    ids=["two-distinct-x", "zero-x"],
)
def test_fit_law_rejects_bad_input(x: list[float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        fit_law("tokens", x, [1.0] * len(x), sweep="s", n_resamples=0, seed=0)


# --- plan_training: the greedy rule ----------------------------------------------------------


def test_tokens_follow_the_ladder_to_where_the_gain_per_hour_falls_below_min_gain() -> None:
    law, plan = _plan(min_gain=0.01)
    expected = _ladder_stop(A_T, BUDGETS[0], _hours, 0.01)
    assert expected == 524288.0  # 0.0103 per h at 262,144 tokens, 0.0052 at 524,288
    assert plan.tokens == expected and plan.layers == 1
    assert plan.stop == "min_gain"
    assert [m["tokens"] for m in plan.path] == [8192.0 * 2**j for j in range(1, 7)]
    assert all(m["gain_per_hour"] >= 0.01 for m in plan.path)
    assert plan.hours == pytest.approx(_hours(524288.0, 1))
    assert plan.acceptance_length == pytest.approx(A_T * math.log10(524288) + B_T)


def test_noise_free_replicates_give_a_zero_width_tokens_interval() -> None:
    _, plan = _plan(min_gain=0.01)
    assert plan.tokens_ci == (524288.0, 524288.0)
    assert plan.layers_ci == (1.0, 1.0)


def test_a_budget_below_the_min_gain_stop_stops_at_the_budget() -> None:
    _, plan = _plan(min_gain=0.01, budget=3.0)
    assert plan.stop == "budget"
    assert plan.tokens == 131072.0  # 2.5 h; 262,144 tokens would take 4.5 h
    assert plan.hours <= 3.0
    assert all(m["hours"] <= 3.0 for m in plan.path)


def test_no_min_gain_and_no_budget_runs_to_the_end_of_the_ladder() -> None:
    _, plan = _plan(min_gain=0.0)
    assert plan.stop == "cap"
    assert plan.tokens == BUDGETS[0] * 2**TOKEN_DOUBLINGS


def test_a_depth_law_that_pays_more_per_hour_adds_layers_first() -> None:
    """Adding a layer costs T/65,536 h like doubling T at D=1: a_D = 0.5 > a_T = 0.137 wins."""
    _, plan = _plan(min_gain=0.01, depth=_depth_law(0.5))
    assert plan.path[0]["tokens"] == BUDGETS[0] and plan.path[0]["layers"] == 2
    assert plan.layers > 1


def test_a_weak_depth_law_doubles_tokens_first() -> None:
    _, plan = _plan(min_gain=0.01, depth=_depth_law(0.05))
    assert plan.path[0]["tokens"] == 2 * BUDGETS[0] and plan.path[0]["layers"] == 1


def test_no_min_gain_with_a_depth_law_caps_at_max_layers() -> None:
    _, plan = _plan(min_gain=0.0, depth=_depth_law(0.5))
    assert plan.stop == "cap"
    assert plan.layers == MAX_LAYERS
    assert plan.tokens == BUDGETS[0] * 2**TOKEN_DOUBLINGS


def test_acceptance_adds_the_depth_term_when_layers_move() -> None:
    depth = _depth_law(0.5)
    _, plan = _plan(min_gain=0.45, depth=depth)
    assert plan.layers == 4 and plan.tokens == BUDGETS[0]
    expected = A_T * math.log10(8192) + B_T + 0.5 * math.log10(4)
    assert plan.acceptance_length == pytest.approx(expected)
    lo, hi = plan.acceptance_ci  # the token law's interval (0, 10) moved by the depth term
    assert (lo, hi) == pytest.approx((0.5 * math.log10(4), 10 + 0.5 * math.log10(4)))


def test_acceptance_ci_is_the_token_laws_mean_interval_at_the_plan() -> None:
    asked: list[float] = []

    def mean_ci(t: float) -> tuple[float, float]:
        asked.append(t)
        return (1.25, 1.5)

    plan = plan_training(
        _token_law(), None, d0=1, hours=_hours, budget_hours=None, min_gain=0.01, mean_ci=mean_ci
    )
    assert asked == [524288.0]
    assert plan.acceptance_ci == (1.25, 1.5)


def test_to_dict_is_plain_data() -> None:
    _, plan = _plan(min_gain=0.01, budget=3.0)
    out = plan.to_dict()
    assert out["tokens"] == 131072.0 and out["stop"] == "budget"
    assert out["tokens_ci"] == [131072.0, 131072.0]


@pytest.mark.parametrize(
    ("min_gain", "budget", "match"),
    [
        (-0.1, None, "min_gain"),
        (0.01, 0.0, "must be > 0"),
        (0.01, -2.0, "must be > 0"),
        (0.01, 0.6, "already takes"),  # T0 takes 0.625 h
    ],
    ids=["negative-min-gain", "zero-budget", "negative-budget", "t0-over-budget"],
)
def test_plan_training_rejects_bad_arguments(
    min_gain: float, budget: float | None, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        plan_training(
            _token_law(),
            None,
            d0=1,
            hours=_hours,
            budget_hours=budget,
            min_gain=min_gain,
            mean_ci=_no_ci,
        )


# --- plan_training: extrapolation labels -----------------------------------------------------


def _token_labels(labels: list[str]) -> list[str]:
    return [s for s in labels if "pretraining tokens" in s]


def _depth_labels(labels: list[str]) -> list[str]:
    return [s for s in labels if "draft layers" in s]


@pytest.mark.parametrize(
    ("budget", "tokens", "decades"),
    [(None, 524288.0, "0.60"), (4.5, 262144.0, "0.30"), (3.0, 131072.0, None)],
    ids=["beyond-by-0.6", "beyond-by-0.3", "at-the-largest"],
)
def test_tokens_label_exactly_when_beyond_the_largest_measured_budget(
    budget: float | None, tokens: float, decades: str | None
) -> None:
    _, plan = _plan(min_gain=0.01, budget=budget)
    assert plan.tokens == tokens
    got = _token_labels(plan.labels)
    if decades is None:
        assert got == [] and plan.labels == []
    else:
        assert len(got) == 1 and got[0].startswith("extrapolated:")
        assert f"{decades} decades beyond" in got[0] and "sweep tok" in got[0]


@pytest.mark.parametrize(
    ("min_gain", "layers"), [(0.45, 4), (0.2, 9)], ids=["at-the-deepest", "beyond"]
)
def test_depth_label_exactly_when_beyond_the_deepest_measured_draft(
    min_gain: float, layers: int
) -> None:
    _, plan = _plan(min_gain=min_gain, depth=_depth_law(0.5))
    assert plan.layers == layers
    got = _depth_labels(plan.labels)
    if layers <= max(DEPTHS):
        assert got == []
    else:
        assert len(got) == 1 and f"{layers} draft layers" in got[0] and "sweep dep" in got[0]


# --- coverage over repeated synthetic sweeps -------------------------------------------------


TARGET = 524288.0
"""the planned budget of the coverage test: two doublings beyond the largest measured"""


def _hours_per_token(t: float, d: int) -> float:
    """1 h per 65,536 tokens: with an 8 h budget and no min_gain every draw plans TARGET."""
    return t / 65536


def _constant_ci(lo: float, hi: float) -> Callable[[float], tuple[float, float]]:
    def mean_ci(t: float) -> tuple[float, float]:
        return (lo, hi)

    return mean_ci


def _coverage(draws: int, n_resamples: int, seed: int) -> tuple[float, float]:
    """(t-based mean interval, bootstrap interval) coverage of the true tau at TARGET."""
    rng = np.random.default_rng(seed)
    x = np.array(BUDGETS * 2)
    truth = A_T * math.log10(TARGET) + B_T
    hits_t = hits_boot = 0
    for i in range(draws):
        y = A_T * np.log10(x) + B_T + rng.normal(0.0, 0.03, x.size)
        fit = fit_log_linear(pd.DataFrame({"x": x, "y": y}), "x", "y", law="tokens")
        p = fit.predict([TARGET]).iloc[0]
        lo, hi = float(p["mean_lo"]), float(p["mean_hi"])
        law = fit_law(
            "tokens", x.tolist(), y.tolist(), sweep="tok", n_resamples=n_resamples, seed=i
        )
        plan = plan_training(
            law,
            None,
            d0=1,
            hours=_hours_per_token,
            budget_hours=8.0,
            min_gain=0.0,
            mean_ci=_constant_ci(lo, hi),
        )
        assert plan.tokens == TARGET and plan.acceptance_ci == (lo, hi)
        hits_t += lo <= truth <= hi
        b_lo, b_hi = plan.acceptance_boot_ci
        hits_boot += b_lo <= truth <= b_hi
    return hits_t / draws, hits_boot / draws


def test_acceptance_intervals_cover_the_true_mean_at_about_the_nominal_rate() -> None:
    """200 sweeps of tau = 0.137*log10(T) + 0.7 + N(0, 0.03), 5 budgets x 2 seeds: the 95%
    intervals at 524,288 tokens hold the true mean (measured: t-based 0.965, bootstrap 0.92)."""
    t_based, boot = _coverage(draws=200, n_resamples=300, seed=20250507)
    assert 0.88 <= t_based <= 0.995, f"t-based mean interval coverage {t_based:.3f}"
    assert boot >= 0.80, f"bootstrap (acceptance_boot_ci) coverage {boot:.3f}"


# --- plan_serving -------------------------------------------------------------------------------

C0, C1 = 0.01, 1e-5
"""toy roofline: a cycle costs C0 + C1*b*k s (weights once, compute per verified token)"""
KS = (2, 3, 4, 6, 8, 12, 16, 24, 32)
MIX = {1: 0.2, 4: 0.2, 16: 0.3, 64: 0.2, 1024: 0.1}
MEASURED_B = [1, 4, 16]


def _step(b: int, k: int, tau: float) -> float:
    return C0 + C1 * b * k


def _ar_step(b: int) -> float:
    return C0


@pytest.fixture(scope="module")
def tau_k() -> TauKFit:
    """A decode sweep's tau(k): 5 - 4*0.9**k + N(0, 0.03), k = 2..32 x 2, 100 replicates."""
    rng = np.random.default_rng(0)
    k = np.repeat(np.arange(2, 33, dtype=float), 2)
    tau = 5 - 4 * 0.9**k + rng.normal(0.0, 0.03, k.size)
    return fit_tau_k(k.tolist(), tau.tolist(), n_resamples=100, seed=0)


def _inputs(
    ks: tuple[int, ...] = KS, max_accept: float = math.inf, mix: dict[int, float] | None = None
) -> ServingInputs:
    return ServingInputs(
        batch_mix=mix or MIX, ks=ks, step_s=_step, ar_step_s=_ar_step, max_accept=max_accept
    )


def _serve(
    tau_k: TauKFit,
    g: float = 1.0,
    ks: tuple[int, ...] = KS,
    max_accept: float = math.inf,
    mix: dict[int, float] | None = None,
) -> ServingPlan:
    inputs = _inputs(ks, max_accept, mix)
    return plan_serving(tau_k, np.array([g]), inputs, measured_b=MEASURED_B)


def _reference(tau_k: TauKFit, b: int, g: float = 1.0) -> tuple[int, float, float]:
    """(k, tau, speedup) by hand: the argmax of b*tau(k)/step over KS, k = 1 when slower
    than the autoregressive step."""
    ks = np.array(KS, dtype=float)
    tau = np.minimum(1 + g * (tau_k.predict(ks)[0] - 1), ks)
    tps = np.array([b * t / (C0 + C1 * b * k) for t, k in zip(tau, KS, strict=True)])
    j = int(np.argmax(tps))
    ar = b / C0
    if tps[j] < ar:
        return 1, 1.0, 1.0
    return KS[j], float(tau[j]), float(tps[j] / ar)


def test_k_per_batch_size_maximises_roofline_throughput(tau_k: TauKFit) -> None:
    plan = _serve(tau_k)
    assert [r["batch_size"] for r in plan.rows] == sorted(MIX)
    for row in plan.rows:
        k, tau, speedup = _reference(tau_k, row["batch_size"])
        assert row["k"] == k, row["batch_size"]
        assert row["acceptance_length"] == pytest.approx(tau)
        assert row["speedup"] == pytest.approx(speedup)
        assert row["ar_tokens_per_s"] == pytest.approx(row["batch_size"] / C0)


def test_speedup_by_k_is_each_candidates_predicted_speedup(tau_k: TauKFit) -> None:
    """Every candidate k's speedup by hand; the planned k's equals the row's (when speculating),
    and at b = 1024 (speculation off) every candidate is below 1."""
    ks = np.array(KS, dtype=float)
    tau = np.minimum(1 + (tau_k.predict(ks)[0] - 1), ks)
    for row in _serve(tau_k).rows:
        b = row["batch_size"]
        by_k = row["speedup_by_k"]
        assert sorted(by_k) == list(KS)
        for t, k in zip(tau, KS, strict=True):
            assert by_k[k] == pytest.approx((b * t / (C0 + C1 * b * k)) / (b / C0))
        if row["speculate"]:
            assert by_k[row["k"]] == pytest.approx(row["speedup"])
        else:
            assert max(by_k.values()) < 1.0


def test_k_does_not_increase_with_batch_size(tau_k: TauKFit) -> None:
    ks = [r["k"] for r in _serve(tau_k).rows]
    assert all(a >= b for a, b in zip(ks, ks[1:], strict=False)), ks
    assert ks[0] > ks[-1]  # the toy's compute cost does move the optimum


def test_speculation_off_where_slower_than_autoregressive(tau_k: TauKFit) -> None:
    """At b = 1024 every k's cycle costs more than its tau buys: k = 1, speedup 1."""
    rows = {r["batch_size"]: r for r in _serve(tau_k).rows}
    assert rows[1024]["speculate"] is False
    assert rows[1024]["k"] == 1 and rows[1024]["speedup"] == 1.0
    assert rows[1024]["acceptance_length"] == 1.0
    assert rows[1]["speculate"] is True and rows[1]["speedup"] > 1.0


def test_mix_speedup_is_the_share_weighted_sum(tau_k: TauKFit) -> None:
    plan = _serve(tau_k)
    assert plan.mix_speedup == pytest.approx(sum(r["share"] * r["speedup"] for r in plan.rows))
    lo, hi = plan.mix_speedup_ci
    assert lo <= hi and lo > 1.0


def test_batch_sizes_outside_the_measured_ones_are_labelled(tau_k: TauKFit) -> None:
    plan = plan_serving(
        tau_k, np.ones(1), _inputs(), measured_b=[16, 2, 4], labels=["target: other shape"]
    )
    for row in plan.rows:
        outside = [s for s in row["labels"] if "outside the decode sweep's measured 2..16" in s]
        assert bool(outside) == (row["batch_size"] not in (4, 16)), row
        assert "target: other shape" in row["labels"]
    assert sum("outside" in s for s in plan.labels) == 3  # b = 1 below, 64 and 1024 above
    assert plan.labels[0] == "target: other shape"


def test_acceptance_never_exceeds_max_accept(tau_k: TauKFit) -> None:
    plan = _serve(tau_k, g=3.0, max_accept=4.0)
    for row in plan.rows:
        assert row["acceptance_length"] <= min(row["k"], 4.0)
        assert row["acceptance_ci"][1] <= 4.0
    assert max(r["acceptance_length"] for r in plan.rows) == 4.0  # the cap binds


def test_acceptance_never_exceeds_k(tau_k: TauKFit) -> None:
    """g = 3 makes tau_plan(2) = 3.3 and tau_plan(3) = 4.3: capped at k."""
    plan = _serve(tau_k, g=3.0, ks=(2, 3), mix={1: 0.5, 4: 0.5})
    for row in plan.rows:
        assert row["speculate"]
        assert row["acceptance_length"] <= row["k"]
        assert row["acceptance_ci"][1] <= row["k"]
    assert any(r["acceptance_length"] == r["k"] for r in plan.rows)  # the cap binds


def test_rescale_above_one_raises_the_acceptance(tau_k: TauKFit) -> None:
    base, up = _serve(tau_k, g=1.0), _serve(tau_k, g=1.3)
    assert base.rescale == 1.0 and up.rescale == 1.3
    for b_row, u_row in zip(base.rows, up.rows, strict=True):
        if b_row["speculate"]:
            assert u_row["acceptance_length"] > b_row["acceptance_length"], b_row["batch_size"]
            assert u_row["speedup"] > b_row["speedup"]
    assert up.mix_speedup > base.mix_speedup


def test_rescaled_k_matches_the_reference(tau_k: TauKFit) -> None:
    plan = _serve(tau_k, g=1.3)
    assert [r["k"] for r in plan.rows] == [_reference(tau_k, b, 1.3)[0] for b in sorted(MIX)]


def test_serving_plan_to_dict_is_plain_data(tau_k: TauKFit) -> None:
    out = _serve(tau_k).to_dict()
    assert out["tau_k"]["chosen"] == tau_k.chosen
    assert len(out["rows"]) == len(MIX) and isinstance(out["rows"][0]["k_ci"], list)


def test_a_k_at_the_top_of_the_measured_range_is_labelled_capped(tau_k: TauKFit) -> None:
    """Cut the candidates to k <= 4: at b = 1 the throughput still rises at 4 (the full range's
    best is larger), so that row says capped; rows whose best k lies inside the range do not."""
    full = {r["batch_size"]: r for r in _serve(tau_k).rows}
    short = _serve(tau_k, ks=(2, 3, 4))
    for row in short.rows:
        capped = any(s.startswith("capped: k = 4") for s in row["labels"])
        assert capped == (row["k"] == 4), row
    assert full[1]["k"] > 4 and short.rows[0]["k"] == 4
    assert not any(
        s.startswith("capped") for r in _serve(tau_k).rows if r["k"] < 32 for s in r["labels"]
    )


def test_k_tokens_and_layers_intervals_are_values_the_replicates_took(tau_k: TauKFit) -> None:
    """A percentile between two integers k (or two ladder budgets) names no plan: the interval
    ends are values some replicate chose."""
    from analysis.plan import _ci

    k_r = np.array([1.0] * 3 + [12.0] * 50 + [16.0] * 47)  # 3 replicates without speculation
    assert _ci(k_r, 0.05, discrete=True) == (1.0, 16.0)
    assert not float(_ci(k_r, 0.05)[0]).is_integer()  # what interpolation would have said
    plan = plan_serving(tau_k, np.ones(1), _inputs(), measured_b=MEASURED_B)
    for row in plan.rows:
        assert all(float(v).is_integer() for v in row["k_ci"]), row["k_ci"]
    law, training = _plan(0.05)
    ladder = {min(law.x) * 2**i for i in range(40)}
    assert set(training.tokens_ci) <= ladder, training.tokens_ci


def test_a_fits_k_outside_its_replicates_widens_the_interval_and_says_so() -> None:
    from analysis.plan import _k_interval

    # the fit does not speculate (k 1), every replicate would at k 2: once "k 1 [2, 2]"
    ci, labels = _k_interval(np.array([1.0, 2.0, 2.0, 2.0, 2.0]), 8, 0.05)
    assert ci == (1.0, 2.0)
    assert len(labels) == 1 and "the fit says 1, 100% of the bootstrap replicates" in labels[0]
    ci, labels = _k_interval(np.array([2.0, 1.0, 2.0, 3.0, 2.0]), 8, 0.05)
    assert ci == (1.0, 3.0) and labels == []
    assert _k_interval(np.array([4.0]), 8, 0.05) == ((4.0, 4.0), [])
