"""The ``draft_train`` workload as the orchestrator sees it: its config, run, checks and cost."""

from __future__ import annotations

from collections.abc import Sequence

from workloads.draft_train.checks import CHECKS
from workloads.draft_train.config import DraftTrainConfig
from workloads.draft_train.cost import DRAFT_TRAIN_COST
from workloads.draft_train.describe import describe_cost
from workloads.protocol import TrialContext, Workload
from workloads.result import TrialResult

_ACCEPTANCE = (("acceptance_length", ".3f"), ("mismatches", "d"), ("near_ties", "d"))
"""a trial's console line: acceptance, and the greedy divergences beside those excused"""


def _describe(configs: Sequence[DraftTrainConfig]) -> list[str]:
    return describe_cost(configs)


def _run(cfg: DraftTrainConfig, ctx: TrialContext) -> TrialResult:
    from workloads.draft_train.run import run  # torch: on the worker

    return run(
        cfg,
        cache_dir=ctx.cache_dir,
        out_dir=ctx.out_dir,
        progress=ctx.progress,
        resources=ctx.resources,
    )


WORKLOAD = Workload(
    name="draft_train",
    config_model=DraftTrainConfig,
    run=_run,
    summary="pretrain and SFT a draft, then measure its acceptance length",
    preflight=CHECKS,
    progress=_ACCEPTANCE,
    status_columns=(
        "acceptance_length",
        "acceptance_length_prompt_mean",
        "mismatches",
        "near_ties",
    ),  # fmt: skip
    report="law",
    describe=_describe,
    law_axes=("pretrain.tokens", "draft.layers"),  # Scylla Thm 1.1 and Thm 1.2
    law_metrics=("acceptance_length", "acceptance_length_prompt_mean"),
    cost=DRAFT_TRAIN_COST,
)
"""``draft_train``: pretrain and SFT a draft, then measure its acceptance length"""
