"""What every workload hands back to whoever runs it (a test, a Ray task, a notebook)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

Progress = Callable[[str], None]
"""called with one-line progress messages"""


@dataclass
class TrialResult:
    """Scalar metrics, per-step series, and files to keep."""

    metrics: dict[str, float] = field(default_factory=dict)
    series: dict[str, list[float]] = field(default_factory=dict)
    artifact_paths: list[Path] = field(default_factory=list)
    """files or folders to upload to the trial's tracking run"""
