"""What ``orchestrator plan`` says on the seed paper's shapes and hardware, from CPU-measured laws.

For each target shape (llama-3-8b, qwen2.5-72b) on each datasheet GPU (h100, h200, h800) it
makes the plan (:func:`orchestrator.planning.plan.make_plan`, nothing written) from a run root's
token and decode sweeps (after ``make run`` and ``make batch``) and prints, per batch size, the
planned k (the argmax of the roofline's throughput of the measured, rescaled tau(k), within the
decode sweep's k range) beside the roofline's k_opt (the smallest k with I(b, k) >= I_crit, Scylla
Sec. 3.2) and, for Qwen2.5-72B on one H800 with a 10K-token prefix, the paper's Eq. 4. Then the
token law's prediction at the paper grid's budgets (1B..100B tokens, ``sweeps/paper/tokens.yaml``)
and the pretraining tokens the plan recommends with the training hours it costs for that target.
Every figure is labelled: the laws were measured on a 135M target on a CPU.

    python -m benchmarks.plan_paper --run-root runs
"""

from __future__ import annotations

import argparse

from analysis.budget_effect import budget_effect
from benchmarks import harness
from orchestrator.planning.inputs import PlanOptions
from orchestrator.planning.plan import make_plan
from workloads.roofline import eq4_paper, get_profile, k_opt, load_model_shape

SHAPES = ("llama-3-8b", "qwen2.5-72b")
HARDWARE = ("h100", "h200", "h800")
BATCH = (1, 8, 64)
PAPER_BUDGETS = (1e9, 2e9, 5e9, 1e10, 2e10, 5e10, 1e11)
PAPER_PREFIX = 10240


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_run_root(ap)
    ap.add_argument("--resamples", type=int, default=300)
    ap.add_argument("--prefix", type=int, default=PAPER_PREFIX, help="tokens in each KV cache")
    args = ap.parse_args(argv)
    with harness.results(args.run_root) as store:
        first = None
        for shape in SHAPES:
            for hw_name in HARDWARE:
                opts = PlanOptions(
                    model=shape,
                    hardware=hw_name,
                    batch_mix={b: 1.0 / len(BATCH) for b in BATCH},
                    prefix=args.prefix,
                    n_resamples=args.resamples,
                    cache_dir=args.run_root / "cache",
                )
                plan = make_plan(store, opts)
                first = first or plan
                _print_plan(plan, shape, hw_name, args.prefix)
        assert first is not None
        _print_budgets(first)
    return 0


def _print_plan(plan: dict, shape: str, hw_name: str, prefix: int) -> None:
    ks = plan["laws"]["tau_k"]["ks"]
    hw, model = get_profile(hw_name), load_model_shape(shape)
    t = plan["training"]
    print(
        f"\n{shape} on one {hw_name} (prefix {prefix:,}; k searched in the decode sweep's "
        f"{min(ks):g}..{max(ks):g}): train {t['tokens']:,.0f} tokens, {t['hours']:.3g} h "
        f"({plan['cost_basis']}, stop {t['stop']}); mix speedup "
        f"{plan['serving']['mix_speedup']:.2f} [{plan['serving']['mix_speedup_ci'][0]:.2f}, "
        f"{plan['serving']['mix_speedup_ci'][1]:.2f}]"
    )
    paper = shape == "qwen2.5-72b" and hw_name == "h800" and prefix == PAPER_PREFIX
    head = f"  {'b':>4} {'planned k':>10} {'95%':>10} {'roofline k_opt':>15}"
    print(head + (f" {'paper Eq. 4':>12}" if paper else ""))
    for r in plan["serving"]["rows"]:
        b = r["batch_size"]
        ko = k_opt(model, hw, b, prefix)
        ci = f"[{r['k_ci'][0]:g}, {r['k_ci'][1]:g}]"
        line = f"  {b:>4} {r['k']:>10} {ci:>10} {ko.k:>15}{'' if ko.reached else '+'}"
        print(line + (f" {eq4_paper(b):>12.0f}" if paper else ""))
    for label in plan["labels"]:
        print(f"  EXTRAPOLATED: {label}")


def _print_budgets(plan: dict) -> None:
    law = plan["laws"]["tokens"]
    shared = budget_effect(law["x"], law["y"])
    pred = shared.predict(list(PAPER_BUDGETS))
    print(
        f"\nthe token law (sweep {law['sweep']}, measured up to {max(law['x']):,.0f} tokens on "
        f"{plan['targets']['measured']}) at the paper grid's budgets, EXTRAPOLATED:"
    )
    for i, t in enumerate(PAPER_BUDGETS):
        print(
            f"  {t:>17,.0f} tokens: tau {pred['mean'][i]:.3f} "
            f"[{pred['value_lo'][i]:.3f}, {pred['value_hi'][i]:.3f}]"
        )


if __name__ == "__main__":
    raise SystemExit(main())
