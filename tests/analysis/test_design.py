"""The adaptive design rule (analysis.design) on a synthetic law ``y = a*log10(T) + b + noise``:
the initial design, the c-optimal pick by hand, costs, batches, the three stops, and the
benchmark's quick run."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.design import (
    Candidate,
    Point,
    Step,
    initial_design,
    initial_design_cost,
    propose,
    slope_half_width,
)
from analysis.laws import fit_log_linear

A, B, SD = 0.137, 0.72, 0.02
"""the synthetic law: slope per decade, intercept, seed sd (acceptance length)"""
VALUES = [2.0**k for k in range(13, 21)]
"""8,192 .. 1,048,576 tokens"""
SEEDS = range(4)
NOISE = dict(
    zip(
        [(v, s) for v in VALUES for s in SEEDS],
        np.random.default_rng(24).normal(0.0, SD, len(VALUES) * len(SEEDS)),
        strict=True,
    )
)


def _y(value: float, seed: int) -> float:
    return A * math.log10(value) + B + float(NOISE[value, seed])


def _point(value: float, seed: int = 0, cost: float = 1.0) -> Point:
    return Point(value, seed, _y(value, seed), cost)


def _candidates(
    cost: Callable[[float], float | None] = lambda v: 1.0,
    done: set[tuple[float, int]] | None = None,
) -> list[Candidate]:
    done = done or set()
    return [Candidate(v, s, cost(v)) for v in VALUES for s in SEEDS if (v, s) not in done]


def _sxx(xs: list[float]) -> float:
    return float(np.sum((np.asarray(xs) - np.mean(xs)) ** 2))


def _gain(xs: list[float], x: float) -> float:
    """1/Sxx - 1/Sxx' by hand: Var(a)/sigma^2 before and after one more trial at x."""
    return 1.0 / _sxx(xs) - 1.0 / _sxx([*xs, x])


def _run(
    *,
    goal: float,
    budget_s: float,
    cost: Callable[[float], float] = lambda v: 1.0,
    slots: int = 1,
    steps: int = 200,
) -> tuple[Step, list[Point]]:
    """Drive the rule to its stop, each pick completing at its predicted cost."""
    points: list[Point] = []
    for _ in range(steps):
        done = {(p.value, p.seed) for p in points}
        step = propose(points, _candidates(cost, done), goal=goal, budget_s=budget_s, slots=slots)
        if step.stop is not None:
            return step, points
        points += [_point(p.value, p.seed, p.predicted_cost_s) for p in step.picks]
    raise AssertionError("the design did not stop")


# -- the initial design --------------------------------------------------------------------


def test_initial_design_is_the_ends_and_the_log_middle() -> None:
    assert initial_design(VALUES[:5]) == [8192, 32768, 131072]
    # the log-middle of 2^13..2^20 is 2^16.5: a tie between 2^16 and 2^17 goes to the smaller
    assert initial_design(VALUES) == [8192, 65536, 1048576]
    assert initial_design(list(reversed(VALUES)) + VALUES) == [8192, 65536, 1048576]
    assert initial_design(VALUES, n=4) == [8192, 32768, 262144, 1048576]
    assert initial_design([1, 2, 1000]) == [1, 2, 1000]


@pytest.mark.parametrize(
    ("values", "n", "match"),
    [([1, 2, 3], 2, ">= 3"), ([1, 2], 3, "2 distinct"), ([0, 1, 2, 3], 3, "not positive")],
)
def test_initial_design_refuses(values: list[float], n: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        initial_design(values, n=n)


def test_propose_runs_the_initial_design_first_lowest_seed() -> None:
    step = propose([], _candidates(), goal=0.01, budget_s=1e9, slots=1)
    assert step.stop is None and step.half_width is None
    assert [(p.value, p.seed) for p in step.picks] == [(8192, 0)]
    assert "initial design" in step.picks[0].reason
    done = {(8192.0, 0)}
    step = propose([_point(8192)], _candidates(done=done), goal=0.01, budget_s=1e9, slots=1)
    assert [(p.value, p.seed) for p in step.picks] == [(65536, 0)]
    step = propose([], _candidates(), goal=0.01, budget_s=1e9, slots=3)
    assert [p.value for p in step.picks] == [8192, 65536, 1048576]
    assert {p.seed for p in step.picks} == {0}


def test_pending_initial_values_are_not_proposed_again() -> None:
    pending = [Candidate(8192, 0, 1.0), Candidate(65536, 0, 1.0)]
    done = {(c.value, c.seed) for c in pending}
    step = propose([], _candidates(done=done), goal=0.01, budget_s=1e9, slots=1, pending=pending)
    assert [p.value for p in step.picks] == [1048576]


# -- the pick: c-optimal for the slope, per second -------------------------------------------


def _initial_points() -> list[Point]:
    return [_point(v) for v in (8192, 65536, 1048576)]


def test_next_pick_is_the_largest_variance_reduction_by_hand() -> None:
    points = _initial_points()
    done = {(p.value, p.seed) for p in points}
    step = propose(points, _candidates(done=done), goal=0.001, budget_s=1e9, slots=1)
    (pick,) = step.picks
    xs = [math.log10(p.value) for p in points]
    # 3 distinct of the 4 kept: the pick must be a new value; equal costs: the largest gain
    new = [v for v in VALUES if v not in {p.value for p in points}]
    best = max(new, key=lambda v: _gain(xs, math.log10(v)))
    assert best == 524288 and pick.value == best and pick.seed == 0
    assert "new to the design" in pick.reason
    # expected half-width: t(0.975, n'-2) * sigma * sqrt(1/Sxx') * HC3/OLS ratio, by hand
    fit = fit_log_linear(
        pd.DataFrame({"t": [p.value for p in points], "y": [p.y for p in points]}),
        "t",
        "y",
        law="x",
    )
    hc3 = (fit.a_ci[1] - fit.a_ci[0]) / 2
    ols = stats.t.ppf(0.975, 1) * math.sqrt(fit.scale / _sxx(xs))
    after = [*xs, math.log10(best)]
    expected = stats.t.ppf(0.975, 2) * math.sqrt(fit.scale) / math.sqrt(_sxx(after))
    assert pick.expected_half_width == pytest.approx(expected * hc3 / ols, rel=1e-9)
    assert step.half_width == pytest.approx(hc3)
    no_scale = propose(
        points, _candidates(done=done), goal=0.001, budget_s=1e9, slots=1, match_hc3=False
    )
    assert no_scale.picks[0].expected_half_width == pytest.approx(expected, rel=1e-9)


def _four_points() -> list[Point]:
    return [_point(v) for v in (8192, 16384, 65536, 1048576)]


def test_equal_costs_prefer_the_extremes_once_the_floor_is_met() -> None:
    points = _four_points()
    for _ in range(6):  # seeds 1-3 at both ends
        done = {(p.value, p.seed) for p in points}
        (pick,) = propose(points, _candidates(done=done), goal=1e-6, budget_s=1e9, slots=1).picks
        assert pick.value in (8192, 1048576), pick.reason
        xs = [math.log10(p.value) for p in points]
        free = [v for v in (8192, 1048576) if (v, 3) not in done]
        assert pick.value == max(free, key=lambda v: _gain(xs, math.log10(v)))
        points.append(_point(pick.value, pick.seed))
    # both ends are full: the next extremes, by the same rule
    done = {(p.value, p.seed) for p in points}
    (pick,) = propose(points, _candidates(done=done), goal=1e-6, budget_s=1e9, slots=1).picks
    xs = [math.log10(p.value) for p in points]
    assert pick.value == max(VALUES[1:-1], key=lambda v: _gain(xs, math.log10(v)))
    assert pick.value in (16384, 524288)


def test_cost_growing_with_value_trades_reduction_for_cost() -> None:
    points = _four_points()
    done = {(p.value, p.seed) for p in points}
    xs = [math.log10(p.value) for p in points]
    equal = propose(points, _candidates(done=done), goal=1e-6, budget_s=1e9, slots=1)
    assert equal.picks[0].value == 1048576  # farthest from the design's mean

    def cost(v: float) -> float:
        return 100.0 + 0.01 * v

    step = propose(points, _candidates(cost, done), goal=1e-6, budget_s=1e9, slots=1)
    by_hand = max(VALUES, key=lambda v: _gain(xs, math.log10(v)) / cost(v))
    assert step.picks[0].value == by_hand == 8192
    assert step.picks[0].predicted_cost_s == pytest.approx(cost(8192))


def test_unknown_costs_are_linear_in_value_over_the_measured_trials() -> None:
    points = [_point(v, cost=60.0 + 0.002 * v) for v in (8192, 65536, 1048576)]
    done = {(p.value, p.seed) for p in points}
    step = propose(points, _candidates(lambda v: None, done), goal=1e-6, budget_s=1e9, slots=1)
    (pick,) = step.picks
    assert pick.predicted_cost_s == pytest.approx(60.0 + 0.002 * pick.value)
    assert "linear in value" in pick.reason
    one = [_point(8192, s, cost=50.0 + s) for s in range(3)]
    step = propose(one, _candidates(lambda v: None, set()), goal=1e-6, budget_s=1e9, slots=1)
    assert step.picks[0].predicted_cost_s == pytest.approx(51.0)
    assert "equal costs" in step.picks[0].reason
    step = propose([], _candidates(lambda v: None), goal=1e-6, budget_s=1.0, slots=3)
    assert len(step.picks) == 3 and all(p.predicted_cost_s == 0.0 for p in step.picks)
    assert "budget not checked" in step.picks[0].reason


# -- batches ------------------------------------------------------------------------------


def test_a_batch_is_the_greedy_conditional_set_not_the_best_repeated() -> None:
    points = _four_points()
    done = {(p.value, p.seed) for p in points}
    batch = propose(points, _candidates(done=done), goal=1e-6, budget_s=1e9, slots=4).picks
    single = propose(points, _candidates(done=done), goal=1e-6, budget_s=1e9, slots=1).picks[0]
    assert len(batch) == 4 and batch[0] == single
    assert [p.value for p in batch] != [single.value] * 4
    # by hand: each pick maximises the gain given the design with the earlier picks in it
    xs, used, want = [math.log10(p.value) for p in points], set(done), []
    for _ in range(4):
        free = [(v, s) for v in VALUES for s in SEEDS if (v, s) not in used]
        v, s = max(free, key=lambda c: (_gain(xs, math.log10(c[0])), -c[0], -c[1]))
        want.append((v, s))
        used.add((v, s))
        xs.append(math.log10(v))
    assert [(p.value, p.seed) for p in batch] == want
    assert want[:2] == [(1048576, 1), (8192, 1)]
    # ... and the same as one pick at a time with the earlier ones in flight
    pending: list[Candidate] = []
    for pick in batch:
        left = _candidates(done=done | {(c.value, c.seed) for c in pending})
        one = propose(points, left, goal=1e-6, budget_s=1e9, slots=1, pending=pending).picks[0]
        assert (one.value, one.seed) == (pick.value, pick.seed)
        assert one.expected_half_width == pytest.approx(pick.expected_half_width)
        pending.append(Candidate(pick.value, pick.seed, pick.predicted_cost_s))


# -- the stops ----------------------------------------------------------------------------


def test_it_stops_at_the_goal_with_the_distinct_floor_met() -> None:
    step, points = _run(goal=0.03, budget_s=1e9)
    assert step.stop == "goal" and "goal met" in step.message
    assert step.half_width is not None and step.half_width <= 0.03
    assert step.half_width == pytest.approx(slope_half_width(points))
    assert len({p.value for p in points}) >= 4
    assert step.spent_s == pytest.approx(len(points))
    assert len(points) < len(VALUES) * len(SEEDS)


def test_the_goal_waits_for_the_distinct_floor() -> None:
    points = [_point(v, s) for v in (8192, 65536, 1048576) for s in SEEDS]
    hw = slope_half_width(points)
    assert hw is not None
    done = {(p.value, p.seed) for p in points}
    step = propose(points, _candidates(done=done), goal=hw * 1.01, budget_s=1e9, slots=1)
    assert step.stop is None and step.picks[0].value not in (8192, 65536, 1048576)
    assert step.half_width == pytest.approx(hw)


def test_it_stops_at_the_budget() -> None:
    def cost(v: float) -> float:
        return 60.0 + 0.002 * v

    budget = 12_000.0
    step, points = _run(goal=1e-6, budget_s=budget, cost=cost)
    assert step.stop == "budget" and "budget spent" in step.message
    spent = sum(p.cost_s for p in points)
    assert spent <= budget and step.spent_s == pytest.approx(spent)
    done = {(p.value, p.seed) for p in points}
    assert min(cost(c.value) for c in _candidates(cost, done)) > budget - spent
    # committed trials in flight count against it too
    pending = [Candidate(1048576, 3, budget)]
    step = propose([], _candidates(cost), goal=1e-6, budget_s=budget, slots=1, pending=pending)
    assert step.stop == "budget" and not step.picks


def test_it_stops_when_the_candidates_run_out() -> None:
    step, points = _run(goal=1e-9, budget_s=math.inf, slots=5)
    assert step.stop == "candidates" and "exhausted" in step.message
    assert len(points) == len(VALUES) * len(SEEDS)
    assert len({(p.value, p.seed) for p in points}) == len(points)


def test_initial_design_cost() -> None:
    def cost(v: float) -> float:
        return 60.0 + 0.001 * v

    want = cost(8192) + cost(65536) + cost(1048576)
    assert initial_design_cost(_candidates(cost)) == pytest.approx(want)
    done = [_point(8192, cost=1.0)]
    left = _candidates(cost, {(8192.0, 0)})
    assert initial_design_cost(left, points=done) == pytest.approx(want - cost(8192))
    assert initial_design_cost(_candidates(lambda v: None)) is None
    measured = [_point(v, cost=cost(v)) for v in (16384, 32768)]
    estimated = initial_design_cost(_candidates(lambda v: None), points=measured)
    assert estimated == pytest.approx(cost(8192) + cost(65536) + cost(1048576))


def test_same_inputs_give_the_same_picks() -> None:
    points = _four_points()
    done = {(p.value, p.seed) for p in points}
    cands = _candidates(lambda v: 100.0 + 0.01 * v, done)
    first = propose(points, cands, goal=1e-6, budget_s=1e9, slots=3)
    again = propose(list(points), list(reversed(cands)), goal=1e-6, budget_s=1e9, slots=3)
    assert first == again


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"goal": 0.0}, "goal"),
        ({"budget_s": -1.0}, "budget"),
        ({"slots": 0}, "slots"),
        ({"min_distinct": 2}, "min_distinct"),
        ({"log_base": 3}, "log_base"),
    ],
)
def test_bad_arguments_raise(kwargs: dict[str, float], match: str) -> None:
    args = {"goal": 0.01, "budget_s": 10.0, "slots": 1} | kwargs
    with pytest.raises(ValueError, match=match):
        propose([], _candidates(), **args)  # type: ignore[arg-type]


def test_bad_candidates_raise() -> None:
    with pytest.raises(ValueError, match="twice"):
        propose([], [*_candidates(), Candidate(8192, 0, 1.0)], goal=0.1, budget_s=1, slots=1)
    with pytest.raises(ValueError, match="not positive"):
        propose([], [Candidate(0, 0, 1.0)], goal=0.1, budget_s=1, slots=1)
    with pytest.raises(ValueError, match="at least 3"):
        propose([], [Candidate(1, 0, 1.0), Candidate(2, 0, 1.0)], goal=0.1, budget_s=1, slots=1)


# -- the benchmark ------------------------------------------------------------------------


def test_benchmark_quick_run_prints_every_design() -> None:
    from benchmarks import design_bench as bench

    lines: list[str] = []
    result = bench.main(["--quick", "--reps", "5"], out=lines.append)
    text = "\n".join(lines)
    for name in ("adaptive", "grid (first reach)", "random order", "goal (adaptive", "best"):
        assert name in text
    assert result["reps"] == 5 and 0 < result["ratio"] <= 1.0 + 1e-9
    assert bench.seed_sd() == pytest.approx(0.0206, abs=5e-5)
