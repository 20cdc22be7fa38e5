"""After a serving sweep: the best K per batch size in vLLM and Thm 1.3's crossing of its
speedup over the plain server, read from the trials' ``speedup/b{b}``.

Trials are analysed in groups that must not be pooled: one per condition (``target.dtype``,
``target.model``; :func:`analysis.throughput.split_conditions`) and per value of every other
override the trials vary besides K, the seed and the budget (a ``variant``, ``draft.*``,
``serve.max_new_tokens``, ...: another draft or another measurement). A group whose trials
serve drafts of several budgets (``pretrain.tokens`` varies) gets, instead of a best K (which
would mix drafts), where its speedup reaches 1 along the budgets at each (b, K)
(:func:`analysis.serving.budget_crossings`): the budget from which speculation pays in vLLM.
Data-driven: a sweep whose trials hold no per-b speedups gets nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
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
from analysis.throughput import CONDITIONS, split_conditions
from dashboards.serving import ServingSection, serving_section
from orchestrator.reports.decode import crossing_line, fit_record

if TYPE_CHECKING:
    from orchestrator.store.results import ResultsStore

__all__ = [
    "ServingPart",
    "ServingReport",
    "budget_lines",
    "serving_fit_record",
    "serving_groups",
    "serving_lines",
    "serving_parts",
    "serving_report",
]

ServingPart = tuple[str, pd.DataFrame]
"""(group label, :func:`analysis.serving.best_k_per_batch` table)"""

_POOLED = {"serve.num_speculative_tokens", "seed", "pretrain.tokens"}
"""overrides whose values one group spans: K (the best K's choice), seeds (repeats), budgets
(the budget crossings)"""


def serving_groups(df: pd.DataFrame, overrides: Iterable[str]) -> list[tuple[str, pd.DataFrame]]:
    """The trials in groups never pooled (module docstring), each with its label (the varied
    values, e.g. ``"dtype=bfloat16, draft.sweep=ttt-tokens"``; ``""`` when nothing varies);
    empty for a table without serving speedups. ``overrides``: the sweep's override names."""
    if not has_serving_speedups(df):
        return []
    conditions = {alias for alias, _ in CONDITIONS.values()}
    others = sorted({*overrides, "variant"} - _POOLED - conditions)
    others = [c for c in others if c in df.columns and df[c].astype(str).nunique() > 1]
    groups = []
    for label, trials in split_conditions(df):
        if not others:
            groups.append((label, trials))
            continue
        for values, part in trials.groupby([trials[c].astype(str) for c in others], sort=True):
            said = ", ".join(f"{c}={v}" for c, v in zip(others, values, strict=True))
            groups.append((f"{label}, {said}" if label else said, part))
    return groups


def _budgets_vary(trials: pd.DataFrame) -> bool:
    done = trials[trials["state"] == "completed"] if "state" in trials else trials
    return "pretrain.tokens" in done and done["pretrain.tokens"].nunique() > 1


def serving_parts(df: pd.DataFrame, overrides: Iterable[str] = ()) -> list[ServingPart]:
    """Each group's best K per b (:func:`serving_groups`), groups over budgets left out, and
    groups without a fixed-K trial."""
    parts = [
        (label, best_k_per_batch(serving_points(trials)))
        for label, trials in serving_groups(df, overrides)
        if not _budgets_vary(trials)
    ]
    return [(label, best) for label, best in parts if len(best)]


def budget_lines(df: pd.DataFrame, overrides: Iterable[str] = ()) -> list[str]:
    """Per group over budgets and (b, K): the speedup measured at each budget and where its
    log-linear trend reaches 1 (:func:`analysis.serving.budget_crossings`)."""
    lines = []
    for label, trials in serving_groups(df, overrides):
        if not _budgets_vary(trials):
            continue
        prefix = f"{label}: " if label else ""
        points = serving_points(trials)
        for b, k, fit, c in budget_crossings(points):
            cell = points[(points["batch_size"] == b) & (points["num_speculative_tokens"] == k)]
            per_t = cell.groupby("pretrain.tokens")["speedup"].mean()
            measured = ", ".join(f"{t:g}: {v:.2f}x" for t, v in per_t.items())
            head = f"{prefix}vLLM b={b}, K={k:g}"
            lines.append(f"{head}: speedup over the plain server per budget {measured}")
            lines.append(f"{head}: {_budget_said(fit, c)}")
    return lines


def _budget_said(fit: LogLinearFit, c: Crossing) -> str:
    """Where the speedup's trend over log10(T) reaches 1, or why no budget is supported."""
    if c.status == "no fit":
        return f"speedup reaching 1: no fit ({fit.status})"
    sign = "-" if fit.b < 0 else "+"
    trend = f"speedup = {fmt(fit.a, '.3f')}*log10(T) {sign} {fmt(abs(fit.b), '.3f')}"
    if c.status == "unbounded":
        return (
            f"speedup reaching 1: no budget supported ({trend}, slope 95% CI "
            f"[{fmt(fit.a_ci[0], '.3f')}, {fmt(fit.a_ci[1], '.3f')}] holds 0)"
        )
    at = f"T* = {fmt(c.budget, '.3g')} [{fmt(c.budget_lo, '.3g')}, {fmt(c.budget_hi, '.3g')}]"
    said = {
        "ok": f"speculation pays above {at} pretraining tokens",
        "already": f"speculation pays from the smallest budget measured ({at})",
        "decreasing": f"the speedup falls with training: below 1 above {at}",
    }[c.status]
    outside = ", extrapolated" if c.extrapolated else ""
    return f"{said} (95%; {trend}, R² {fmt(fit.r2, '.2f')}{outside})"


def serving_lines(parts: list[ServingPart]) -> list[str]:
    """Console lines: per group and b, the best K (or the only K measured), its mean speedup
    over the plain server of the same trial (± sd over trials when several), the two servers'
    mean tokens/s, vLLM's acceptance length and every K's speedup; then where the best speedup
    crosses 1 over b (with 3 or more batch sizes)."""
    lines = []
    for label, best in parts:
        prefix = f"{label}: " if label else ""
        for row in best.itertuples(index=False):
            k = f"{row.best_num_speculative_tokens:g}"
            which = f"best K {k}" if row.n_k > 1 else f"K {k} (the only K measured)"
            edge = ", at the edge of the K measured" if row.best_k_at_edge else ""
            if row.speedup < 1:
                edge += " (no K pays: serve without speculation)"
            spread = f" ± {row.speedup_std:.2f}" if pd.notna(row.speedup_std) else ""
            by_k = ", ".join(f"K={k:g} {v:.2f}x" for k, v in sorted(row.speedup_by_k.items()))
            lines.append(
                f"{prefix}vLLM b={row.batch_size}: {which}{edge}, "
                f"{fmt(row.speedup, '.2f')}x{spread} the plain server "
                f"({fmt(row.tokens_per_s, '.1f')} vs {fmt(row.baseline_tokens_per_s, '.1f')} "
                f"tok/s, acceptance length {fmt(row.acceptance_length, '.2f')}"
                + (f"; {by_k})" if row.n_k > 1 else ")")
            )
        if len(best) >= 3:
            fit, crossing = batch_crossing(best)
            lines.append(f"{prefix}vLLM: {crossing_line(fit, crossing, 'the plain server')}")
    return lines


def serving_fit_record(parts: list[ServingPart]) -> dict[str, Any] | None:
    """The first group's speedup law over b and its crossing as a results-store fit row (law
    ``serve_speedup``); None with fewer than 3 batch sizes."""
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
    """A serving sweep's best K per b and budget crossings: console lines and the page's
    section (None and no lines for any other sweep)."""

    lines: list[str] = field(default_factory=list)
    section: ServingSection | None = None


def serving_report(
    store: ResultsStore, sweep_id: int, df: pd.DataFrame, *, persist: bool
) -> ServingReport:
    """The lines and section of the sweep's trial table ``df`` (:func:`serving_parts`,
    :func:`budget_lines`); with ``persist``, the first group's ``serve_speedup`` fit stored.

    Raises:
        StoreError: the trials could not be read or the fit stored.
    """
    if not has_serving_speedups(df):
        return ServingReport()
    overrides = {k for t in store.trials(sweep_id) for k in t.overrides}
    parts = serving_parts(df, overrides)
    record = serving_fit_record(parts)
    if persist and record is not None:
        store.save_fit(sweep_id, record)
    lines = serving_lines(parts) + budget_lines(df, overrides)
    return ServingReport(lines, serving_section(parts, lines))
