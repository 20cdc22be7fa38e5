"""One self-contained HTML dashboard for a ``decode_bench`` batch-size sweep (Scylla Thm 1.3).

Figures (:mod:`dashboards.decode_figures`): the throughput surface (b x k, tokens/s), speedup
over autoregressive decoding per b, peak throughput vs log2 b with the Thm 1.3 fit and its band,
the measured best k vs b next to the roofline's k_opt(b) and the Eq. 4 fit, and the roofline
itself (arithmetic intensity I(b, k) vs k with I_crit). Tables: best configuration per b, the
fits, measured vs predicted k, and every trial with its error text. ``num_draft_tokens: auto``
trials get a section of their own beside the best fixed k per b
(:func:`analysis.throughput.auto_vs_best`); the fixed-k figures and fits leave them out.

Reads tables and fits only (never models); plotly.js is inlined once, so the page works offline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.eq4 import KOptFit
from analysis.laws import LogLinearFit
from analysis.numbers import fmt
from analysis.paper import compare_with_paper
from analysis.throughput import (
    AUTO_COLUMNS,
    BEST_COLUMNS,
    KNOBS,
    METRICS,
    RooflineData,
    auto_vs_best,
    compare_k_opt,
    decode_table,
)
from dashboards._html import (
    Section,
    Table,
    frame_rows,
    greedy_check,
    random_weight_trials,
    shown,
    trials_table,
    write_page,
)
from dashboards.decode_figures import (
    auto_figure,
    k_figure,
    peak_figure,
    roofline_figure,
    speedup_figure,
    surface_figure,
)
from dashboards.review_tables import paper_table
from dashboards.sweep_page import fit_rows

__all__ = ["RooflineData", "write_decode_dashboard"]

TITLES = {
    "surface": "Throughput surface: tokens/s by batch size and num_draft_tokens",
    "speedup": "Speedup over autoregressive decoding per batch size",
    "peak": "Peak throughput vs log2 batch size (Thm 1.3)",
    "k_opt": "Best num_draft_tokens vs batch size (measured, Eq. 4 fit, roofline k_opt)",
    "roofline": "Roofline: arithmetic intensity I(b, k) vs num_draft_tokens",
}
"""section headings of the page, one per figure"""

AUTO_TITLE = "Adaptive k (num_draft_tokens: auto) vs the best fixed k per batch size"
"""heading of the section shown when the sweep has ``num_draft_tokens: auto`` trials"""


def write_decode_dashboard(
    path: Path,
    *,
    sweep_name: str,
    trials: pd.DataFrame,
    best: pd.DataFrame,
    peak_fit: LogLinearFit | None,
    k_fit: KOptFit | None,
    roofline: RooflineData | None,
    description: str = "",
    sections: Sequence[Section] = (),
) -> Path:
    """Write the batch-size sweep's dashboard to ``path`` (one HTML file) and return it.

    ``trials`` is the ``decode_bench`` trial table (one row per trial, any state, optional
    ``error`` column; see :mod:`analysis.throughput`); ``best`` is
    :func:`analysis.throughput.best_per_batch` of it; ``peak_fit`` is
    :func:`analysis.throughput.fit_peak_throughput` (Scylla Thm 1.3, tokens/s vs log2 b) and
    ``k_fit`` :func:`analysis.eq4.fit_k_opt` (Eq. 4). ``roofline`` carries the
    roofline's I(b, k), I_crit and k_opt(b) for the local hardware; when it is None those
    figures are replaced by a note. Only completed trials are plotted; every trial is listed.
    ``description`` is the sweep's spec ``description`` (shown, escaped, under the heading).
    Trials with ``num_draft_tokens: auto`` get their own section (:data:`AUTO_TITLE`: a figure
    of auto / best fixed tokens/s per b and a table), and their mean k per cycle is drawn on
    the best-k figure. ``sections`` (the cost, the design) close the page.
    """
    if not len(best):
        best = pd.DataFrame(columns=list(BEST_COLUMNS))
    knobs_ok = {"batch_size", "num_draft_tokens"} <= _knob_columns(trials)
    auto = _auto_frame(trials, best) if knobs_ok else None
    figures = _figures(trials, best, peak_fit, k_fit, roofline, auto, knobs_ok=knobs_ok)
    states = trials["state"].astype(str) if "state" in trials.columns else pd.Series(dtype=str)
    peak, peak_paper = _peak_tables(peak_fit)
    best_table = k_opt = None  # no completed trial: neither
    if len(best):
        best_table = _frame_table(best[[c for c in BEST_COLUMNS if c in best.columns]])
        k_opt = _frame_table(compare_k_opt(best, roofline.k_opt)) if roofline else None
    return write_page(
        path,
        "decode.html.j2",
        title=f"Decode sweep {sweep_name}",
        description=description.strip(),
        random_weights=random_weight_trials(trials),
        greedy=greedy_check(trials),
        trial_count=len(trials),
        completed=int((states == "completed").sum()),
        failed=int((states == "failed").sum()),
        auto=_auto_data(trials, auto) if auto is not None else None,
        auto_title=AUTO_TITLE,
        roofline=roofline,
        i_crit=fmt(roofline.i_crit) if roofline is not None else "",
        figures=figures,
        best=best_table,
        peak=peak,
        peak_paper=peak_paper,
        k_fits=_k_tables(k_fit),
        k_opt=k_opt,
        trials=_trial_table(trials),
        sections=sections,
    )


def _figures(
    trials: pd.DataFrame,
    best: pd.DataFrame,
    peak_fit: LogLinearFit | None,
    k_fit: KOptFit | None,
    roofline: RooflineData | None,
    auto: pd.DataFrame | None,
    *,
    knobs_ok: bool,
) -> list[tuple[str, str, go.Figure | None, str]]:
    """The page's figures in order, ``(key, heading, figure or None, note when None)``; the
    auto table follows the ``auto`` figure."""
    figures: list[tuple[str, str, go.Figure | None, str]] = [
        (
            "surface",
            TITLES["surface"],
            surface_figure(trials) if knobs_ok else None,
            "No completed trials.",
        ),
        (
            "speedup",
            TITLES["speedup"],
            speedup_figure(trials, best) if knobs_ok else None,
            "No completed trials with a speedup.",
        ),
        ("peak", TITLES["peak"], peak_figure(best, peak_fit), "No completed trials."),
        (
            "k_opt",
            TITLES["k_opt"],
            k_figure(best, k_fit, roofline, auto),
            "No measured best k and no roofline.",
        ),
        (
            "roofline",
            TITLES["roofline"],
            roofline_figure(roofline) if roofline is not None else None,
            (
                "Skipped: no roofline data was given."
                if roofline is None
                else "The roofline table has no rows with positive, finite k and intensity."
            ),
        ),
    ]
    if auto is not None:
        figures.append(
            (
                "auto",
                AUTO_TITLE,
                auto_figure(auto),
                "No auto trial has both a throughput and a fixed k.",
            )
        )
    return figures


def _knob_columns(trials: pd.DataFrame) -> set[str]:
    """Knobs ``trials`` has, under their plain or dotted (``decode.batch_size``) names."""
    names = {str(c) for c in trials.columns}
    return {k for k in KNOBS if k in names or f"decode.{k}" in names}


@dataclass(frozen=True)
class _Auto:
    """The adaptive-k section's data: how many trials ran with ``num_draft_tokens: auto``,
    the verdict in one line and the per-b table."""

    n_trials: int
    verdict: str
    table: Table


def _auto_data(trials: pd.DataFrame, auto: pd.DataFrame) -> _Auto:
    """The verdict in one line and the per-b table of :func:`analysis.throughput.auto_vs_best`."""
    ratio = auto["ratio"].to_numpy(dtype=float)
    finite = np.isfinite(ratio)
    wins = [
        int(b) for b, r, f in zip(auto["batch_size"], ratio, finite, strict=True) if f and r > 1
    ]
    loses = [
        int(b) for b, r, f in zip(auto["batch_size"], ratio, finite, strict=True) if f and r <= 1
    ]
    none = [int(b) for b, f in zip(auto["batch_size"], finite, strict=True) if not f]

    def bs(values: list[int]) -> str:
        return ", ".join(str(b) for b in values) or "none"

    line = f"Adaptive k beats the best fixed k at b = {bs(wins)}; it loses at b = {bs(loses)}"
    line += f"; no comparison at b = {bs(none)}." if none else "."
    headers = [
        "batch_size",
        "auto tokens/s (± std)",
        "auto mean k",
        "best fixed k",
        "best fixed tokens/s",
        "auto / best",
        "verdict",
        "fixed tokens/s at auto's k",
        "auto speedup over AR",
        "auto acceptance length",
        "auto trials (failed)",
    ]
    rows = []
    for r in auto.itertuples(index=False):
        verdict = (
            fmt(math.nan) if not math.isfinite(r.ratio) else "wins" if r.auto_wins else "loses"
        )
        std = f" ± {fmt(r.auto_tokens_per_s_std)}" if math.isfinite(r.auto_tokens_per_s_std) else ""
        rows.append(
            [
                int(r.batch_size),
                fmt(r.auto_tokens_per_s) + std,
                fmt(r.auto_k_mean, ".3g"),
                fmt(r.best_num_draft_tokens, ".0f"),
                fmt(r.best_tokens_per_s),
                fmt(r.ratio, ".3f"),
                verdict,
                fmt(r.fixed_at_auto_k_tokens_per_s),
                fmt(r.auto_speedup, ".3f"),
                fmt(r.auto_acceptance_length, ".3f"),
                f"{int(r.n_auto)} ({int(r.n_auto_failed)})",
            ]
        )
    n_auto = int(decode_table(trials)["k_auto"].sum())
    return _Auto(n_trials=n_auto, verdict=line, table=Table(headers, rows))


# -- tables ------------------------------------------------------------------------------------


def _peak_tables(peak_fit: LogLinearFit | None) -> tuple[Table | None, Table | None]:
    """The Thm 1.3 fit's table and, for an ok fit, the paper's constants beside ours."""
    if peak_fit is None:
        return None, None
    cmp = compare_with_paper(peak_fit)
    fit = Table(["field", "value"], fit_rows(peak_fit, "Qwen2.5-72B on H800 GPUs"))
    return fit, paper_table(cmp) if cmp is not None and peak_fit.ok else None


def _k_tables(k_fit: KOptFit | None) -> list[Table] | None:
    """The Eq. 4 fit's table (with the paper's constants) and the log2 fit's."""
    if k_fit is None:
        return None
    names = ["form", "status", "A", "A_ci", "B", "B_ci", "C", "C_ci", "r2", "n", "alpha"]
    rows: list[list[object]] = [[k, shown(getattr(k_fit.eq4, k))] for k in names]
    paper = k_fit.paper
    rows.append(
        [
            "paper",
            f"{paper.get('source', '')}: A = {paper.get('A')}, B = {paper.get('B')}, "
            f"C = {paper.get('C')} ({paper.get('conditions', '')})",
        ]
    )
    log2 = fit_rows(k_fit.log2, "Qwen2.5-72B on H800 GPUs")
    return [Table(["field", "value"], rows), Table(["field", "value"], log2)]


def _trial_table(trials: pd.DataFrame) -> Table | None:
    if not len(trials.columns):
        return None
    first = [c for c in ("trial_key", "state") if c in trials.columns]
    knobs = [c for c in trials.columns if c in KNOBS or (isinstance(c, str) and "." in c)]
    metrics = [c for c in METRICS if c in trials.columns]
    taken = set(first) | set(knobs) | set(metrics) | {"error"}
    rest = [c for c in trials.columns if c not in taken]
    columns = first + knobs + metrics + rest + (["error"] if "error" in trials.columns else [])
    return trials_table(trials, columns)


def _frame_table(frame: pd.DataFrame) -> Table:
    return Table([str(c) for c in frame.columns], frame_rows(frame))


# -- helpers -----------------------------------------------------------------------------------


def _auto_frame(trials: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame | None:
    """:func:`analysis.throughput.auto_vs_best` of the trials, or None without auto trials."""
    if not len(trials) or not bool(decode_table(trials)["k_auto"].any()):
        return None
    if "tokens_per_s" not in trials.columns:
        return pd.DataFrame(columns=list(AUTO_COLUMNS))
    return auto_vs_best(trials, best)
