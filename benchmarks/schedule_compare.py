"""Benchmark report: the same token-budget grid under cosine vs wsd-fork, from the results DB.

Reads two finished sweeps (default ``tokens`` and ``tokens-wsd``) and prints, per arm:
pretraining tokens processed by the whole grid (what the trials themselves trained; a wsd-fork
trunk reused from the cache counts once), that total over the largest budget times the number
of seeds (the goal is <= 1.3x), the summed pretraining wall seconds, the sweep's wall time
(first trial start to last trial end), the feature-cache hit rate, and the acceptance length
per budget (mean over seeds) side by side with the difference.

    python -m benchmarks.schedule_compare --run-root runs [--cosine tokens --wsd tokens-wsd]
"""

from __future__ import annotations

import argparse
import math

import pandas as pd

from benchmarks import harness
from orchestrator.store.results import ResultsStore


def arm(store: ResultsStore, name: str) -> tuple[pd.DataFrame, dict[str, float]]:
    """The completed trials of sweep ``name`` and its totals."""
    info, df = harness.sweep_metrics(store, name)
    done = df.copy()
    trials = [t for t in store.trials(info.id) if t.state == "completed"]
    starts = [t.started_at for t in trials if t.started_at]
    ends = [t.finished_at for t in trials if t.finished_at]
    trained_col = "pretrain.tokens_trained" if "pretrain.tokens_trained" in done else None
    trained = done[trained_col] if trained_col else done["pretrain.tokens_seen"]
    empty = pd.Series(dtype=float)
    stages = ("pretrain", "sft")
    hits = sum(done.get(f"features/{s}_hits", empty).sum() for s in stages)
    misses = sum(done.get(f"features/{s}_misses", empty).sum() for s in stages)
    seeds = done["seed"].nunique()
    largest = float(done["pretrain.tokens"].max())
    totals = {
        "trials": float(len(done)),
        "pretrain_tokens_trained": float(trained.sum()),
        "ratio_to_largest_budget": float(trained.sum()) / (largest * seeds)
        if largest
        else math.nan,
        "pretrain_wall_s": float(done["wall_s/pretrain"].sum()),
        "sweep_wall_s": (max(ends) - min(starts)).total_seconds() if starts and ends else math.nan,
        "cache_hit_rate": hits / (hits + misses) if hits + misses else math.nan,
    }
    return done, totals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    harness.add_run_root(ap)
    ap.add_argument("--cosine", default="tokens", help="sweep trained with schedule cosine")
    ap.add_argument("--wsd", default="tokens-wsd", help="the same grid with schedule wsd-fork")
    args = ap.parse_args()
    frames, rows = {}, []
    with harness.results(args.run_root) as store:
        for label, name in (("cosine", args.cosine), ("wsd-fork", args.wsd)):
            frames[label], totals = arm(store, name)
            rows.append({"arm": label, "sweep": name, **totals})
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:,.3f}"))
    per = {
        label: f.groupby("pretrain.tokens")["acceptance_length"].agg(["mean", "std", "count"])
        for label, f in frames.items()
    }
    both = per["cosine"].join(per["wsd-fork"], lsuffix="_cosine", rsuffix="_wsd", how="outer")
    both["diff"] = both["mean_wsd"] - both["mean_cosine"]
    print("\nacceptance length per budget (mean, sd over seeds)")
    print(both.to_string(float_format=lambda v: f"{v:.4f}"))
    wall = rows[1]["pretrain_wall_s"] / rows[0]["pretrain_wall_s"]
    tokens = rows[1]["pretrain_tokens_trained"] / rows[0]["pretrain_tokens_trained"]
    print(f"\nwsd-fork / cosine: pretraining tokens {tokens:.3f}x, pretraining wall {wall:.3f}x")


if __name__ == "__main__":
    main()
