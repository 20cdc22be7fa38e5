"""The law table of a stored sweep: which rows, x, y and law a sweep's main law is fitted on.

- ``draft_train`` with a law axis in its grid (Thm 1.1 ``pretrain.tokens``, Thm 1.2
  ``draft.layers``): every trial, ``acceptance_length`` vs that axis, log10;
- ``decode_bench``: the best configuration per batch size, ``peak_tokens_per_s`` vs
  ``batch_size``, log2 (Thm 1.3).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.review import LawReview, review_law
from analysis.throughput import best_per_batch
from orchestrator.errors import OrchestratorError
from orchestrator.reports.decode import decode_frame
from orchestrator.reports.fit import LAW_AXES, Y, law_axis, trials_frame
from orchestrator.store.results import ResultsStore, SweepInfo


@dataclass(frozen=True)
class LawTable:
    """A sweep's rows for its main law and the law's review."""

    sweep: str
    table: pd.DataFrame
    """one row per trial (draft_train) or per batch size (decode_bench), with ``state``"""
    x: str
    y: str
    law: str
    log_base: int
    review: LawReview


def law_table(store: ResultsStore, info: SweepInfo) -> LawTable:
    """The sweep's main law table and review.

    Raises:
        OrchestratorError: the sweep has no law (variants, diagnostic, or no law axis).
    """
    if info.workload == "decode_bench":
        best = best_per_batch(decode_frame(store, info.id)).assign(state="completed")
        x, y, law, base, unit = "batch_size", "peak_tokens_per_s", "batch", 2, "batch sizes"
        table = best
    elif info.workload == "draft_train":
        table = trials_frame(store, info.id)
        x, law = law_axis(info.spec_yaml)
        y, base, unit = Y, 10, "trials"
        if "variant" in table.columns or x not in table.columns:
            raise OrchestratorError(
                f"sweep {info.name!r} has no law axis (its grid has none of "
                f"{', '.join(LAW_AXES)}); compare sweeps that fit a law"
            )
    else:
        raise OrchestratorError(
            f"sweep {info.name!r} is a {info.workload} sweep, which fits no law; compare "
            "draft_train or decode_bench sweeps"
        )
    if y not in table.columns:
        table = table.assign(**{y: float("nan")})
    review = review_law(table, x, y, law=law, log_base=base, unit=unit)
    return LawTable(info.name, table, x, y, law, base, review)
