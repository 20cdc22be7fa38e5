"""Benchmark: the adaptive design (:mod:`analysis.design`) against the full grid and a random
order, replayed on a simulated law.

The law is ``y = A*log10(T) + B + N(0, SEED_SD^2)`` and a trial's seconds follow the cost
constants below (each names its source). Candidates: 8,192 to ``--max-tokens`` tokens in powers
of 2 (``--max-tokens`` >= 32,768) x ``--seeds`` seeds. Each of ``--reps`` repetitions draws one y
per (value, seed), shared by (a) the adaptive design (:func:`analysis.design.propose`, goal = the
grid's final half-width, budget = the grid's compute; ``--costs estimated`` leaves costs to the
rule), (b) the grid in expansion order and (c) a random order. Prints, per design, the compute
until its HC3 slope half-width first reaches the grid's final one with >= 4 distinct values, as
a fraction of the grid's (median, IQR), trials, the share that reached it and the CI's coverage
of A, and the cheapest design that could (:func:`best_possible`). Figures: docs/design.md.

    python -m benchmarks.design_bench [--reps 200] [--seeds 4] [--costs exact|estimated]
        [--slots 1] [--design-seeds N] [--max-tokens 1048576] [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from analysis.design import Candidate, Point, propose, slope_half_width

A = 0.1372
"""slope, acceptance length per decade of tokens (docs/results.md, issue 23 cold run)"""
Y_131K = 1.423
"""acceptance length at 131,072 tokens: the two 131K trials' mean (issue 23)"""
B = Y_131K - A * math.log10(131072)
"""intercept, acceptance length at 1 token"""
SEED_PAIRS = ((1.229, 1.251), (1.267, 1.282), (1.285, 1.276), (1.300, 1.343), (1.406, 1.446))
"""seed 0 / seed 1 acceptance length at 8K..131K tokens (results.md, issue 13, "after")"""
FIXED_S = (1074 + 390) / 12
"""seconds per trial that do not depend on tokens: evaluation + SFT (issue 23)"""
PRETRAIN_S_PER_TOKEN = 476 / (2 * (8192 + 16384 + 32768 + 65536 + 131072))
"""pretraining seconds per token (issue 23: 476 trial-seconds over 10 trials)"""
FEATURES_S_PER_TOKEN = 508 / 131072
"""pretraining-feature seconds per token not cached yet (issue 23: 508 s up to 131K tokens)"""
ONE_OFF_S = 328 + 88
"""regeneration and SFT features, paid once by the first trial of a run root (issue 23)"""
MIN_TOKENS = 8192
"""the smallest candidate pretraining budget, tokens"""
MAX_TOKENS = 1048576
"""the largest candidate pretraining budget by default (``--max-tokens``), tokens"""
LEAST_MAX_TOKENS = 32768
"""the smallest ``--max-tokens``: three candidates, the fewest a slope's CI needs"""
MIN_DISTINCT = 4
"""distinct values a half-width counts from (the design's floor; all of them when fewer)"""
RTOL = 1e-9
"""relative slack of "reached the target": the same trials fitted in another order differ in
the last bits"""
GOAL_RATIO = 0.5
"""issue 24's goal: adaptive compute / grid compute, median"""


def candidate_values(max_tokens: int = MAX_TOKENS) -> tuple[float, ...]:
    """Candidate pretraining budgets, tokens: the powers of 2 from 8,192 to ``max_tokens``."""
    values, v = [], MIN_TOKENS
    while v <= max_tokens:
        values.append(float(v))
        v *= 2
    return tuple(values)


def min_distinct(values: Sequence[float]) -> int:
    """Distinct values a half-width counts from: ``MIN_DISTINCT``, or all of ``values``."""
    return min(MIN_DISTINCT, len(values))


def seed_sd() -> float:
    """Pooled within-budget sd of two seeds: ``sqrt(mean((y0 - y1)^2 / 2))``."""
    return math.sqrt(statistics.fmean((a - b) ** 2 / 2 for a, b in SEED_PAIRS))


class Cost:
    """The simulated cost of the trials of one design run, in the order they run."""

    def __init__(self) -> None:
        self.cached = 0.0
        self.first = True

    def predict(self, tokens: float) -> float:
        """Seconds the next trial at ``tokens`` would take (see the module docstring)."""
        new = max(0.0, tokens - self.cached)
        one_off = ONE_OFF_S if self.first else 0.0
        return FIXED_S + PRETRAIN_S_PER_TOKEN * tokens + FEATURES_S_PER_TOKEN * new + one_off

    def run(self, tokens: float) -> float:
        """Seconds the trial at ``tokens`` takes; it fills the cache."""
        s = self.predict(tokens)
        self.cached = max(self.cached, tokens)
        self.first = False
        return s


@dataclass(frozen=True)
class Outcome:
    """A design's run to the target half-width."""

    compute_s: float
    """compute until it reached the target (all of it when it never did)"""
    trials: int
    reached: bool
    a: float
    """slope estimate at that point"""
    covered: bool
    """the 95% CI at that point covers the true slope"""
    true_se: float
    """the slope's true standard error for that design, ``SEED_SD / sqrt(Sxx)``"""


def _outcome(points: Sequence[Point], reached: bool, sd: float) -> Outcome:
    import pandas as pd

    from analysis.laws import fit_log_linear  # the report's fit, for a and its CI

    frame = pd.DataFrame({"t": [p.value for p in points], "y": [p.y for p in points]})
    fit = fit_log_linear(frame, "t", "y", law="bench")
    xs = np.log10([p.value for p in points])
    sxx = float(np.sum((xs - xs.mean()) ** 2))
    return Outcome(
        compute_s=sum(p.cost_s for p in points),
        trials=len(points),
        reached=reached,
        a=fit.a,
        covered=fit.a_ci[0] <= A <= fit.a_ci[1],
        true_se=sd / math.sqrt(sxx),
    )


def run_order(
    order: Sequence[tuple[float, int]], ys: dict, target: float, sd: float, floor: int
) -> Outcome:
    """Run trials in ``order`` until the half-width is <= ``target`` (>= ``floor`` distinct
    values)."""
    cost, points = Cost(), []
    for value, seed in order:
        points.append(Point(value, seed, ys[value, seed], cost.run(value)))
        if len({p.value for p in points}) < floor:
            continue
        hw = slope_half_width(points)
        if hw is not None and hw <= target * (1 + RTOL):
            return _outcome(points, True, sd)
    return _outcome(points, False, sd)


def run_adaptive(
    pairs: Sequence[tuple[float, int]],
    ys: dict,
    target: float,
    budget_s: float,
    sd: float,
    *,
    exact_costs: bool,
    slots: int,
) -> tuple[Outcome, str]:
    """The adaptive design until it stops; returns its outcome and its stop."""
    cost, points, left = Cost(), [], list(pairs)
    while True:
        cands = [Candidate(v, s, cost.predict(v) if exact_costs else None) for v, s in left]
        goal = target * (1 + RTOL)
        step = propose(points, cands, goal=goal, budget_s=budget_s, slots=slots)
        if step.stop is not None:
            return _outcome(points, step.stop != "budget", sd), step.stop
        for p in step.picks:
            points.append(Point(p.value, p.seed, ys[p.value, p.seed], cost.run(p.value)))
            left.remove((p.value, p.seed))


def repetition(
    rep: int,
    seeds: int,
    sd: float,
    exact_costs: bool,
    slots: int,
    design_seeds: int,
    values: Sequence[float],
) -> dict:
    """One repetition: the grid, the adaptive design and a random order on one draw of y
    (the candidates ``values``; the adaptive design may repeat a value ``design_seeds``
    times)."""
    noise = np.random.default_rng([rep, 0]).normal(0.0, sd, (max(seeds, design_seeds), len(values)))
    ys = {  # row s is seed s, the same draw whatever the number of seeds
        (v, s): A * math.log10(v) + B + float(noise[s, i])
        for s in range(len(noise))
        for i, v in enumerate(values)
    }
    floor = min_distinct(values)
    pairs = [(v, s) for v in values for s in range(seeds)]
    grid_cost = Cost()
    grid_points = [Point(v, s, ys[v, s], grid_cost.run(v)) for v, s in pairs]
    target = slope_half_width(grid_points)
    assert target is not None
    grid_total = sum(p.cost_s for p in grid_points)
    grid = run_order(pairs, ys, target, sd, floor)
    full = _outcome(grid_points, True, sd)
    shuffled = [pairs[i] for i in np.random.default_rng([rep, 1]).permutation(len(pairs))]
    rand = run_order(shuffled, ys, target, sd, floor)
    design_pairs = [(v, s) for v in values for s in range(design_seeds)]
    adaptive, stop = run_adaptive(
        design_pairs, ys, target, grid_total * (1 + 1e-9), sd, exact_costs=exact_costs, slots=slots
    )
    return {
        "target": target,
        "grid_total": grid_total,
        "grid": grid,
        "full": full,
        "random": rand,
        "adaptive": adaptive,
        "stop": stop,
    }


def best_possible(
    seeds: int, design_seeds: int, values: Sequence[float]
) -> tuple[float, list[int], str]:
    """The cheapest design of the candidates ``values`` (``design_seeds`` repeats per value at
    most) whose expected OLS half-width ``t_{n-2} * sd / sqrt(Sxx)`` is at most the grid's (every
    value x ``seeds``): its compute as a fraction of the grid's, its repeats per value, and how it
    was searched (every count vector when there are <= 6 million, else every design on exactly
    :func:`min_distinct` values). The noise sd cancels; costs as :class:`Cost`."""
    k, xs, floor = len(values), np.log10(values), min_distinct(values)
    grid_sxx = seeds * float(np.sum((xs - xs.mean()) ** 2))
    grid_hw = float(stats.t.ppf(0.975, k * seeds - 2)) / math.sqrt(grid_sxx)
    if (design_seeds + 1) ** k <= 6_000_000:
        axes = [np.arange(design_seeds + 1)] * k
        counts = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, k)
        how = "every design"
    else:
        inner = np.stack(
            np.meshgrid(*[np.arange(1, design_seeds + 1)] * floor, indexing="ij"), axis=-1
        ).reshape(-1, floor)
        blocks = []
        for support in itertools.combinations(range(k), floor):
            block = np.zeros((len(inner), k), dtype=int)
            block[:, list(support)] = inner
            blocks.append(block)
        counts = np.concatenate(blocks)
        how = f"every design on {floor} values"
    counts = counts[(counts > 0).sum(axis=1) >= floor]
    n = counts.sum(axis=1)
    sxx = counts @ xs**2 - (counts @ xs) ** 2 / n
    hw = stats.t.ppf(0.975, n - 2) / np.sqrt(np.maximum(sxx, 1e-300))
    per_trial = FIXED_S + PRETRAIN_S_PER_TOKEN * np.asarray(values)
    top = np.asarray(values)[k - 1 - np.argmax(counts[:, ::-1] > 0, axis=1)]  # largest run
    cost = counts @ per_trial + FEATURES_S_PER_TOKEN * top + ONE_OFF_S
    grid_cost = seeds * float(per_trial.sum()) + FEATURES_S_PER_TOKEN * values[-1] + ONE_OFF_S
    i = int(np.argmin(np.where(hw <= grid_hw * (1 + 1e-12), cost, np.inf)))
    return float(cost[i] / grid_cost), [int(c) for c in counts[i]], how


def _q(xs: Sequence[float]) -> tuple[float, float, float]:
    q1, med, q3 = np.percentile(np.asarray(xs, dtype=float), [25, 50, 75])
    return float(med), float(q1), float(q3)


def _row(name: str, outs: Sequence[Outcome], totals: Sequence[float]) -> str:
    med, q1, q3 = _q([o.compute_s for o in outs])
    rmed, rq1, rq3 = _q([o.compute_s / t for o, t in zip(outs, totals, strict=True)])
    trials = statistics.median(o.trials for o in outs)
    rmse = math.sqrt(statistics.fmean((o.a - A) ** 2 for o in outs))
    cover = statistics.fmean(o.covered for o in outs)
    se = statistics.median(o.true_se for o in outs)
    reached = statistics.fmean(o.reached for o in outs)
    return (
        f"{name:<22} {med:>8,.0f} [{q1:>7,.0f}, {q3:>7,.0f}]  {rmed:>5.2f} [{rq1:.2f}, {rq3:.2f}]"
        f"  {trials:>6g}  {reached:>7.0%}  {rmse:>7.4f}  {cover:>7.0%}  {se:>7.4f}"
    )


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> dict:
    """Run the benchmark, print its table; return the medians (for tests)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=None, help="repetitions (default 200; quick 20)")
    p.add_argument("--seeds", type=int, default=4, help="seeds per value (default 4)")
    p.add_argument("--costs", choices=("exact", "estimated"), default="exact",
                   help="candidate costs given exactly, or the rule's estimate")  # fmt: skip
    p.add_argument("--slots", type=int, default=1, help="trials proposed at once (default 1)")
    p.add_argument("--design-seeds", type=int, default=None,
                   help="repeats per value for the adaptive design (default: --seeds)")  # fmt: skip
    p.add_argument(
        "--max-tokens",
        type=int,
        default=MAX_TOKENS,
        help=f"largest candidate budget; candidates are the powers of 2 from {MIN_TOKENS} to "
        f"it (default {MAX_TOKENS}, at least {LEAST_MAX_TOKENS})",
    )
    p.add_argument("--quick", action="store_true", help="20 repetitions (< 30 s)")
    args = p.parse_args(argv)
    reps = args.reps if args.reps is not None else (20 if args.quick else 200)
    design_seeds = args.design_seeds if args.design_seeds is not None else args.seeds
    if min(reps, args.seeds, args.slots, design_seeds) < 1:
        p.error("--reps, --seeds, --design-seeds and --slots must be >= 1")
    if args.max_tokens < LEAST_MAX_TOKENS:
        p.error(
            f"--max-tokens must be >= {LEAST_MAX_TOKENS} (3 candidates from {MIN_TOKENS}), "
            f"got {args.max_tokens}"
        )
    values = candidate_values(args.max_tokens)
    sd = seed_sd()
    t0 = time.perf_counter()
    exact = args.costs == "exact"
    results = [
        repetition(r, args.seeds, sd, exact, args.slots, design_seeds, values) for r in range(reps)
    ]
    wall = time.perf_counter() - t0
    totals = [r["grid_total"] for r in results]
    n = len(values) * args.seeds
    out(
        f"design_bench: y = {A}*log10(T) + {B:.4f} + N(0, {sd:.4f}^2) (seed sd: results.md issue "
        f"13); {len(values)} budgets {values[0]:,.0f}..{values[-1]:,.0f} x {args.seeds} seeds = "
        f"{n} trials; cost "
        f"{FIXED_S:.1f} s + {PRETRAIN_S_PER_TOKEN:.6f} s/token + {FEATURES_S_PER_TOKEN:.6f} "
        f"s/uncached token (+{ONE_OFF_S} s once); adaptive: {design_seeds} seeds per value at "
        f"most, costs {args.costs}, slots {args.slots}; "
        f"{reps} reps in {wall:.1f} s"
    )
    hw_med, hw_q1, hw_q3 = _q([r["target"] for r in results])
    tot_med = statistics.median(totals)
    out(
        f"grid: {tot_med:,.0f} s of compute (median), final half-width {hw_med:.4f} "
        f"[{hw_q1:.4f}, {hw_q3:.4f}] = the target of every design"
    )
    out(
        f"{'design':<22} {'compute to target, s':>27}  {'/ grid':>17}  {'trials':>6}  "
        f"{'reached':>7}  {'a RMSE':>7}  {'CI cov':>7}  {'true se':>7}"
    )
    out(_row("adaptive", [r["adaptive"] for r in results], totals))
    out(_row("grid (first reach)", [r["grid"] for r in results], totals))
    out(_row("grid (all trials)", [r["full"] for r in results], totals))
    out(_row("random order", [r["random"] for r in results], totals))
    stops = {s: sum(r["stop"] == s for r in results) for s in ("goal", "candidates", "budget")}
    out(f"adaptive stops: {stops}")
    ratios = [r["adaptive"].compute_s / r["grid_total"] for r in results]
    ratio = statistics.median(ratios)
    verdict = "met" if ratio <= GOAL_RATIO else "NOT met"
    out(
        f"goal (adaptive compute <= {GOAL_RATIO:.0%} of the grid's, median): {verdict}: "
        f"median ratio {ratio:.3f}"
    )
    cover = statistics.fmean(r["adaptive"].covered for r in results)
    out(
        f"note: the design stops on the estimated (HC3) half-width; its 95% CI covered the true "
        f"slope in {cover:.0%} of reps (t-based nominal 95%, p = "
        f"{stats.binomtest(sum(r['adaptive'].covered for r in results), reps, 0.95).pvalue:.2g})"
    )
    bound = best_possible(args.seeds, design_seeds, values)
    if bound is not None:
        out(
            f"best possible (expected OLS half-width <= the grid's, cheapest repeats per value "
            f"{bound[1]} over {len(values)} values): {bound[0]:.3f} of the grid's compute"
        )
    return {
        "ratio": ratio,
        "bound": None if bound is None else bound[0],
        "stops": stops,
        "reps": reps,
        "wall_s": wall,
    }


if __name__ == "__main__":
    main()
