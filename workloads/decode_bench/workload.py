"""The ``decode_bench`` workload as the orchestrator sees it: its config, run and checks."""

from __future__ import annotations

from workloads.decode_bench.checks import CHECKS
from workloads.decode_bench.config import DecodeBenchConfig
from workloads.decode_bench.run import run
from workloads.protocol import Workload

_ACCEPTANCE = (("acceptance_length", ".3f"), ("mismatches", "d"), ("near_ties", "d"))
"""a trial's console line: acceptance, and the greedy divergences beside those excused"""

WORKLOAD = Workload(
    name="decode_bench",
    config_model=DecodeBenchConfig,
    run=run,
    summary="throughput and acceptance of speculative decoding against AR decoding",
    preflight=CHECKS,
    progress=(("tokens_per_s", ".2f"), ("speedup", ".2f"), *_ACCEPTANCE),
    status_columns=(
        "tokens_per_s",
        "ar_tokens_per_s",
        "speedup",
        "acceptance_length",
        "mismatches",
        "near_ties",
    ),  # fmt: skip
    report="throughput",
    example="sweeps/batch.yaml",
)
"""``decode_bench``: throughput and acceptance of speculative decoding against AR decoding"""
