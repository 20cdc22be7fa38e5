"""Batch-size sweep analysis: throughput surface, best k per batch, the Thm 1.3 fit.

Source: Scylla (arXiv 2505.07858) Sec. 3.2 and Appendix C; the paper's constants are in
``analysis/reference/scylla_2505_07858.yaml``.

- Thm 1.3: peak throughput (tokens/s over the whole batch, at the best k) is
  ``a*log2(b) + b0`` in the decoding batch size b;
- Eq. 4: the optimal number of verified tree tokens is ``k_opt(b) = A*sqrt(1 + B/b) - C``
  (fitted to :func:`best_per_batch` by :mod:`analysis.eq4`).

Input: the ``decode_bench`` trial table, one row per trial: ``trial_key``, ``state``, the
:data:`KNOBS` (``num_draft_tokens`` = k, verified tokens per sequence per cycle, root included;
dotted names accepted, :func:`decode_table`) and the :data:`METRICS`. Only completed trials with
a finite metric count; failed trials are counted, never averaged. Trials that differ in a
:data:`CONDITIONS` value are never pooled (:func:`split_conditions`). ``num_draft_tokens: auto``
trials (batch-adaptive k, Scylla Table 5 "Opt. top_k") are left out of the surface and the fits
and compared by :func:`auto_vs_best`.

Pure functions over pandas tables: no I/O, no torch, Ray, SQL or MLflow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.laws import LogLinearFit, fit_log_linear

KNOBS = ("batch_size", "num_draft_tokens", "depth", "topk", "seed")
"""the ``decode_bench`` knobs as plain column names"""

_KNOB_ALIASES = {
    "batch_size": ("decode.batch_size",),
    "num_draft_tokens": ("decode.num_draft_tokens",),
    "depth": ("decode.depth",),
    "topk": ("decode.topk",),
}
"""dotted override names (as the results store's wide table names them) for each knob"""

METRICS = (
    "tokens_per_s",
    "ar_tokens_per_s",
    "speedup",
    "hf_tokens_per_s",
    "acceptance_length",
    "draft_s_per_cycle",
    "verify_s_per_cycle",
    "bookkeeping_s_per_cycle",
    "break_even_acceptance_length",
    "num_draft_tokens_mean",
)
"""the ``decode_bench`` metrics this module and the dashboard read"""

AUTO = "auto"
"""the ``num_draft_tokens`` value of batch-adaptive k (``decode.num_draft_tokens: auto``)"""

AUTO_K_METRIC = "num_draft_tokens_mean"
"""metric of an auto trial: mean k over its decoding cycles (verified tokens per sequence)"""

CONDITIONS: dict[str, tuple[str, float | str]] = {
    "temperature": ("decode.temperature", 0.0),
    "oracle_accept": ("draft.oracle_accept", 1.0),
    "dtype": ("target.dtype", "auto"),
    "target": ("target.model", ""),
}
"""conditions of a measurement that a (b, k) cell must not pool: plain column name -> (its
dotted override name, the config default that a missing value means; a str default: the
condition is a name, compared as text)"""

SHAPE_KNOBS = ("depth", "topk")
"""tree-shape knobs that, with (batch_size, num_draft_tokens), make one cell of the grid"""

BEST_COLUMNS = (
    "batch_size",
    "best_num_draft_tokens",
    "best_depth",
    "best_topk",
    "peak_tokens_per_s",
    "peak_tokens_per_s_std",
    "ar_tokens_per_s",
    "speedup",
    "acceptance_length",
    "hf_tokens_per_s",
    "n_trials",
    "n_completed",
    "n_failed",
    "n_k",
    "best_k_at_edge",
)
"""columns of :func:`best_per_batch`, in order"""

AUTO_COLUMNS = (
    "batch_size",
    "auto_tokens_per_s",
    "auto_tokens_per_s_std",
    "auto_k_mean",
    "auto_speedup",
    "auto_acceptance_length",
    "best_num_draft_tokens",
    "best_tokens_per_s",
    "ratio",
    "auto_wins",
    "fixed_at_auto_k_tokens_per_s",
    "n_auto",
    "n_auto_failed",
)
"""columns of :func:`auto_vs_best`, in order"""


@dataclass(frozen=True, eq=False)
class RooflineData:
    """Roofline predictions for one hardware profile (Scylla Sec. 3.2, Appendix C), from the
    ``roofline`` workload. Raises ``ValueError`` when ``intensity`` lacks a column."""

    hardware: str
    """hardware profile name, e.g. "H800 SXM" or "local CPU (measured)" """
    i_crit: float
    """critical arithmetic intensity = peak FLOP/s / memory bandwidth (FLOP/byte)"""
    intensity: pd.DataFrame
    """long table, one row per (b, k): columns ``batch_size``, ``num_draft_tokens`` and
    ``intensity`` (FLOP/byte of one decoding step: draft prefill + draft decoding + target
    verification)"""
    k_opt: Mapping[int, float]
    """predicted optimal verified tokens per sequence per cycle, by batch size: the k where
    I(b, k) = I_crit (may be fractional; NaN or inf when there is none)"""
    note: str = ""
    """free text on the assumptions (model, prefix length, dtype), shown on the dashboard"""

    def __post_init__(self) -> None:
        need = {"batch_size", "num_draft_tokens", "intensity"}
        missing = sorted(need - set(self.intensity.columns))
        if missing:
            raise ValueError(
                f"RooflineData.intensity lacks columns {missing}; it has "
                f"{list(self.intensity.columns)}. Give a long table with batch_size, "
                "num_draft_tokens and intensity (FLOP/byte)."
            )


def decode_table(df: pd.DataFrame) -> pd.DataFrame:
    """The trial table with plain knob names, numeric knob columns and a ``k_auto`` column.

    A knob missing under its plain name (``batch_size``) is taken from its dotted name
    (``decode.batch_size``); ``k_auto`` (bool) is True where ``num_draft_tokens`` is
    :data:`AUTO`; knob columns are coerced to numbers (NaN when not, so an auto trial's k is
    NaN). The input is not modified. Raises ``ValueError`` when ``batch_size`` or
    ``num_draft_tokens`` is missing under both names.
    """
    out = df.copy()
    for knob, aliases in _KNOB_ALIASES.items():
        if knob not in out.columns:
            for alias in aliases:
                if alias in out.columns:
                    out[knob] = out[alias]
                    break
    missing = [k for k in ("batch_size", "num_draft_tokens") if k not in out.columns]
    if missing:
        raise ValueError(
            f"columns {missing} are not in the trial table; it has {list(df.columns)}. "
            "A decode_bench table needs batch_size and num_draft_tokens "
            "(or decode.batch_size and decode.num_draft_tokens)."
        )
    k_text = out["num_draft_tokens"].map(lambda v: isinstance(v, str) and v.strip().lower())
    out["k_auto"] = (k_text == AUTO).astype(bool)
    for knob in KNOBS:
        if knob in out.columns:
            out[knob] = pd.to_numeric(out[knob], errors="coerce").astype("float64")
    return out


def split_conditions(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The trial table parted by the conditions it varies (:data:`CONDITIONS`), each part with
    its label (``"temperature=0.7, oracle_accept=0.8"``: the varying conditions only).

    A condition is read under its plain or dotted name; a missing value is the config default.
    A table that varies none comes back whole, labelled ``""``. Parts are ordered lowest
    temperature first, then highest oracle_accept, then dtype and target by name. The input is
    not modified.
    """
    values = _condition_values(df)
    varying = [c for c in values.columns if values[c].nunique() > 1]
    if not varying:
        return [("", df)]
    keys = values[varying].drop_duplicates()
    order = [c != "oracle_accept" for c in varying]  # oracle_accept: the highest first
    keys = keys.sort_values(varying, ascending=order, kind="stable")
    parts: list[tuple[str, pd.DataFrame]] = []
    for key in keys.itertuples(index=False):
        mask = np.ones(len(df), dtype=bool)
        for column, wanted in zip(varying, key, strict=True):
            mask &= (values[column] == wanted).to_numpy(dtype=bool)
        label = ", ".join(f"{c}={_said(v)}" for c, v in zip(varying, key, strict=True))
        parts.append((label, df[mask]))
    return parts


def _said(value: object) -> str:
    """A condition's value in a label: a number as ``:g``, a name as is."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _condition_values(df: pd.DataFrame) -> pd.DataFrame:
    """The :data:`CONDITIONS` columns the table has (plain or dotted name), numeric, the
    config default where missing."""
    out = pd.DataFrame(index=df.index)
    for name, (alias, default) in CONDITIONS.items():
        column = name if name in df.columns else alias if alias in df.columns else None
        if column is None:
            continue
        if isinstance(default, str):
            out[name] = df[column].where(df[column].notna(), default).astype(str)
        else:
            numbers = pd.to_numeric(df[column], errors="coerce").astype("float64")
            out[name] = numbers.fillna(default)
    return out


def _one_condition(df: pd.DataFrame, what: str) -> None:
    """Raise ``ValueError`` when the trials differ in a :data:`CONDITIONS` column."""
    values = _condition_values(df)
    varying = {c: sorted(values[c].unique()) for c in values.columns if values[c].nunique() > 1}
    if varying:
        said = "; ".join(f"{c} {', '.join(_said(v) for v in vs)}" for c, vs in varying.items())
        raise ValueError(
            f"{what}: the trials differ in {said}, and a (batch size, k) cell would average "
            "them. Fix: analyse each condition apart (split_conditions)"
        )


def throughput_surface(df: pd.DataFrame, value: str = "tokens_per_s") -> pd.DataFrame:
    """Mean ``value`` per (batch size, number of verified tokens): the b x k surface.

    The mean over completed trials with a finite ``value`` at each (``batch_size``,
    ``num_draft_tokens``), pooled over seeds *and* any ``depth`` / ``topk`` (filter first for
    one tree shape); auto trials are ignored. Returns a pivot: index ``batch_size`` (int,
    sequences), columns ``num_draft_tokens`` (int, verified tokens), cells in the unit of
    ``value``, NaN where no trial completed; sorted ascending. Raises ``ValueError`` when
    ``value`` or a knob column is missing, or the trials differ in a condition.
    """
    _one_condition(df, "throughput_surface")
    done = _completed(decode_table(df), value)
    grouped = done.groupby(["batch_size", "num_draft_tokens"])[value].mean()
    surface = grouped.unstack("num_draft_tokens") if len(grouped) else _empty_surface()
    surface = surface.sort_index().sort_index(axis=1)
    surface.index = pd.Index(surface.index.astype("int64"), name="batch_size")
    surface.columns = pd.Index(surface.columns.astype("int64"), name="num_draft_tokens")
    return surface.astype("float64")


def best_per_batch(df: pd.DataFrame) -> pd.DataFrame:
    """The best fixed-k configuration at each batch size: Thm 1.3's peak throughput and best k.

    Only numeric ``num_draft_tokens`` count. A cell is one (``batch_size``,
    ``num_draft_tokens``, ``depth``, ``topk``) (shape knobs the table lacks are left out; a
    trial without a shape knob the others have forms its own cell), its throughput the mean
    ``tokens_per_s`` of its completed trials. The best cell at b has the highest mean (ties:
    smallest k, then depth, then topk).

    Columns (:data:`BEST_COLUMNS`), one row per batch size with a completed trial, sorted by b:
    ``batch_size`` (sequences); ``best_num_draft_tokens`` (k of the best cell, verified tokens
    per sequence per cycle); ``best_depth``, ``best_topk`` (NaN when not in the table);
    ``peak_tokens_per_s`` and ``peak_tokens_per_s_std`` (mean and std over seeds, ddof=1, NaN
    for one trial; tokens/s over the whole batch); ``ar_tokens_per_s`` (autoregressive baseline,
    tokens/s), ``speedup`` (mean of per-trial speedups) and ``acceptance_length`` (tokens per
    cycle), all means over the best cell's trials; ``hf_tokens_per_s`` (HF generate, tokens/s,
    mean over all completed trials at b; NaN except at b = 1); ``n_trials`` (completed trials in
    the best cell); ``n_completed`` and ``n_failed`` (fixed-k trials at b); ``n_k`` (distinct k
    measured at b); ``best_k_at_edge`` (True when the best k is the smallest or largest k
    measured at b).

    Raises ``ValueError`` when the trials differ in a condition (:func:`split_conditions`).
    """
    _one_condition(df, "best_per_batch")
    table = decode_table(df)
    done = _completed(table, "tokens_per_s")
    shape = [k for k in SHAPE_KNOBS if k in done.columns and done[k].notna().any()]
    keys = ["batch_size", "num_draft_tokens", *shape]
    failed = table[(_state(table) == "failed") & ~table["k_auto"]].groupby("batch_size").size()
    completed_b = done.groupby("batch_size").size()
    rows: list[dict[str, Any]] = []
    for b, at_b in done.groupby("batch_size", sort=True):
        cells = at_b.groupby(keys, sort=True, dropna=False)["tokens_per_s"].agg(
            ["mean", "std", "size"]
        )
        cells = cells.reset_index().sort_values(
            ["mean", "num_draft_tokens", *shape],
            ascending=[False, True, *([True] * len(shape))],
            kind="stable",
        )
        top = cells.iloc[0]
        in_cell = np.ones(len(at_b), dtype=bool)
        for key in keys:  # NaN (a trial without that shape knob) matches NaN
            column, wanted = at_b[key].to_numpy(dtype=float), float(top[key])
            in_cell &= (column == wanted) | (np.isnan(column) & math.isnan(wanted))
        cell = at_b[in_cell]
        ks = at_b["num_draft_tokens"].unique()
        best_k = int(top["num_draft_tokens"])
        rows.append(
            {
                "batch_size": int(b),
                "best_num_draft_tokens": best_k,
                "best_depth": float(top["depth"]) if "depth" in shape else math.nan,
                "best_topk": float(top["topk"]) if "topk" in shape else math.nan,
                "peak_tokens_per_s": float(top["mean"]),
                "peak_tokens_per_s_std": float(top["std"]) if top["size"] > 1 else math.nan,
                "ar_tokens_per_s": _mean(cell, "ar_tokens_per_s"),
                "speedup": _mean(cell, "speedup"),
                "acceptance_length": _mean(cell, "acceptance_length"),
                "hf_tokens_per_s": _mean(at_b, "hf_tokens_per_s"),
                "n_trials": int(top["size"]),
                "n_completed": int(completed_b.get(b, 0)),
                "n_failed": int(failed.get(b, 0)),
                "n_k": len(ks),
                "best_k_at_edge": bool(best_k in (ks.min(), ks.max())),
            }
        )
    best = pd.DataFrame(rows, columns=list(BEST_COLUMNS))
    return best.astype(
        {
            "batch_size": "int64",
            "best_num_draft_tokens": "int64",
            "n_trials": "int64",
            "n_completed": "int64",
            "n_failed": "int64",
            "n_k": "int64",
            "best_k_at_edge": "bool",
        }
    )


def auto_vs_best(df: pd.DataFrame, best: pd.DataFrame | None = None) -> pd.DataFrame:
    """Batch-adaptive k (``num_draft_tokens: auto``) against the best fixed k, per batch size.

    An auto trial chose k every cycle from the live batch size (``decode.k_law``; Scylla
    Table 5 "Opt. top_k"). One row per b with a finished auto trial: ``batch_size`` (sequences);
    ``auto_tokens_per_s`` and ``auto_tokens_per_s_std`` (mean and std, ddof=1, over the auto
    trials at b, e.g. seeds; NaN std for one; tokens/s over the whole batch); ``auto_k_mean``
    (mean over those trials of :data:`AUTO_K_METRIC`, the mean k per cycle; NaN when not
    recorded); ``auto_speedup`` (over AR, x) and ``auto_acceptance_length`` (tokens per cycle),
    means; ``best_num_draft_tokens`` and ``best_tokens_per_s``: the best fixed k at b and its
    mean tokens/s (:func:`best_per_batch`; NaN when no fixed-k trial completed at b);
    ``ratio`` = auto / best fixed tokens/s (NaN without a fixed k); ``auto_wins`` (ratio > 1);
    ``fixed_at_auto_k_tokens_per_s``: mean tokens/s of the fixed-k trials at b whose k is
    ``auto_k_mean`` rounded half up (NaN when that k was not measured); ``n_auto`` and
    ``n_auto_failed`` (completed and failed auto trials at b). Auto trials are pooled over any
    depth / topk at b. ``best`` defaults to :func:`best_per_batch` of ``df``. Sorted by b;
    empty (with the columns) when the table has no finished auto trial. Raises ``ValueError``
    when the trials differ in a condition.
    """
    _one_condition(df, "auto_vs_best")
    table = decode_table(df)
    if best is None:
        best = best_per_batch(df)
    values = (
        pd.to_numeric(table["tokens_per_s"], errors="coerce").astype("float64")
        if "tokens_per_s" in table.columns
        else pd.Series(math.nan, index=table.index, dtype="float64")
    )
    state = _state(table)
    auto = table[table["k_auto"] & table["batch_size"].notna()].copy()
    auto["tokens_per_s"] = values
    ok = (state[auto.index] == "completed") & np.isfinite(auto["tokens_per_s"])
    fixed = _completed(table, "tokens_per_s") if "tokens_per_s" in table.columns else table[:0]
    by_b = {int(r.batch_size): r for r in best.itertuples(index=False)}
    rows: list[dict[str, Any]] = []
    for b, at_b in auto.groupby("batch_size", sort=True):
        done = at_b[ok[at_b.index]]
        if not len(done) and not (state[at_b.index] == "failed").any():
            continue  # pending or running only
        tps = done["tokens_per_s"].to_numpy(dtype=float)
        mean = float(tps.mean()) if len(tps) else math.nan
        k_mean = _mean(done, AUTO_K_METRIC)
        top = by_b.get(int(b))
        best_tps = float(top.peak_tokens_per_s) if top is not None else math.nan
        ratio = mean / best_tps if math.isfinite(best_tps) and best_tps > 0 else math.nan
        at_k = math.nan
        if math.isfinite(k_mean):
            k_round = math.floor(k_mean + 0.5)
            hit = fixed[(fixed["batch_size"] == b) & (fixed["num_draft_tokens"] == k_round)]
            at_k = _mean(hit, "tokens_per_s")
        rows.append(
            {
                "batch_size": int(b),
                "auto_tokens_per_s": mean,
                "auto_tokens_per_s_std": float(tps.std(ddof=1)) if len(tps) > 1 else math.nan,
                "auto_k_mean": k_mean,
                "auto_speedup": _mean(done, "speedup"),
                "auto_acceptance_length": _mean(done, "acceptance_length"),
                "best_num_draft_tokens": (
                    float(top.best_num_draft_tokens) if top is not None else math.nan
                ),
                "best_tokens_per_s": best_tps,
                "ratio": ratio,
                "auto_wins": bool(math.isfinite(ratio) and ratio > 1.0),
                "fixed_at_auto_k_tokens_per_s": at_k,
                "n_auto": len(done),
                "n_auto_failed": int((state[at_b.index] == "failed").sum()),
            }
        )
    out = pd.DataFrame(rows, columns=list(AUTO_COLUMNS))
    counts = ("batch_size", "auto_wins", "n_auto", "n_auto_failed")
    floats = [c for c in AUTO_COLUMNS if c not in counts]
    return out.astype(
        {
            "batch_size": "int64",
            "auto_wins": "bool",
            "n_auto": "int64",
            "n_auto_failed": "int64",
            **dict.fromkeys(floats, "float64"),
        }
    )


def fit_peak_throughput(best: pd.DataFrame, *, alpha: float = 0.05) -> LogLinearFit:
    """Scylla Thm 1.3: ``peak_tokens_per_s = a*log2(batch_size) + b0`` by OLS.

    One point per row of :func:`best_per_batch`; a in tokens/s per doubling of b, b0 (the
    fit's ``b``) in tokens/s at b = 1; (1 - alpha) CIs and R² by
    :func:`analysis.laws.fit_log_linear` (law "batch", paper constants in
    ``analysis.paper.PAPER_CONSTANTS["batch"]``). Fewer than 3 batch sizes, or the same peak at
    every b, give a fit whose ``status`` says so, never an exception.
    """
    return fit_log_linear(
        best,
        "batch_size",
        "peak_tokens_per_s",
        law="batch",
        log_base=2,
        alpha=alpha,
        allow_constant=False,
    )


def compare_k_opt(best: pd.DataFrame, predicted: Mapping[int, float]) -> pd.DataFrame:
    """Measured best k next to the roofline's predicted k_opt, per measured batch size.

    Columns: ``batch_size`` (sequences), ``measured_k`` (best k of :func:`best_per_batch`,
    verified tokens), ``predicted_k_opt`` (the roofline's k where I(b, k) = I_crit, Scylla
    Sec. 3.2; NaN when ``predicted`` has no entry for b), ``ratio`` = measured / predicted (NaN
    when the prediction is missing, not finite or <= 0). One row per row of ``best``.
    """
    rows = []
    for b, k in zip(best["batch_size"], best["best_num_draft_tokens"], strict=True):
        raw = predicted.get(int(b))
        pred = float(raw) if raw is not None else math.nan
        ratio = float(k) / pred if math.isfinite(pred) and pred > 0 else math.nan
        rows.append(
            {"batch_size": int(b), "measured_k": int(k), "predicted_k_opt": pred, "ratio": ratio}
        )
    columns = ["batch_size", "measured_k", "predicted_k_opt", "ratio"]
    return pd.DataFrame(rows, columns=columns).astype(
        {"batch_size": "int64", "measured_k": "int64", "predicted_k_opt": "float64"}
    )


def _state(table: pd.DataFrame) -> pd.Series:
    if "state" in table.columns:
        return table["state"].astype(str)
    return pd.Series(["completed"] * len(table), index=table.index)


def _completed(table: pd.DataFrame, value: str) -> pd.DataFrame:
    if value not in table.columns:
        raise ValueError(
            f"column {value!r} is not in the trial table; it has {list(table.columns)}"
        )
    values = pd.to_numeric(table[value], errors="coerce").astype("float64")
    keep = (
        (_state(table) == "completed")
        & np.isfinite(values)
        & table["batch_size"].notna()
        & table["num_draft_tokens"].notna()
    )
    out = table[keep].copy()
    out[value] = values[keep]
    return out


def _mean(frame: pd.DataFrame, column: str) -> float:
    if column not in frame.columns:
        return math.nan
    vals = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
    vals = vals[np.isfinite(vals)]
    return float(vals.mean()) if len(vals) else math.nan


def _empty_surface() -> pd.DataFrame:
    return pd.DataFrame(
        index=pd.Index([], dtype="int64", name="batch_size"),
        columns=pd.Index([], dtype="int64", name="num_draft_tokens"),
        dtype="float64",
    )
