"""A serving sweep's speedups per batch size: the best K at each b (k_opt(b) measured in a
serving engine), the rows Thm 1.3's speedup law is fitted on, and where the speedup reaches 1
along the served drafts' budgets.

Input: the wide trial table of a ``serve_bench`` sweep (one row per trial, columns ``state``,
``speedup/b{b}``, ``tokens_per_s/b{b}``, ``baseline.tokens_per_s/b{b}``,
``num_speculative_tokens/b{b}``, ``bench.acceptance_length/b{b}``; docs of
:mod:`workloads.serving.report`). Every speedup is a trial's speculating server over the plain
server measured in the same trial.

Pure functions over pandas tables: no I/O.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analysis.break_even import Crossing, crossing_budget
from analysis.laws import LogLinearFit, fit_log_linear

__all__ = [
    "SERVING_BEST_COLUMNS",
    "batch_sizes",
    "best_k_per_batch",
    "budget_crossings",
    "has_serving_speedups",
    "numeric",
    "serving_points",
]

_SPEEDUP = re.compile(r"^speedup/b(\d+)$")

SERVING_BEST_COLUMNS = (
    "batch_size",
    "best_num_speculative_tokens",
    "speedup",
    "speedup_std",
    "tokens_per_s",
    "baseline_tokens_per_s",
    "acceptance_length",
    "n_trials",
    "n_k",
    "best_k_at_edge",
    "speedup_by_k",
)
"""columns of :func:`best_k_per_batch`"""


def batch_sizes(df: pd.DataFrame, metric: str = "speedup") -> list[int]:
    """The batch sizes b of the table's ``<metric>/b{b}`` columns, sorted."""
    pattern = re.compile(rf"^{re.escape(metric)}/b(\d+)$")
    return sorted(int(m.group(1)) for c in df.columns if (m := pattern.match(str(c))))


def has_serving_speedups(df: pd.DataFrame) -> bool:
    """Whether the table holds a serving sweep's per-b speedups."""
    return any(_SPEEDUP.match(str(c)) for c in df.columns)


def numeric(df: pd.DataFrame, col: str) -> pd.Series:
    """Column ``col`` as float64 (non-numbers NaN); all NaN when the table lacks it."""
    if col not in df.columns:
        return pd.Series(np.nan, index=df.index, dtype="float64")
    return pd.to_numeric(df[col], errors="coerce").astype("float64")


def serving_points(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (completed trial, batch size) with a finite speedup.

    Columns: ``trial_key`` (when the table has it), ``pretrain.tokens`` (the served draft's
    budget; NaN when the table lacks it), ``batch_size`` (the client's concurrency b),
    ``num_speculative_tokens`` (K drafted at b: ``num_speculative_tokens/b{b}``, else the
    trial's ``serve.num_speculative_tokens`` column; NaN when neither is recorded),
    ``schedule`` (True for a trial whose K differs between its b: a ``serve.schedule``),
    ``speedup`` (output tokens/s over the same trial's plain server), ``tokens_per_s`` and
    ``baseline_tokens_per_s`` (output tokens/s of the two servers), ``acceptance_length``
    (vLLM's in this platform's definition, the trial's greedy pass: output tokens after the
    first per verification step; vLLM's own count at b, ``bench.acceptance_length/b{b}``, only
    where the trial lacks it). Empty (same columns) when the table has no serving speedups or
    no completed trial.
    """
    columns = [
        "trial_key",
        "pretrain.tokens",
        "batch_size",
        "num_speculative_tokens",
        "schedule",
        "speedup",
        "tokens_per_s",
        "baseline_tokens_per_s",
        "acceptance_length",
    ]
    done = df[df["state"] == "completed"] if "state" in df.columns else df
    bs = batch_sizes(done)
    fixed_k = numeric(done, "serve.num_speculative_tokens")
    ks = {b: numeric(done, f"num_speculative_tokens/b{b}").fillna(fixed_k) for b in bs}
    by_trial = pd.DataFrame(ks, index=done.index)
    schedule = by_trial.nunique(axis=1) > 1
    frames = []
    for b in bs:
        part = pd.DataFrame(
            {
                "trial_key": done.get("trial_key", pd.NA),
                "pretrain.tokens": numeric(done, "pretrain.tokens"),
                "batch_size": b,
                "num_speculative_tokens": ks[b],
                "schedule": schedule,
                "speedup": numeric(done, f"speedup/b{b}"),
                "tokens_per_s": numeric(done, f"tokens_per_s/b{b}"),
                "baseline_tokens_per_s": numeric(done, f"baseline.tokens_per_s/b{b}"),
                "acceptance_length": numeric(done, "acceptance_length").fillna(
                    numeric(done, f"bench.acceptance_length/b{b}")
                ),
            },
            index=done.index,
        )
        frames.append(part[np.isfinite(part["speedup"]) & (part["speedup"] > 0)])
    if not frames:
        return pd.DataFrame(columns=columns)
    return pd.concat(frames, ignore_index=True)[columns]


def best_k_per_batch(points: pd.DataFrame) -> pd.DataFrame:
    """The fixed K with the highest mean speedup at each batch size (ties: the smaller K).

    ``points``: :func:`serving_points` of one draft and condition; ``schedule`` trials (K by
    the running batch size) and points without a K are left out. A cell is one (b, K); its
    figures are means over its trials (seeds, repeats). Columns (:data:`SERVING_BEST_COLUMNS`),
    one row per b, sorted: ``best_num_speculative_tokens`` (K), ``speedup`` (mean of the
    trials' speedups) and ``speedup_std`` (ddof=1, NaN for one trial), ``tokens_per_s``,
    ``baseline_tokens_per_s`` and ``acceptance_length`` (means) of the best cell; ``n_trials``
    in it; ``n_k`` distinct K measured at b; ``best_k_at_edge`` (the best K is the largest K
    measured, or the smallest when that is above 1: a wider grid could do better);
    ``speedup_by_k`` ({K: mean speedup} at b). Empty without such points.
    """
    fixed = points[~points["schedule"].astype(bool)].dropna(subset=["num_speculative_tokens"])
    if fixed.empty:
        return pd.DataFrame(columns=list(SERVING_BEST_COLUMNS))
    rows = []
    for b, at_b in fixed.groupby("batch_size", sort=True):
        cells = at_b.groupby("num_speculative_tokens", sort=True)
        figures = ["speedup", "tokens_per_s", "baseline_tokens_per_s", "acceptance_length"]
        means = cells[figures].mean()
        best_k = float(means["speedup"].idxmax())  # first maximum: the smaller K on a tie
        cell = cells.get_group(best_k)
        ks = [float(k) for k in means.index]
        edge = len(ks) > 1 and (best_k == max(ks) or (best_k == min(ks) and best_k > 1))
        rows.append(
            {
                "batch_size": int(b),
                "best_num_speculative_tokens": best_k,
                **{f: float(means.loc[best_k, f]) for f in figures},
                "speedup_std": float(cell["speedup"].std(ddof=1)) if len(cell) > 1 else np.nan,
                "n_trials": len(cell),
                "n_k": len(ks),
                "best_k_at_edge": edge,
                "speedup_by_k": {float(k): float(v) for k, v in means["speedup"].items()},
            }
        )
    return pd.DataFrame(rows, columns=list(SERVING_BEST_COLUMNS))


def budget_crossings(
    points: pd.DataFrame, *, alpha: float = 0.05
) -> list[tuple[int, float, LogLinearFit, Crossing]]:
    """Per (batch size, K), where the speedup over the plain server reaches 1 along the served
    drafts' pretraining budgets: ``speedup = a*log10(T) + c`` fitted on the points at T > 0
    (:func:`analysis.laws.fit_log_linear`, OLS, HC3; law "serve_speedup_tokens") and solved
    for speedup(T*) = 1 with its Fieller (1 - alpha) set
    (:func:`analysis.break_even.crossing_budget`: status "ok" pays above T*, "already" from the
    smallest budget, "unbounded" the trend is not resolved, "no fit" fewer than 3 budgets).

    ``points``: :func:`serving_points` of one condition; ``schedule`` trials and points without
    a K are left out. Returns (b, K, fit, crossing) sorted by b, then K.
    """
    fixed = points[~points["schedule"].astype(bool)].dropna(subset=["num_speculative_tokens"])
    out = []
    for (b, k), cell in fixed.groupby(["batch_size", "num_speculative_tokens"], sort=True):
        fit = fit_log_linear(
            cell, "pretrain.tokens", "speedup", law="serve_speedup_tokens", alpha=alpha
        )
        out.append((int(b), float(k), fit, crossing_budget(fit, 1.0, alpha=alpha)))
    return out
