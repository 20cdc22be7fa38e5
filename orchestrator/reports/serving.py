"""After a serving sweep: the best K per batch size in vLLM and Thm 1.3's crossing of its
speedup over the plain server, per condition (``target.dtype``, ``target.model``;
:func:`analysis.throughput.split_conditions`), read from the trials' ``speedup/b{b}``.

Data-driven: a sweep whose trials hold no per-b speedups gets no lines. A condition whose
trials serve drafts of several budgets (``pretrain.tokens`` varies) gets, instead of a best K
(which would mix drafts), where its speedup reaches 1 along the budgets at each b
(:func:`analysis.serving.budget_crossings`): the budget from which speculation pays in vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from analysis.break_even import Crossing, batch_crossing
from analysis.laws import LogLinearFit
from analysis.numbers import fmt
from analysis.serving import (
    best_k_per_batch,
    budget_crossings,
    has_serving_speedups,
    serving_points,
)
from analysis.throughput import split_conditions
from dashboards.serving import ServingSection, serving_section
from orchestrator.reports.decode import crossing_line, fit_record

if TYPE_CHECKING:
    from orchestrator.store.results import ResultsStore

__all__ = [
    "budget_lines",
    "ServingPart", "ServingReport", "serving_fit_record", "serving_lines", "serving_parts",
    "serving_report",
]  # fmt: skip

ServingPart = tuple[str, pd.DataFrame]
"""(condition label, :func:`analysis.serving.best_k_per_batch` table)"""


def _conditions(df: pd.DataFrame, *, budgets: bool) -> list[tuple[str, pd.DataFrame]]:
    """The conditions whose trials vary ``pretrain.tokens`` (``budgets``) or do not."""
    if not has_serving_speedups(df):
        return []
    out = []
    for label, trials in split_conditions(df):
        done = trials[trials["state"] == "completed"] if "state" in trials else trials
        varied = "pretrain.tokens" in done and done["pretrain.tokens"].nunique() > 1
        if varied == budgets:
            out.append((label, trials))
    return out


def serving_parts(df: pd.DataFrame) -> list[ServingPart]:
    """Each condition's best K per b; empty for a table without serving speedups. A condition
    whose trials vary ``pretrain.tokens`` is left out."""
    parts = [
        (label, best_k_per_batch(serving_points(t))) for label, t in _conditions(df, budgets=False)
    ]
    return [(label, best) for label, best in parts if len(best)]


def budget_lines(df: pd.DataFrame) -> list[str]:
    """Per condition whose trials vary ``pretrain.tokens`` and b: the speedup measured at each
    budget and where its log-linear trend reaches 1 (:func:`analysis.serving.budget_crossings`)."""
    lines = []
    for label, trials in _conditions(df, budgets=True):
        prefix = f"{label}: " if label else ""
        points = serving_points(trials)
        for b, fit, c in budget_crossings(points):
            at_b = points[points["batch_size"] == b].groupby("pretrain.tokens")["speedup"].mean()
            measured = ", ".join(f"{t:g}: {v:.2f}x" for t, v in at_b.items())
            lines.append(f"{prefix}vLLM b={b}: speedup over the plain server per budget {measured}")
            lines.append(f"{prefix}vLLM b={b}: {_budget_said(fit, c)}")
    return lines


def _budget_said(fit: LogLinearFit, c: Crossing) -> str:
    """Where the speedup's trend over log10(T) reaches 1, or why no budget is supported."""
    if c.status == "no fit":
        return f"speedup reaching 1: no fit ({fit.status})"
    if c.status == "unbounded":
        return (
            f"speedup reaching 1: no budget supported (speedup = {fmt(fit.a, '.3f')}*log10(T) + "
            f"{fmt(fit.b, '.3f')}, slope 95% CI [{fmt(fit.a_ci[0], '.3f')}, "
            f"{fmt(fit.a_ci[1], '.3f')}] holds 0)"
        )
    at = f"T* = {fmt(c.budget, '.3g')} [{fmt(c.budget_lo, '.3g')}, {fmt(c.budget_hi, '.3g')}]"
    said = {
        "ok": f"speculation pays above {at} pretraining tokens",
        "already": f"speculation pays from the smallest budget measured ({at})",
        "decreasing": f"the speedup falls with training: below 1 above {at}",
    }[c.status]
    outside = ", extrapolated" if c.extrapolated else ""
    return (
        f"{said} (95%; speedup = {fmt(fit.a, '.3f')}*log10(T) + {fmt(fit.b, '.3f')}, "
        f"R² {fmt(fit.r2, '.2f')}{outside})"
    )


def serving_lines(parts: list[ServingPart]) -> list[str]:
    """Console lines: per condition and b, the best K, its speedup over the plain server of the
    same trial, both servers' tokens/s and vLLM's acceptance length, every K's speedup; then
    where the best speedup crosses 1 over b (with 3 or more batch sizes)."""
    lines = []
    for label, best in parts:
        prefix = f"{label}: " if label else ""
        for row in best.itertuples(index=False):
            by_k = ", ".join(f"K={k:g} {v:.2f}x" for k, v in sorted(row.speedup_by_k.items()))
            edge = ", at the edge of the K measured" if row.best_k_at_edge else ""
            lines.append(
                f"{prefix}vLLM b={row.batch_size}: best K {row.best_num_speculative_tokens:g}"
                f"{edge}, {fmt(row.speedup, '.2f')}x the plain server "
                f"({fmt(row.tokens_per_s, '.1f')} vs {fmt(row.baseline_tokens_per_s, '.1f')} "
                f"tok/s, acceptance length {fmt(row.acceptance_length, '.2f')}; {by_k})"
            )
        if len(best) >= 3:
            fit, crossing = batch_crossing(best)
            lines.append(f"{prefix}vLLM: {crossing_line(fit, crossing, 'the plain server')}")
    return lines


def serving_fit_record(parts: list[ServingPart]) -> dict[str, Any] | None:
    """The reference condition's speedup law over b and its crossing as a results-store fit row
    (law ``serve_speedup``); None with fewer than 3 batch sizes."""
    if not parts or len(parts[0][1]) < 3:
        return None
    label, best = parts[0]
    fit, crossing = batch_crossing(best)
    details = {
        "crossing": crossing.to_dict(),
        "best": best.drop(columns=["speedup_by_k"]).to_dict("records"),
        "speedup_by_k": {str(r.batch_size): r.speedup_by_k for r in best.itertuples()},
        **({"condition": label} if label else {}),
    }
    return fit_record("serve_speedup", fit, details)


@dataclass(frozen=True)
class ServingReport:
    """A serving sweep's best K per b: console lines and the page's section (None and no lines
    for any other sweep)."""

    lines: list[str] = field(default_factory=list)
    section: ServingSection | None = None


def serving_report(
    store: ResultsStore, sweep_id: int, df: pd.DataFrame, *, persist: bool
) -> ServingReport:
    """The lines and section of the sweep's trial table ``df`` (:func:`serving_parts`); with
    ``persist``, the reference condition's ``serve_speedup`` fit stored.

    Raises:
        StoreError: the fit could not be stored.
    """
    parts = serving_parts(df)
    record = serving_fit_record(parts)
    if persist and record is not None:
        store.save_fit(sweep_id, record)
    lines = serving_lines(parts) + budget_lines(df)
    return ServingReport(lines, serving_section(parts, lines))
