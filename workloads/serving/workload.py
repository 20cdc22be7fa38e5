"""The ``serve_bench`` workload as the orchestrator sees it: its config, run and checks."""

from __future__ import annotations

from workloads.protocol import TrialContext, Workload
from workloads.result import TrialResult
from workloads.serving.checks import CHECKS
from workloads.serving.config import ServeBenchConfig


def _run(cfg: ServeBenchConfig, ctx: TrialContext) -> TrialResult:
    from workloads.serving import bench

    return bench.run(
        cfg, cache_dir=ctx.cache_dir, out_dir=ctx.out_dir, run_root=ctx.run_root,
        progress=ctx.progress,
    )  # fmt: skip


WORKLOAD = Workload(
    name="serve_bench",
    config_model=ServeBenchConfig,
    run=_run,
    summary="a trained draft served by a real vLLM server against one without it",
    preflight=CHECKS,
    progress=(
        ("acceptance_length", ".3f"),
        ("engine.acceptance_length", ".3f"),
        ("speedup", ".2f"),
        ("mismatches", "d"),
        ("near_ties", "d"),
    ),
    status_columns=(
        "acceptance_length",
        "engine.acceptance_length",
        "tokens_per_s",
        "speedup",
        "mismatches",
        "near_ties",
    ),  # fmt: skip
    report="law",
    example="sweeps/serve-tokens.yaml",
    law_axes=("pretrain.tokens",),  # the token law on vLLM's acceptance
    law_metrics=("acceptance_length", "engine.acceptance_length"),
)
"""``serve_bench``: a trained draft served by a real vLLM server against one without it"""
