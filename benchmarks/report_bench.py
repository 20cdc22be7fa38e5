"""Benchmark: fits with bootstrap plus every dashboard for a results DB of 1,000 trials.

Target: <= 10 s on the 2-core CPU for the law fits with their checks (HC3, a
2000-resample case bootstrap, extrapolation, leave-one-out, saturating form and AIC) and all
pages (index, one page per sweep) -- what ``orchestrator report`` does.

The DB is SYNTHETIC, written by this script into a temporary folder: token sweeps of
``draft_train`` trials (acceptance length = 0.1*log10(tokens) + 0.7 + noise, two loss curves of
``--steps`` steps per trial) and one ``decode_bench`` sweep (b x k grid with throughput and the
CPU's measured peak FLOP/s and bandwidth, so the roofline is drawn), for timing only. Writing
the DB is not timed; the report is timed end to end, in process, after one warm-up run on a
small DB (imports of plotly, statsmodels, scipy are not counted).

    python -m benchmarks.report_bench [--trials 1000] [--steps 100] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from orchestrator.commands.report import report
from orchestrator.store.results import ResultsStore

TARGET_S = 10.0
BUDGETS = (0, 8192, 16384, 32768, 65536, 131072, 262144, 524288)


def _token_sweep(store: ResultsStore, name: str, n: int, steps: int, rng: np.random.Generator):
    spec = f"name: {name}\ngrid:\n  pretrain.tokens: {list(BUDGETS)}\n"
    sweep_id = store.upsert_sweep(name, "draft_train", spec, f"{name}.yaml")
    rows = [(f"{name}-{i:05d}", {}, {"pretrain.tokens": BUDGETS[i % len(BUDGETS)],
                                     "seed": i // len(BUDGETS)}) for i in range(n)]  # fmt: skip
    store.add_trials(sweep_id, rows)
    for t in store.trials(sweep_id):
        tokens = t.overrides["pretrain.tokens"]
        if rng.random() < 0.02:
            store.mark_failed(t.id, "RuntimeError: synthetic failure", 1.0)
            continue
        tau = 1.2 if tokens == 0 else 0.1 * math.log10(tokens) + 0.7
        tau += float(rng.normal(0, 0.02))
        store.log_metrics(
            t.id,
            {
                "acceptance_length": tau,
                "acceptance_length/humaneval": tau + 0.03,
                "acceptance_length/sharegpt": tau - 0.03,
            },
        )
        decay = np.exp(-np.arange(steps) / (steps / 3))
        store.log_metric_series(t.id, "pretrain/loss", (6 * decay + 2).tolist())
        store.log_metric_series(t.id, "sft/loss", (3 * decay + 1.5).tolist())
        store.mark_completed(t.id, 1.0)


def _decode_sweep(store: ResultsStore, n: int, rng: np.random.Generator) -> None:
    sweep_id = store.upsert_sweep("decode", "decode_bench", "name: decode\n", "decode.yaml")
    cells = [(b, k) for b in (1, 2, 4, 8, 16) for k in (2, 4, 8, 16, 32, 64)]
    rows = []
    for i in range(n):
        b, k = cells[i % len(cells)]
        cfg = {"decode": {"batch_size": b, "num_draft_tokens": k, "depth": 3, "topk": 4},
               "target": {"model": "smollm2-135m-instruct", "dtype": "float32"},
               "seed": i // len(cells)}  # fmt: skip
        rows.append((f"decode-{i:05d}", cfg, {"decode.batch_size": b, "seed": i // len(cells)}))
    store.add_trials(sweep_id, rows)
    for t in store.trials(sweep_id):
        d = t.config["decode"]
        ar = 20.0 * d["batch_size"] ** 0.8
        tps = ar * (1.5 - 0.01 * d["num_draft_tokens"] * d["batch_size"] ** 0.5)
        store.log_metrics(
            t.id,
            {
                "tokens_per_s": tps * float(rng.normal(1, 0.02)),
                "ar_tokens_per_s": ar,
                "speedup": tps / ar,
                "acceptance_length": 1.3,
                "hw.peak_flops": 1.0e11,
                "hw.bandwidth": 1.0e10,
                "prompt_tokens_mean": 64.0,
            },
        )
        store.mark_completed(t.id, 1.0)


def build_db(root: Path, trials: int, steps: int) -> int:
    """Write the synthetic DB under ``root``: 80% token-sweep trials in 4 sweeps, 20% decode."""
    rng = np.random.default_rng(0)
    store = ResultsStore.sqlite_under(root)
    n_decode = trials // 5
    per_sweep = (trials - n_decode) // 4
    for i in range(4):
        _token_sweep(store, f"tokens-{i}", per_sweep, steps, rng)
    _decode_sweep(store, trials - 4 * per_sweep, rng)
    n = sum(len(store.trials(s.id)) for s in store.list_sweeps())
    store.close()
    return n


def timed_report(root: Path, out: Path) -> float:
    """Seconds for ``orchestrator report --run-root root --out out`` in process."""
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        report(None, out=out, run_root=root, db_url=None)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000, help="trials in the DB (default 1000)")
    parser.add_argument("--steps", type=int, default=100, help="loss-curve steps per stage")
    parser.add_argument("--keep", type=Path, default=None, help="keep the DB and pages here")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="report-bench-"))
    root = args.keep or tmp
    try:
        build_db(tmp / "warm", 50, 5)
        timed_report(tmp / "warm", tmp / "warm-out")  # imports and first-call costs
        t0 = time.perf_counter()
        n = build_db(root / "runs", args.trials, args.steps)
        write_s = time.perf_counter() - t0
        seconds = timed_report(root / "runs", root / "site")
        size = sum(p.stat().st_size for p in (root / "site").rglob("*.html"))
        print(f"synthetic DB: {n} trials in 5 sweeps (4 token sweeps with {args.steps}-step loss "
              f"curves, 1 decode sweep); written in {write_s:.1f} s (not timed)")  # fmt: skip
        print(f"report (fits with 2000-resample bootstrap + 6 pages, {size / 1e6:.1f} MB): "
              f"{seconds:.2f} s; target <= {TARGET_S:.0f} s: {seconds / TARGET_S:.2f}x of the "
              f"budget, {'OK' if seconds <= TARGET_S else 'OVER'}")  # fmt: skip
        if args.keep:
            print(f"pages: {root / 'site' / 'index.html'}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
