"""Adaptive design for the slope of a log-linear law: which trial (value, seed) to run next.

The law is ``y = a*log_base(value) + b`` (:func:`analysis.laws.fit_log_linear`: OLS, HC3 95% CI
of ``a``). Pure, no I/O; the driver is :mod:`orchestrator.kinds.design.driver`. The rule
(:func:`propose`; reasons and sources in docs/design.md):

1. **Precision**: with ``x = log_base(value)``, ``Var(a) = sigma^2 / Sxx``,
   ``Sxx = sum_i (x_i - mean x)^2`` (c-optimality for the slope: Atkinson, Donev & Tobias 2007,
   Ch. 10 and 17); pending trials and a batch's earlier picks count in ``Sxx``.
2. **Initial design**: until ``initial`` distinct values are completed or in flight, the picks
   are :func:`initial_design`, one trial each, the lowest seed.
3. **Each next pick** maximises ``(1/Sxx - 1/Sxx') / cost`` (``Sxx'``: with it added). Ties:
   cheaper, then smaller value, then smaller seed.
4. **Distinct-value floor**: while fewer than ``max(min_distinct, initial)`` distinct values (at
   most the candidates') are completed, in flight or picked, a pick must be a new value.
5. **Budget**: ``spent + committed + earlier picks + its cost <= budget_s`` (spent: completed
   trials' measured seconds; committed: pending trials' predicted).
6. **Batch**: with ``slots`` > 1, picks are chosen greedily, each with the earlier ones in ``Sxx``.
7. **Stop**: ``"goal"`` when the completed trials' HC3 half-width is <= ``goal`` and the floor is
   met by completed values; ``"budget"`` when candidates are left but none fits;
   ``"candidates"`` when none is left. With trials in flight the driver waits and asks again.

**Expected half-width** of a pick (reported, not used to choose):
``t_{1-alpha/2, n'-2} * sigma * sqrt(1/Sxx') * r``; ``n'`` the trials once it and the earlier
picks are in; ``sigma`` the residual sd of the completed trials' fit (``prior_sd`` before a fit
exists, else None); ``r`` the current HC3/OLS half-width ratio (``match_hc3``; 1 before a fit).

**Costs**: ``Candidate.cost_s`` when given; else from the completed trials: linear in value by
least squares when they hold >= 2 distinct values and the line does not fall (below the cheapest
measured value, that trial's cost scaled in proportion), else their mean, else 0 (budget not
checked). Each pick's ``reason`` says which. History-dependent costs (a feature cache, a
wsd-fork trunk) are the caller's to give in ``cost_s``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from analysis._design import (
    Candidate,
    CostModel,
    DesignState,
    Noise,
    Pick,
    Point,
    Step,
    best_pick,
    fit_points,
    fmt,
    half_width,
    initial_picks,
    log_x,
    positive,
)
from analysis.laws import MIN_DISTINCT_X

__all__ = [
    "Candidate",
    "Pick",
    "Point",
    "Step",
    "initial_design",
    "initial_design_cost",
    "propose",
    "slope_half_width",
]


def initial_design(values: Sequence[float], n: int = 3) -> list[float]:
    """``n`` distinct values of ``values`` spread evenly in log space, both ends included.

    The smallest and the largest first; each of the ``n - 2`` evenly spaced log targets then
    takes the nearest value not taken yet (a tie: the smaller). Returns them sorted ascending.

    Raises:
        ValueError: ``n < 3``, a value that is not a positive finite number, or fewer than ``n``
            distinct values.
    """
    if n < MIN_DISTINCT_X:
        raise ValueError(f"n={n}: an initial design needs >= {MIN_DISTINCT_X} distinct values")
    vals = sorted(set(positive(values, "values")))
    if len(vals) < n:
        raise ValueError(f"{len(vals)} distinct values {vals}: the initial design needs {n}")
    lx = np.log(np.asarray(vals))
    chosen = [0, len(vals) - 1]
    for target in np.linspace(lx[0], lx[-1], n)[1:-1]:
        free = (i for i in range(len(vals)) if i not in chosen)
        chosen.append(min(free, key=lambda i: (round(abs(float(lx[i] - target)), 9), vals[i])))
    return sorted(vals[i] for i in chosen)


def initial_design_cost(
    candidates: Sequence[Candidate], *, initial: int = 3, points: Sequence[Point] = ()
) -> float | None:
    """Predicted compute (seconds) of the initial design's trials not completed yet.

    The initial design is :func:`initial_design` over the distinct values of ``candidates``
    and ``points``; each of its values not in ``points`` costs its lowest-seed candidate's
    ``cost_s`` (None estimated as in :func:`propose`). Returns None when a cost is unknown (no
    ``cost_s`` and no measured trial).

    Raises:
        ValueError: as :func:`initial_design`.
    """
    values = [c.value for c in candidates] + [p.value for p in points]
    model = CostModel.from_points(points)
    done = {p.value for p in points}
    total = 0.0
    for v in initial_design(values, n=initial):
        if v in done:
            continue
        c = min((c for c in candidates if c.value == v), key=lambda c: c.seed)
        if c.cost_s is None and not model.known:
            return None
        total += model.of(c)[0]
    return total


def slope_half_width(
    points: Sequence[Point], *, log_base: float = 10, alpha: float = 0.05
) -> float | None:
    """Half-width of the slope's (1 - alpha) HC3 CI over ``points`` (y units per factor
    ``log_base``), from :func:`analysis.laws.fit_log_linear`: the figure the report shows.
    None when there is no fit (< 3 distinct values) or the interval is not finite."""
    return half_width(fit_points(points, log_base, alpha))


def propose(
    points: Sequence[Point],
    candidates: Sequence[Candidate],
    *,
    goal: float,
    budget_s: float,
    slots: int,
    pending: Sequence[Candidate] = (),
    min_distinct: int = 4,
    log_base: float = 10,
    initial: int = 3,
    prior_sd: float | None = None,
    alpha: float = 0.05,
    match_hc3: bool = True,
) -> Step:
    """The next trials of the design, or why it stops (the rule: the module docstring).

    Args:
        points: the completed trials (those with a non-finite y count as spent only).
        candidates: trials the design may run; excludes completed and pending ones.
        goal: the slope's (1 - alpha) CI half-width to reach (y units per factor log_base).
        budget_s: compute budget, seconds: spent plus committed plus picks stay within it.
        slots: trials wanted now (free workers); the picks are a greedy conditional batch.
        pending: trials in flight: their x counts in Sxx, their cost as committed.
        min_distinct: distinct values kept so the log-linear form can be checked.
        log_base: 10 or 2, the law's logarithm.
        initial: distinct values of the initial design (>= 3).
        prior_sd: sd of y used for expected half-widths before the completed trials give a fit.
        alpha: 1 - confidence level of the interval (0.05: 95%).
        match_hc3: scale expected half-widths by the HC3/OLS ratio of the interval now.

    Raises:
        ValueError: a goal that is not positive, a negative or NaN budget, ``slots`` < 1,
            ``initial`` or ``min_distinct`` < 3, a log base other than 2 or 10, a candidate
            value that is not positive, a (value, seed) given twice, or fewer than 3 distinct
            values in all.
    """
    _check_args(goal, budget_s, slots, initial, min_distinct, log_base)
    positive([c.value for c in (*candidates, *pending)], "candidate values")
    keys = [(c.value, c.seed) for c in candidates]
    if len(set(keys)) != len(keys):
        raise ValueError("a candidate (value, seed) is given twice; list each trial once")
    fit = fit_points(points, log_base, alpha)
    hw = half_width(fit)
    spent = float(sum(p.cost_s for p in points))
    model = CostModel.from_points(points)
    committed = float(sum(model.of(c)[0] for c in pending))
    measured = [p for p in points if p.value > 0 and math.isfinite(p.y)]
    every = {p.value for p in points if p.value > 0} | {c.value for c in (*candidates, *pending)}
    if len(every) < MIN_DISTINCT_X:
        raise ValueError(
            f"{len(every)} distinct values {sorted(every)}: a slope and its check need at least "
            f"{MIN_DISTINCT_X}; list more candidate values"
        )
    floor = min(max(min_distinct, initial), len(every))
    done_values = {p.value for p in measured}
    status = f"half-width {fmt(hw)} (goal {goal:g}), spent {spent:,.0f} s of {budget_s:,.0f} s"
    if hw is not None:  # the law itself, so every design's stop says it (any workload)
        lo, hi = fit.a_ci
        status = f"slope {fit.a:.4g} [{lo:.4g}, {hi:.4g}] (R^2 {fit.r2:.3f}), " + status
    if hw is not None and hw <= goal and len(done_values) >= floor:
        msg = f"goal met: {status}, {len(done_values)} distinct values completed"
        return Step((), "goal", hw, spent, msg)
    if not candidates:
        msg = f"candidates exhausted: {status}; every candidate trial is completed or in flight"
        return Step((), "candidates", hw, spent, msg)
    design = DesignState(
        xs=[log_x(p.value, log_base) for p in measured]
        + [log_x(c.value, log_base) for c in pending],
        values=done_values | {c.value for c in pending},
        left=budget_s - spent - committed,
        budget_s=budget_s,
        noise=Noise.of(fit, measured, log_base, alpha, prior_sd, match_hc3),
    )
    pool = sorted(candidates, key=lambda c: (c.value, c.seed))
    start = initial_design(sorted(every), n=min(initial, len(every)))
    picks = initial_picks(design, pool, start, slots, model, log_base, alpha)
    while len(picks) < slots:
        pick = best_pick(design, pool, floor, model, log_base, alpha)
        if pick is None:
            break
        picks.append(pick)
    if not picks:
        cheapest = min(model.of(c)[0] for c in pool)
        msg = (
            f"budget spent: {status}, {committed:,.0f} s committed in flight; the cheapest of "
            f"{len(pool)} candidates ({cheapest:,.0f} s) does not fit"
        )
        if len(design.values) < floor and any(c.value not in design.values for c in pool):
            msg += f" (or is not one of the {floor} distinct values the design must keep)"
        return Step((), "budget", hw, spent, msg)
    chosen = ", ".join(f"{p.value:g} (seed {p.seed})" for p in picks)
    return Step(tuple(picks), None, hw, spent, f"{len(picks)} pick(s): {chosen}; {status}")


def _check_args(
    goal: float, budget_s: float, slots: int, initial: int, min_distinct: int, log_base: float
) -> None:
    if not (math.isfinite(goal) and goal > 0):
        raise ValueError(f"goal={goal!r}: the slope's CI half-width to reach must be > 0")
    if math.isnan(budget_s) or budget_s < 0:
        raise ValueError(f"budget_s={budget_s!r}: the compute budget must be >= 0 seconds")
    if slots < 1:
        raise ValueError(f"slots={slots}: ask for at least one trial")
    if initial < MIN_DISTINCT_X or min_distinct < MIN_DISTINCT_X:
        raise ValueError(
            f"initial={initial}, min_distinct={min_distinct}: both must be >= {MIN_DISTINCT_X}"
        )
    if log_base not in (2, 10):
        raise ValueError(f"log_base={log_base!r} is not supported. Use 10 or 2")
