"""The hardware a sweep's trials are costed on: this machine, its CPU or a datasheet GPU, with its
profile per dtype, its fingerprint and how many trials run at once (used by
:mod:`orchestrator.cost.model`)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from orchestrator.errors import OrchestratorError
from orchestrator.spec.sweep import SweepSpec
from workloads.roofline.hardware import (
    LOCAL_CPU,
    HardwareProfile,
    canonical_dtype,
    datasheet_name,
    get_profile,
    hardware_fingerprint,
    profile_name,
    profile_names,
    read_local_cpu,
)

__all__ = ["HARDWARE_NAMES", "Hardware", "check_hardware_name", "resolve_hardware", "slots_for"]

HARDWARE_NAMES = (*profile_names(), "cpu")
"""names ``--hardware`` accepts (``cpu`` is ``local-cpu``)"""


def slots_for(num_cpus: float, num_gpus: float, *, cpus: float, gpus: float) -> int:
    """Trials at once on ``cpus`` CPUs and ``gpus`` GPUs when each takes ``num_cpus`` and
    ``num_gpus``: the rule of :func:`orchestrator.driving.runner.in_flight_limit` (at least 1)."""
    limits = [int(cpus // num_cpus)]
    if num_gpus:
        limits.append(int(gpus // num_gpus))
    return max(1, min(limits))


@dataclass(frozen=True)
class Hardware:
    """Where the trials are costed: its profile per dtype, its fingerprint and parallelism."""

    label: str
    """e.g. ``h200`` or ``local-cpu (AMD EPYC 7B13, 1 thread)``"""
    kind: Literal["cpu", "gpu"]
    fingerprint: str
    """:func:`~workloads.roofline.hardware.hardware_fingerprint` of a trial run there"""
    slots: int
    """trials at once"""
    gpus_per_trial: float
    """GPUs each trial holds (0 on a CPU)"""
    devices: int
    """devices of this kind in all (GPUs; CPU cores on a CPU)"""
    profile_of: Callable[[str], HardwareProfile | None] = field(repr=False)
    """dtype -> profile (None: no profile, the reason in ``missing``)"""
    missing: str = ""
    notes: tuple[str, ...] = ()


def check_hardware_name(name: str) -> str:
    """The profile ``--hardware`` names (:func:`workloads.roofline.hardware.profile_name`).

    Raises:
        OrchestratorError: an unknown name, with the closest one and the names known.
    """
    try:
        return profile_name(name)
    except ValueError as exc:
        raise OrchestratorError(f"--hardware {exc}") from None


def _local_cpu(spec: SweepSpec, cache_dir: Path | None) -> Hardware:
    threads = max(1, int(spec.resources.num_cpus))
    cores = os.cpu_count() or 1

    def profile_of(dtype: str) -> HardwareProfile | None:
        dt = canonical_dtype("float32" if dtype == "auto" else dtype)
        found = read_local_cpu(cache_dir, dtype=dt, threads=threads) if cache_dir else None
        return found or get_profile(LOCAL_CPU, dtype=dt, threads=threads)

    fp = hardware_fingerprint(device="cpu", threads=threads)
    cpu = fp.split(":", 1)[1].rsplit(":", 1)[0]
    return Hardware(
        label=f"{LOCAL_CPU} ({cpu}, {threads} thread{'s' if threads != 1 else ''} a trial)",
        kind="cpu",
        fingerprint=fp,
        slots=slots_for(spec.resources.num_cpus, 0, cpus=cores, gpus=0),
        gpus_per_trial=0.0,
        devices=cores,
        profile_of=profile_of,
    )


def _gpu(name: str | None, spec: SweepSpec, devices: int, extra: float) -> Hardware:
    """GPUs of datasheet profile ``name`` (None: no profile for the GPU found, or none)."""
    asked = spec.resources.num_gpus
    per_trial = (asked or 1.0) + extra
    notes = []
    if not asked:
        notes.append(f"resources.num_gpus is 0: each trial costed on one {name or 'GPU'}")
    if per_trial > devices:
        notes.append(f"a trial holds {per_trial:g} GPUs, more than the {devices} given")

    def profile_of(dtype: str) -> HardwareProfile | None:
        if name is None:
            return None
        dt = dtype if dtype in ("bfloat16", "float16") else "bfloat16"
        return get_profile(name, dtype=dt)

    return Hardware(
        label=name or "GPU",
        kind="gpu",
        fingerprint=f"gpu:{name}",
        slots=max(1, int(devices // per_trial)),
        gpus_per_trial=per_trial,
        devices=devices,
        profile_of=profile_of,
        missing="" if name else "no GPU with a datasheet profile here: name one with --hardware",
        notes=tuple(notes),
    )


def _this_machine(spec: SweepSpec, cache_dir: Path | None, extra: float) -> Hardware:
    if not spec.resources.num_gpus:
        return _local_cpu(spec, cache_dir)
    import torch

    if not torch.cuda.is_available():
        return _gpu(None, spec, 1, extra)
    gpu = torch.cuda.get_device_name(0)
    hw = _gpu(datasheet_name(gpu), spec, torch.cuda.device_count(), extra)
    cores = os.cpu_count() or 1
    cpu_slots = slots_for(spec.resources.num_cpus, 0, cpus=cores, gpus=0)
    return dataclasses.replace(hw, slots=min(hw.slots, cpu_slots))


def resolve_hardware(
    spec: SweepSpec,
    hardware: str | None,
    devices: int,
    cache_dir: Path | None,
    extra_gpus: float = 0.0,
) -> Hardware:
    """The hardware trials of ``spec`` are costed on: this machine (``hardware`` None: its CPU,
    or its GPUs when the spec asks for GPUs; ``devices`` ignored), its CPU (``local-cpu``), or
    ``devices`` GPUs of a datasheet profile. ``extra_gpus``: GPUs a trial holds beyond
    ``resources.num_gpus`` (:func:`orchestrator.driving.runner.extra_gpus`).

    Raises:
        OrchestratorError: an unknown hardware name.
    """
    if hardware is None:
        return _this_machine(spec, cache_dir, extra_gpus)
    name = check_hardware_name(hardware)
    if name == LOCAL_CPU:
        return _local_cpu(spec, cache_dir)
    return _gpu(name, spec, max(1, devices), extra_gpus)
