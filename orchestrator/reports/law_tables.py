"""The law table of a stored sweep: which rows, x, y and law a sweep's main law is fitted on.

By the workload's registry ``report`` (no workload is named here):

- ``law`` with a law axis in its grid (Thm 1.1 ``pretrain.tokens``, Thm 1.2
  ``draft.layers``): every trial, ``acceptance_length`` vs that axis, log10;
- ``throughput``: the best configuration per batch size, ``peak_tokens_per_s`` vs
  ``batch_size``, log2 (Thm 1.3).

Or, asked for (``law="speedup"``), Thm 1.3's speedup, ``speedup`` vs ``batch_size``, log2: a
serving sweep's best speedup over its plain vLLM server per b in its first group of one draft
(:func:`orchestrator.reports.serving.serving_groups`), a decode sweep's speedup over this
engine's AR loop at the best configuration per b (the highest tokens/s,
:func:`analysis.throughput.best_per_batch`) in its reference condition.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.review import LawReview, review_law
from analysis.serving import has_serving_speedups, serving_points
from analysis.throughput import best_per_batch, split_conditions
from orchestrator.errors import OrchestratorError
from orchestrator.reports.decode import decode_frame
from orchestrator.reports.fit import Y, find_law_axis, no_law_axis_text, report_kind, trials_frame
from orchestrator.reports.serving import serving_groups, serving_parts
from orchestrator.store.results import ResultsStore, SweepInfo
from workloads.registry import WORKLOADS


@dataclass(frozen=True)
class LawTable:
    """A sweep's rows for its main law and the law's review."""

    sweep: str
    table: pd.DataFrame
    """one row per trial (a law sweep) or per batch size (a throughput sweep), with ``state``"""
    x: str
    y: str
    law: str
    log_base: int
    review: LawReview
    trial_keys: frozenset[str] = frozenset()
    """the completed trials the law rests on (a throughput sweep: its reference condition's)"""


LAWS = ("main", "speedup")
"""what :func:`law_table` reads: the sweep's main law, or Thm 1.3's speedup over b"""


def law_table(store: ResultsStore, info: SweepInfo, law: str = "main") -> LawTable:
    """The sweep's main law table and review, or (``law="speedup"``) its speedup over b's.

    Raises:
        ValueError: ``law`` is not one of :data:`LAWS`.
        OrchestratorError: the sweep has no such law (variants, a ``table`` workload, no law
            axis in its grid, no per-b speedups) or no trials.
    """
    if law not in LAWS:
        raise ValueError(f"law={law!r} is not one of {LAWS}")
    if law == "speedup":
        return _speedup_table(store, info)
    kind = report_kind(info)
    if kind == "throughput":
        # the reference condition (temperature, oracle_accept), as the stored fits
        reference = split_conditions(decode_frame(store, info.id))[0][1]
        best = best_per_batch(reference).assign(state="completed")
        keys = reference.loc[reference["state"] == "completed", "trial_key"]
        x, y, law, base, unit = "batch_size", "peak_tokens_per_s", "batch", 2, "batch sizes"
        table = best
    elif kind == "law":
        table = trials_frame(store, info.id)
        if "variant" in table.columns:
            raise OrchestratorError(
                f"sweep {info.name!r} compares variants side by side and fits no law; compare "
                "sweeps that fit a law"
            )
        axis = find_law_axis(info.spec_yaml)
        if axis is None:
            raise OrchestratorError(
                f"sweep {info.name!r}: {no_law_axis_text(info.spec_yaml)}. Fix: compare sweeps "
                "that fit a law"
                + (
                    ", or their speedup over b with --law speedup"
                    if has_serving_speedups(table)
                    else ""
                )
            )
        x, law = axis
        if x not in table.columns:
            raise OrchestratorError(
                f"sweep {info.name!r} has no trials over {x} yet; compare sweeps with trials"
            )
        y, base, unit = Y, 10, "trials"
        keys = table.loc[table["state"] == "completed", "trial_key"]
    else:
        with_law = ", ".join(n for n, w in WORKLOADS.items() if w.report != "table")
        raise OrchestratorError(
            f"sweep {info.name!r} is a {info.workload} sweep, which fits no law; compare "
            f"sweeps of {with_law}"
        )
    if y not in table.columns:
        table = table.assign(**{y: float("nan")})
    review = review_law(table, x, y, law=law, log_base=base, unit=unit)
    return LawTable(info.name, table, x, y, law, base, review, frozenset(map(str, keys)))


def _speedup_table(store: ResultsStore, info: SweepInfo) -> LawTable:
    """The speedup per b of the sweep's best configurations (module docstring)."""
    if report_kind(info) == "throughput":
        reference = split_conditions(decode_frame(store, info.id))[0][1]
        best = best_per_batch(reference)
        keys = reference.loc[reference["state"] == "completed", "trial_key"]
    else:
        frame = trials_frame(store, info.id)
        if not has_serving_speedups(frame):
            raise OrchestratorError(
                f"sweep {info.name!r} ({info.workload}) measured no speedup per batch size; "
                "compare decode_bench or serve_bench sweeps with --law speedup"
            )
        overrides = {k for t in store.trials(info.id) for k in t.overrides}
        groups = [(g, t) for g, t in serving_groups(frame, overrides) if len(serving_parts(t))]
        if not groups:
            raise OrchestratorError(
                f"sweep {info.name!r} serves drafts of several budgets, or no fixed K, at every "
                "b: no best speedup per batch size. Fix: compare serving sweeps of one draft "
                "(e.g. over serve.num_speculative_tokens)"
            )
        best = serving_parts(groups[0][1])[0][1]
        keys = serving_points(groups[0][1])["trial_key"]
    table = best.assign(state="completed")
    x, y = "batch_size", "speedup"
    review = review_law(table, x, y, law="speedup", log_base=2, unit="batch sizes")
    return LawTable(info.name, table, x, y, "speedup", 2, review, frozenset(map(str, keys)))
