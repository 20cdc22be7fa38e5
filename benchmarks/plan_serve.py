"""Benchmark: ``orchestrator plan``'s serving advice against vLLM, in one run on this machine.

Reads a plan (``<run root>/<plan>/plan.json`` and its ``vllm_speculative_config.json``) and
serves a draft of the plan's token sweep in vLLM (the ``serve_bench`` workload, one trial) at
each batch size b of the plan's mix:

1. a server without speculation (the baseline of every speedup below);
2. a server drafting a fixed K (``--k``, a chain) at every b: its measured speedup beside the
   plan's predicted speedup had it planned k = K + 1 (``speedup_by_k``), its acceptance length
   beside this platform's engine's on the same prompts;
3. where the plan speculates at some b (its vLLM config is not ``null``), a server loaded with
   the plan's ``speculative_config`` as it was written (its per-batch-size schedule): its
   speedup at each b over its own plain server of the same run beside the plan's predicted
   speedup and its 95% interval; ``-`` (None in the JSON) where the plan is not served.

The plan's speedup is over its roofline's autoregressive step in this platform's tree engine
(its decode sweep's tree); vLLM drafts a chain. Prints one table and writes
``<out>/plan_serve.json``.

    orchestrator plan --run-root runs          # after `make run` and a decode sweep
    python -m benchmarks.plan_serve --run-root runs --plan plan-tokens --k 3
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import harness


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    harness.add_run_root(p, "where the plan was made")
    p.add_argument("--plan", default="plan-tokens", help="the plan's name (default: plan-tokens)")
    p.add_argument("--sweep", default=None, help="the draft_train sweep (default: the plan's)")
    p.add_argument("--tokens", type=int, default=131072, help="pretraining budget of the draft")
    p.add_argument("--seed", type=int, default=0, help="seed of the draft_train trial")
    p.add_argument("--k", type=int, default=3, help="fixed K of server 2 (default 3)")
    p.add_argument("--num-prompts", type=int, default=8, help="prompts (default 8)")
    p.add_argument("--max-new-tokens", type=int, default=48, help="tokens per request")
    p.add_argument("--eager", action="store_true", help="vLLM --enforce-eager (faster start)")
    harness.add_out(p, Path("runs-serve/plan"), "output folder")
    a = p.parse_args(argv)
    if a.k < 1 or a.num_prompts < 1 or a.max_new_tokens < 1:
        harness.refuse("plan_serve", "--k, --num-prompts and --max-new-tokens must be >= 1")
    folder = a.run_root / a.plan
    for name in ("plan.json", "vllm_speculative_config.json"):
        if not (folder / name).is_file():
            harness.refuse(
                "plan_serve",
                f"no {folder / name}. Fix: orchestrator plan --run-root {a.run_root} first",
            )
    return a


def predicted(plan: dict[str, Any], k: int) -> dict[int, dict[str, Any]]:
    """Per planned b: the plan's k, speedup and interval, and its speedup at ``k`` (None where
    ``k`` is not a candidate)."""
    out = {}
    for r in plan["serving"]["rows"]:
        by_k = {int(kk): float(v) for kk, v in (r.get("speedup_by_k") or {}).items()}
        out[int(r["batch_size"])] = {
            "k": r["k"], "speedup": r["speedup"], "speedup_ci": r["speedup_ci"],
            "speedup_at_fixed_k": by_k.get(k),
        }  # fmt: skip
    return out


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def main(argv: list[str]) -> int:
    a = parse(argv)
    from workloads.serving.config import ServeBenchConfig

    folder = a.run_root / a.plan
    plan = json.loads((folder / "plan.json").read_text())
    snippet = json.loads((folder / "vllm_speculative_config.json").read_text())
    pred = predicted(plan, a.k + 1)
    bs = sorted(pred)
    base = {  # the plan's target and token sweep: the draft is served on what it was trained on
        "seed": a.seed, "draft": {"source": "sweep", "sweep": a.sweep or plan["sweeps"]["tokens"]},
        "target": {"model": plan["targets"]["measured"]},
        "pretrain": {"tokens": a.tokens}, "prompts": {"num_prompts": a.num_prompts},
    }  # fmt: skip
    serve = {"batch_sizes": bs, "max_new_tokens": a.max_new_tokens, "enforce_eager": a.eager}
    fixed = ServeBenchConfig(**base, serve=serve | {"num_speculative_tokens": a.k})
    harness.served_draft("plan_serve", fixed, a.run_root)
    a.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    m_fixed = harness.serve(fixed, a.run_root, a.out / f"k{a.k}")
    m_plan: dict[str, float] = {}
    if snippet is not None:
        sched = [tuple(r) for r in snippet["num_speculative_tokens_per_batch_size"]]
        cfg = ServeBenchConfig(
            **base,
            serve=serve
            | {
                "num_speculative_tokens": snippet["num_speculative_tokens"],
                "schedule": sched,
                "compare_engine": False,
            },
        )  # fmt: skip  its own plain server: speedups in one run
        m_plan = harness.serve(cfg, a.run_root, a.out / "plan")
    rows = []
    for b in bs:
        p, plain = pred[b], m_fixed[f"baseline.tokens_per_s/b{b}"]
        rows.append({
            "b": b, "plan_k": p["k"], "plan_speedup": p["speedup"],
            "plan_speedup_ci": p["speedup_ci"],
            "measured_plan_config": m_plan[f"speedup/b{b}"] if m_plan else None,  # not served
            "served_plan_k": (m_plan[f"num_speculative_tokens/b{b}"] + 1 if m_plan else 1),
            "predicted_fixed_k": p["speedup_at_fixed_k"], "measured_fixed_k": m_fixed[
                f"speedup/b{b}"], "baseline_tokens_per_s": plain,
        })  # fmt: skip
    what = "null, the target alone" if snippet is None else "a per-batch-size schedule"
    print(f"\nplan {folder} (vLLM config: {what}); draft pretrain.tokens {a.tokens}, seed "
          f"{a.seed}; acceptance at K = {a.k}: {m_fixed['acceptance_length']:.3f} (this engine "
          f"{m_fixed['engine.acceptance_length']:.3f}), greedy "
          f"mismatches {m_fixed['mismatches']:.0f}")  # fmt: skip
    print(f"{'b':>4s} {'plan k':>6s} {'predicted':>22s} {'measured':>9s}   "
          f"{'predicted k=' + str(a.k + 1):>14s} {'measured K=' + str(a.k):>12s}")  # fmt: skip
    for r in rows:
        lo, hi = (float("nan") if x is None else x for x in r["plan_speedup_ci"])
        fk, mp = (_num(r[c]) for c in ("predicted_fixed_k", "measured_plan_config"))
        print(f"{r['b']:4d} {r['plan_k']:6d} {r['plan_speedup']:6.2f} [{lo:5.2f}, {hi:5.2f}]   "
              f"{mp:>9s}   {fk:>14s} "
              f"{r['measured_fixed_k']:12.2f}")  # fmt: skip
    out = {
        "args": {k: str(v) for k, v in vars(a).items()},
        "plan_config": snippet,
        "rows": rows,
        "fixed_k": m_fixed,
        "plan_served": m_plan,
        "wall_s": time.perf_counter() - t0,
    }
    harness.write_json(a.out / "plan_serve.json", out)
    print(f"wrote {a.out / 'plan_serve.json'} ({out['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
