"""The ``sleep`` workload (a diagnostic) as the orchestrator sees it: its config and run."""

from __future__ import annotations

from workloads.protocol import TrialContext, Workload
from workloads.result import TrialResult
from workloads.sleep.config import SleepConfig
from workloads.sleep.run import run


def _run(cfg: SleepConfig, ctx: TrialContext) -> TrialResult:
    return run(cfg, out_dir=ctx.out_dir, progress=ctx.progress)


WORKLOAD = Workload(
    name="sleep",
    config_model=SleepConfig,
    run=_run,
    summary="a diagnostic that sleeps and optionally fails (tests the orchestration)",
    progress=(("sleep.seconds", ".2f"), ("sleep.attempt", "d")),
    status_columns=("sleep.seconds", "sleep.attempt"),
    report="table",
    example="sweeps/sleep.yaml",
    law_axes=("law_x",),  # a synthetic law, for testing adaptive designs
    law_metrics=("sleep.law_y",),
)
"""``sleep``: a diagnostic that sleeps and optionally fails (tests the orchestration)"""
