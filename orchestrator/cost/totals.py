"""A predicted cost's records: a stage's seconds and basis, a trial's stages, a sweep's trials and
what they add up to on its hardware (made by :mod:`orchestrator.cost.model`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from orchestrator.cost.hardware import Hardware
from orchestrator.cost.schedule import wall_time

__all__ = ["Basis", "StageCost", "SweepCost", "TrialCost"]

Basis = Literal["calibrated", "modelled", "unknown"]


@dataclass(frozen=True)
class StageCost:
    """One stage's predicted seconds and where the figure comes from."""

    stage: str
    seconds: float | None
    """predicted seconds; None when ``basis`` is ``unknown``"""
    basis: Basis
    detail: str
    """how the figure was made (the fit and its trials, or FLOPs over throughput)"""


@dataclass(frozen=True)
class TrialCost:
    """A trial's predicted seconds, stage by stage."""

    stages: tuple[StageCost, ...]

    @property
    def total_s(self) -> float | None:
        """Seconds of all stages; None when any stage is unknown."""
        if any(s.seconds is None for s in self.stages):
            return None
        return sum(s.seconds or 0.0 for s in self.stages)

    @property
    def basis(self) -> str:
        """The bases of its stages joined by ``+`` (``calibrated``, ``modelled``,
        ``calibrated+modelled``, ``unknown``, ...)."""
        found = {s.basis for s in self.stages}
        return "+".join(b for b in ("calibrated", "modelled", "unknown") if b in found) or "unknown"

    def stage(self, name: str) -> StageCost | None:
        """The stage ``name``, or None when the trial does not run it."""
        return next((s for s in self.stages if s.stage == name), None)


@dataclass(frozen=True)
class SweepCost:
    """A sweep's trials' costs in run order, and what they add up to on its hardware."""

    trials: tuple[tuple[str, TrialCost], ...]
    """(trial key, cost) in the order the trials are submitted"""
    hardware: Hardware
    schedule_wall_s: float | None = None
    """wall seconds of the schedule that made the trials' costs (:func:`simulate`); None: the
    costs were made apart, :func:`wall_time` of their totals"""
    one_slot_wall_s: float | None = None
    """wall seconds of the same trials one at a time (one GPU, one CPU slot), where that
    schedule differs (no waits; shared work built by the first trial that needs it); None:
    :attr:`wall_s` is already one slot's, or the costs were made apart"""

    @property
    def unknown(self) -> int:
        """Trials whose total is unknown."""
        return sum(1 for _, c in self.trials if c.total_s is None)

    @property
    def serial_s(self) -> float | None:
        """Seconds of all trials one after another; None when any trial is unknown."""
        return None if self.unknown else sum(c.total_s or 0.0 for _, c in self.trials)

    @property
    def wall_s(self) -> float | None:
        """Wall seconds at :attr:`Hardware.slots` trials at once: the schedule's
        (:meth:`Predictor.sweep`), else :func:`wall_time` of the totals; None when any trial
        is unknown."""
        totals = [c.total_s for _, c in self.trials]
        if self.schedule_wall_s is not None and None not in totals:
            return self.schedule_wall_s
        return wall_time(totals, self.hardware.slots)

    @property
    def gpu_hours(self) -> float | None:
        """GPU-hours (GPUs per trial x hours, summed) of GPU trials; None on a CPU or when
        any trial is unknown."""
        serial = self.serial_s
        if self.hardware.kind != "gpu" or serial is None:
            return None
        return self.hardware.gpus_per_trial * serial / 3600.0

    @property
    def basis(self) -> str:
        """The bases of its trials' figures joined by ``+``."""
        parts = {p for _, c in self.trials for p in c.basis.split("+")}
        return "+".join(b for b in ("calibrated", "modelled", "unknown") if b in parts) or "unknown"
