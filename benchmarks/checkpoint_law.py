"""Benchmark report: does a law fitted on one run's checkpoints predict separately trained budgets?

Reads two finished draft_train sweeps from the results DB: ``--curves`` (trials run with
``eval.during_training_every``, default ``eagle3-curves``) and ``--budgets`` (the same recipe
trained separately at each budget, default ``eagle3-factorial``), matched by variant. Per
variant it fits ``acceptance_length = a*log10(T) + b`` (HC3, :func:`analysis.laws.fit_log_linear`)
on the pretraining checks of the curve trial (T = pretraining tokens seen at the check) and on
the separately trained trials' final acceptance lengths, and prints both slopes with their 95%
CIs, the checkpoint law's prediction beside the mean final figure at each budget, the mean
signed and absolute error, and the curve's last check (the end of SFT, on
``during_training_prompts`` prompts per set) beside the same trial's final figure (every
prompt). A checkpoint during pretraining has had no SFT and no decayed learning rate, so the
two laws need not agree: the report says by how much they differ, never which is right.

    python -m benchmarks.checkpoint_law --run-root R
        [--curves eagle3-curves --budgets eagle3-factorial]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import pandas as pd

from analysis.laws import LogLinearFit, fit_log_linear
from benchmarks import harness
from orchestrator.store.results import ResultsStore
from workloads.result import CHECK_TOKENS, CHECK_Y

X, Y = "pretrain.tokens", "acceptance_length"


def _ci(f: LogLinearFit) -> str:
    return f"{f.a:.4f} [{f.a_ci[0]:.4f}, {f.a_ci[1]:.4f}], R² {f.r2:.2f}, n = {f.n}"


def compare(store: ResultsStore, curves: str, budgets: str) -> list[str]:
    """The report's lines (see the module docstring)."""
    curves_info, cdf = harness.sweep_metrics(store, curves)
    _, bdf = harness.sweep_metrics(store, budgets)
    trials = {t.key: t for t in store.trials(curves_info.id)}
    lines = []
    for _, row in cdf.iterrows():
        variant = str(row.get("variant", "-"))
        t = trials[row["trial_key"]]
        xs = store.metric_series(t.id, f"pretrain/{CHECK_TOKENS}")
        ys = store.metric_series(t.id, f"pretrain/{CHECK_Y}")
        sft_y = store.metric_series(t.id, f"sft/{CHECK_Y}")
        if len(xs) < 3:
            lines.append(f"{variant}: fewer than 3 pretraining checks; nothing to fit")
            continue
        ck = fit_log_linear(pd.DataFrame({X: xs, Y: ys}), X, Y, law="tokens")
        mine = bdf[bdf["variant"] == variant] if "variant" in bdf else bdf
        fin = fit_log_linear(mine, X, Y, law="tokens")
        lines.append(f"{variant}: slope on one run's pretraining checks  a = {_ci(ck)}")
        lines.append(f"{variant}: slope on separately trained budgets a = {_ci(fin)}")
        means = mine[mine[X] > 0].groupby(X)[Y].mean()
        pred = ck.predict(means.index.to_numpy(dtype=float))["mean"].to_numpy()
        err = pred - means.to_numpy()
        for tokens, p, m in zip(means.index, pred, means.to_numpy(), strict=True):
            lines.append(f"  T = {int(tokens):>7,}: checkpoint law {p:.4f}, trained {m:.4f} "
                         f"({p - m:+.4f})")  # fmt: skip
        lines.append(f"  mean error {np.mean(err):+.4f}, mean |error| {np.mean(np.abs(err)):.4f}")
        if sft_y:
            final = float(row[Y])
            lines.append(f"  the curve's last check (end of SFT, few prompts) {sft_y[-1]:.4f}; "
                         f"the trial's final figure (every prompt) {final:.4f}")  # fmt: skip
        checks_s = float(row.get("wall_s/checks", math.nan))
        total = float(row.get("wall_s/total", math.nan))
        lines.append(f"  checks: {len(xs) + len(sft_y)} in {checks_s:.0f} s of the trial's "
                     f"{total:.0f} s ({checks_s / total:.0%})")  # fmt: skip
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    harness.add_run_root(ap, default=None, required=True)
    ap.add_argument("--curves", default="eagle3-curves")
    ap.add_argument("--budgets", default="eagle3-factorial")
    a = ap.parse_args()
    with harness.results(a.run_root) as store:
        print("\n".join(compare(store, a.curves, a.budgets)))


if __name__ == "__main__":
    main()
