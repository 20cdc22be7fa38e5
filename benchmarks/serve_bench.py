"""Benchmark: a trained draft served by vLLM against vLLM without it, this platform's engine and
HF ``generate``, in one run on this machine.

1. vLLM (the ``serve_bench`` workload, one trial): start-up time of each server; output tokens/s
   and time per output token at each batch size b (``vllm bench serve``) with and without the
   draft; acceptance length in vLLM's definition and ours with CIs; greedy mismatches of the
   speculating server against the plain one;
2. this platform's engine on the same prompts, same draft, a chain of the same K: tokens/s at
   each b, its own AR loop at each b, HF ``generate`` at b = 1 (``decode_bench``), with torch on
   as many threads as vLLM computes on (``--threads``, 1 on a 2-core machine: vLLM keeps one core
   for its API server).

Prints one table (engine, b, tokens/s, speedup over the same engine without speculation, ratio
to vLLM without speculation at that b) and writes ``<out>/serve_bench.json``.

    python -m benchmarks.serve_bench --run-root runs                  # the 131K draft of `make run`
    python -m benchmarks.serve_bench --run-root runs --tokens 8192 --batch-sizes 1,4
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import harness


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    harness.add_run_root(p, "where `make run` wrote")
    p.add_argument("--sweep", default="tokens", help="the draft_train sweep (default: tokens)")
    p.add_argument("--tokens", type=int, default=131072, help="pretraining budget of the draft")
    p.add_argument("--seed", type=int, default=0, help="seed of the draft_train trial")
    p.add_argument("--batch-sizes", default="1,4,16", help="comma-separated b (default 1,4,16)")
    p.add_argument("--num-prompts", type=int, default=16, help="prompts (default 16)")
    p.add_argument("--max-new-tokens", type=int, default=48, help="tokens per request")
    p.add_argument("--k", type=int, default=3, help="draft tokens per step, K (default 3)")
    harness.add_threads(p, 1, "torch threads of this engine")
    harness.add_out(p, Path("runs-serve/bench"), "output folder")
    a = p.parse_args(argv)
    try:
        a.batch_sizes = sorted({int(b) for b in a.batch_sizes.split(",")})
    except ValueError:
        harness.refuse(
            "serve_bench",
            f"--batch-sizes {a.batch_sizes!r} is not a comma-separated list of integers",
        )
    if min(a.batch_sizes) < 1 or a.num_prompts < 1 or a.k < 1 or a.threads < 1:
        harness.refuse(
            "serve_bench", "--batch-sizes, --num-prompts, --k and --threads must be >= 1"
        )
    return a


def engine_rows(cfg: Any, folder: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """This platform's engine (chain of K) and its AR loop at each b; HF generate at b = 1."""
    from workloads.decode_bench.config import BaselineConfig
    from workloads.measure import decode as engine_bench
    from workloads.serving.bench import engine_config

    rows = []
    for b in args.batch_sizes:
        base = engine_config(cfg, folder)
        dcfg = base.model_copy(
            update={
                "decode": base.decode.model_copy(update={"batch_size": b}),
                "baselines": BaselineConfig(autoregressive=True, hf_generate=b == 1),
                "warmup": 1,
            }
        )
        m = engine_bench.run(
            dcfg, cache_dir=args.run_root / "cache", out_dir=args.out / f"engine-b{b}"
        ).metrics
        rows.append({"engine": "this engine, speculative", "b": b,
                     "tokens_per_s": m["tokens_per_s"], "speedup": m["speedup"],
                     "acceptance_length": m["acceptance_length"],
                     "mismatches": m["mismatches"]})  # fmt: skip
        rows.append(
            {"engine": "this engine, AR loop", "b": b, "tokens_per_s": m["ar_tokens_per_s"]}
        )
        if b == 1:
            rows.append({"engine": "HF generate", "b": 1, "tokens_per_s": m["hf_tokens_per_s"]})
    return rows


def main(argv: list[str]) -> int:
    args = parse(argv)
    import torch

    from workloads.serving.config import ServeBenchConfig

    torch.set_num_threads(args.threads)
    cfg = ServeBenchConfig(
        seed=args.seed,
        draft={"source": "sweep", "sweep": args.sweep},
        pretrain={"tokens": args.tokens},
        serve={"batch_sizes": args.batch_sizes, "max_new_tokens": args.max_new_tokens,
               "num_speculative_tokens": args.k},
        prompts={"num_prompts": args.num_prompts},
    )  # fmt: skip
    folder = harness.served_draft("serve_bench", cfg, args.run_root)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    served = harness.serve(cfg, args.run_root, args.out / "vllm")
    rows: list[dict[str, Any]] = []
    for b in args.batch_sizes:
        rows.append({"engine": "vLLM, no draft", "b": b,
                     "tokens_per_s": served[f"baseline.tokens_per_s/b{b}"]})  # fmt: skip
        rows.append({"engine": "vLLM, speculative", "b": b,
                     "tokens_per_s": served[f"tokens_per_s/b{b}"],
                     "speedup": served[f"speedup/b{b}"]})  # fmt: skip
    rows += engine_rows(cfg, folder, args)
    plain = {r["b"]: r["tokens_per_s"] for r in rows if r["engine"] == "vLLM, no draft"}
    print(f"\ndraft {folder} (pretrain.tokens {args.tokens}, seed {args.seed}), K = {args.k}, "
          f"{args.num_prompts} prompts x {args.max_new_tokens} tokens, this engine on "
          f"{args.threads} thread(s)")  # fmt: skip
    print(f"vLLM start-up: {served['baseline.startup_s']:.0f} s without the draft, "
          f"{served['startup_s']:.0f} s with it")  # fmt: skip
    print(f"acceptance length: vLLM {served['acceptance_length']:.3f} "
          f"[{served['acceptance_length_ci_low']:.3f}, {served['acceptance_length_ci_high']:.3f}]"
          f" (vLLM's own definition {served['acceptance_length_vllm']:.3f}), this engine "
          f"{served['engine.acceptance_length']:.3f} "
          f"[{served['engine.acceptance_length_ci_low']:.3f}, "
          f"{served['engine.acceptance_length_ci_high']:.3f}]; greedy mismatches vs plain vLLM "
          f"{served['mismatches']:.0f}, near-ties {served['near_ties']:.0f}")  # fmt: skip
    print(f"{'engine':28s} {'b':>3s} {'tokens/s':>9s} {'speedup':>8s} {'vs vLLM plain':>14s}")
    for r in sorted(rows, key=lambda r: (r["b"], r["engine"])):
        sp = f"{r['speedup']:.2f}" if "speedup" in r else ""
        print(f"{r['engine']:28s} {r['b']:3d} {r['tokens_per_s']:9.1f} {sp:>8s} "
              f"{r['tokens_per_s'] / plain[r['b']]:14.2f}")  # fmt: skip
    out = {"args": {k: str(v) for k, v in vars(args).items()}, "served": served, "rows": rows,
           "wall_s": time.perf_counter() - t0}  # fmt: skip
    harness.write_json(args.out / "serve_bench.json", out)
    print(f"wrote {args.out / 'serve_bench.json'} ({out['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
