"""Roofline model of speculative decoding (Scylla arXiv 2505.07858, Sec. 3.2 and Appendix C).

Model shapes, hardware profiles, FLOPs/bytes of one decoding step (target verification + draft
decoding + draft prefill), arithmetic intensity I(b, k), I_crit, the optimal k(b), theoretical
throughput. Pure functions; torch is imported only by the local-CPU micro-benchmark. The fits of
the paper's Eq. 4 and Thm 1.3 forms live in :mod:`analysis.eq4` (``fit_eq4``) and
:mod:`analysis.throughput` (``fit_peak_throughput``).
"""

from workloads.roofline.costs import (
    DRAFT_STEPS,
    Cost,
    KOpt,
    PeakThroughput,
    decoding_step,
    default_t_acc,
    draft_decode,
    draft_prefill,
    eq4_paper,
    intensity,
    k_opt,
    peak_throughput,
    step_time,
    target_step,
    tau_eq8,
    theoretical_throughput,
)
from workloads.roofline.hardware import (
    BUILTIN_PROFILES,
    LOCAL_CPU,
    HardwareProfile,
    get_profile,
    measure_local_cpu,
    profile_names,
)
from workloads.roofline.models import BUILTIN_SHAPES, ModelShape, builtin_names, load_model_shape

__all__ = [
    "BUILTIN_PROFILES",
    "BUILTIN_SHAPES",
    "DRAFT_STEPS",
    "LOCAL_CPU",
    "Cost",
    "HardwareProfile",
    "KOpt",
    "ModelShape",
    "PeakThroughput",
    "builtin_names",
    "decoding_step",
    "default_t_acc",
    "draft_decode",
    "draft_prefill",
    "eq4_paper",
    "get_profile",
    "intensity",
    "k_opt",
    "load_model_shape",
    "measure_local_cpu",
    "peak_throughput",
    "profile_names",
    "step_time",
    "target_step",
    "tau_eq8",
    "theoretical_throughput",
]
