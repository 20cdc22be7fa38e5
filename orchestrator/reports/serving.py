"""After a serving sweep: the best K per batch size in vLLM and Thm 1.3's crossing of its
speedup over the plain server, per condition (``target.dtype``, ``target.model``;
:func:`analysis.throughput.split_conditions`), read from the trials' ``speedup/b{b}``.

Data-driven: a sweep whose trials hold no per-b speedups gets no lines. A condition whose
trials serve drafts of several budgets (``pretrain.tokens`` varies) is left to the token law:
its best K per b would mix drafts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from analysis.break_even import batch_crossing
from analysis.numbers import fmt
from analysis.serving import best_k_per_batch, has_serving_speedups, serving_points
from analysis.throughput import split_conditions
from dashboards.serving import ServingSection, serving_section
from orchestrator.reports.decode import crossing_line, fit_record

if TYPE_CHECKING:
    from orchestrator.store.results import ResultsStore

__all__ = [
    "ServingPart", "ServingReport", "serving_fit_record", "serving_lines", "serving_parts",
    "serving_report",
]  # fmt: skip

ServingPart = tuple[str, pd.DataFrame]
"""(condition label, :func:`analysis.serving.best_k_per_batch` table)"""


def serving_parts(df: pd.DataFrame) -> list[ServingPart]:
    """Each condition's best K per b; empty for a table without serving speedups. A condition
    whose trials vary ``pretrain.tokens`` is left out."""
    if not has_serving_speedups(df):
        return []
    parts = []
    for label, trials in split_conditions(df):
        done = trials[trials["state"] == "completed"] if "state" in trials else trials
        if "pretrain.tokens" in done and done["pretrain.tokens"].nunique() > 1:
            continue
        best = best_k_per_batch(serving_points(trials))
        if len(best):
            parts.append((label, best))
    return parts


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
    if not parts:
        return ServingReport()
    record = serving_fit_record(parts)
    if persist and record is not None:
        store.save_fit(sweep_id, record)
    lines = serving_lines(parts)
    return ServingReport(lines, serving_section(parts, lines))
