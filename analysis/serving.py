"""A serving sweep's speedups per batch size: the best K at each b (k_opt(b) measured in a
serving engine) and the rows Thm 1.3's speedup law is fitted on.

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
    "SERVING_BEST_COLUMNS", "best_k_per_batch", "budget_crossings", "has_serving_speedups",
    "serving_points",
]  # fmt: skip

_B = re.compile(r"^speedup/b(\d+)$")

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


def has_serving_speedups(df: pd.DataFrame) -> bool:
    """Whether the table holds a serving sweep's per-b speedups."""
    return any(_B.match(str(c)) for c in df.columns)


def _num(df: pd.DataFrame, col: str) -> pd.Series:
    if col not in df.columns:
        return pd.Series(np.nan, index=df.index, dtype="float64")
    return pd.to_numeric(df[col], errors="coerce").astype("float64")


def serving_points(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (completed trial, batch size) with a finite speedup.

    Columns: ``trial_key`` (when the table has it), ``pretrain.tokens`` (the served draft's
    budget; NaN when the table lacks it), ``batch_size`` (the client's concurrency b),
    ``num_speculative_tokens`` (K drafted at b), ``speedup`` (output tokens/s over the same
    trial's plain server), ``tokens_per_s`` and ``baseline_tokens_per_s`` (output tokens/s of
    the two servers), ``acceptance_length`` (vLLM's, from the benchmark client's counters at b).
    Empty (same columns) when the table has no serving speedups or no completed trial.
    """
    columns = ["trial_key", "pretrain.tokens", "batch_size", "num_speculative_tokens", "speedup",
               "tokens_per_s", "baseline_tokens_per_s", "acceptance_length"]  # fmt: skip
    done = df[df["state"] == "completed"] if "state" in df.columns else df
    bs = sorted(int(m.group(1)) for c in done.columns if (m := _B.match(str(c))))
    frames = []
    for b in bs:
        part = pd.DataFrame(
            {
                "trial_key": done.get("trial_key", pd.NA),
                "pretrain.tokens": _num(done, "pretrain.tokens"),
                "batch_size": b,
                "num_speculative_tokens": _num(done, f"num_speculative_tokens/b{b}"),
                "speedup": _num(done, f"speedup/b{b}"),
                "tokens_per_s": _num(done, f"tokens_per_s/b{b}"),
                "baseline_tokens_per_s": _num(done, f"baseline.tokens_per_s/b{b}"),
                "acceptance_length": _num(done, f"bench.acceptance_length/b{b}"),
            },
            index=done.index,
        )
        frames.append(part[np.isfinite(part["speedup"]) & (part["speedup"] > 0)])
    if not frames:
        return pd.DataFrame(columns=columns)
    return pd.concat(frames, ignore_index=True)[columns]


def best_k_per_batch(points: pd.DataFrame) -> pd.DataFrame:
    """The K with the highest mean speedup at each batch size (ties: the smaller K).

    ``points``: :func:`serving_points`. A cell is one (b, K); its figures are means over its
    trials (seeds, repeats). Columns (:data:`SERVING_BEST_COLUMNS`), one row per b, sorted:
    ``best_num_speculative_tokens`` (K), ``speedup`` and ``speedup_std`` (ddof=1, NaN for one
    trial), ``tokens_per_s``, ``baseline_tokens_per_s`` and ``acceptance_length`` of the best
    cell; ``n_trials`` in it; ``n_k`` distinct K measured at b; ``best_k_at_edge`` (the best K
    is the smallest or largest measured at b, with more than one measured); ``speedup_by_k``
    ({K: mean speedup} at b). Empty without points.
    """
    if points.empty:
        return pd.DataFrame(columns=list(SERVING_BEST_COLUMNS))
    rows = []
    for b, at_b in points.groupby("batch_size", sort=True):
        cells = at_b.groupby("num_speculative_tokens", sort=True)
        means = cells[["speedup", "tokens_per_s", "baseline_tokens_per_s",
                       "acceptance_length"]].mean()  # fmt: skip
        best_k = float(means["speedup"].idxmax())  # first maximum: the smaller K on a tie
        cell = cells.get_group(best_k)
        ks = list(means.index)
        rows.append(
            {
                "batch_size": int(b),
                "best_num_speculative_tokens": best_k,
                "speedup": float(means.loc[best_k, "speedup"]),
                "speedup_std": float(cell["speedup"].std(ddof=1)) if len(cell) > 1 else np.nan,
                "tokens_per_s": float(means.loc[best_k, "tokens_per_s"]),
                "baseline_tokens_per_s": float(means.loc[best_k, "baseline_tokens_per_s"]),
                "acceptance_length": float(means.loc[best_k, "acceptance_length"]),
                "n_trials": len(cell),
                "n_k": len(ks),
                "best_k_at_edge": len(ks) > 1 and best_k in (min(ks), max(ks)),
                "speedup_by_k": {float(k): float(v) for k, v in means["speedup"].items()},
            }
        )
    return pd.DataFrame(rows, columns=list(SERVING_BEST_COLUMNS))


def budget_crossings(
    points: pd.DataFrame, *, alpha: float = 0.05
) -> list[tuple[int, LogLinearFit, Crossing]]:
    """Per batch size, where the speedup over the plain server reaches 1 along the served
    drafts' pretraining budgets: ``speedup = a*log10(T) + c`` fitted on the points at T > 0
    (:func:`analysis.laws.fit_log_linear`, OLS, HC3; law "serve_speedup_tokens") and solved
    for speedup(T*) = 1 with its Fieller (1 - alpha) set (:func:`analysis.break_even.
    crossing_budget`: status "ok" pays above T*, "already" from the smallest budget,
    "unbounded" the trend is not resolved). ``points``: :func:`serving_points` of trials at one
    K; a b with fewer than 3 budgets is left out. Sorted by b."""
    out = []
    for b, at_b in points.groupby("batch_size", sort=True):
        if at_b["pretrain.tokens"].where(at_b["pretrain.tokens"] > 0).nunique() < 3:
            continue
        fit = fit_log_linear(at_b, "pretrain.tokens", "speedup", law="serve_speedup_tokens",
                             alpha=alpha)  # fmt: skip
        out.append((int(b), fit, crossing_budget(fit, 1.0, alpha=alpha)))
    return out
