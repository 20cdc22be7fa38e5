"""Workload ``decode_bench``: one trial of the engine's decoding benchmark
(:func:`workloads.measure.decode.run`) in the context the orchestrator gives it."""

from __future__ import annotations

from workloads.decode_bench.config import DecodeBenchConfig
from workloads.protocol import TrialContext
from workloads.result import TrialResult


def run(cfg: DecodeBenchConfig, ctx: TrialContext) -> TrialResult:
    """Run one trial (metrics and errors: :func:`workloads.measure.decode.run`)."""
    from workloads.measure import decode  # torch: on the worker

    return decode.run(
        cfg,
        cache_dir=ctx.cache_dir,
        out_dir=ctx.out_dir,
        run_root=ctx.run_root,
        progress=ctx.progress,
    )
