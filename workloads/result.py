"""What every workload hands back to whoever runs it (a test, a Ray task, a notebook)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
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


CHECK_Y = "acceptance_length_during_training"
"""draft_train series ``<stage>/<this>``: the acceptance length at each check during the stage
(``eval.during_training_every``), tokens per cycle; check i at step i"""
CHECK_TOKENS = "acceptance_check_tokens"
"""draft_train series ``<stage>/<this>``: the stage's tokens seen at each check (the x of
:data:`CHECK_Y`)"""

MAX_SERIES_POINTS = 2000
"""points per series sent to SQL and MLflow; longer series are averaged down (the full series
goes to the trial's artifacts)"""


def downsample(
    values: Sequence[float], max_points: int = MAX_SERIES_POINTS
) -> tuple[list[float], int]:
    """Average consecutive runs of ``stride`` values so at most ``max_points`` remain.

    Point i is the mean of values ``[i * stride, (i + 1) * stride)`` (the last run may be
    shorter); a series of at most ``max_points`` values comes back as it is, stride 1. 3M steps
    of a 100B-token pretraining become 2,000 points of 1,500 steps each.

    Returns:
        The points and the stride (steps per point).

    Raises:
        ValueError: ``max_points`` < 1.
    """
    if max_points < 1:
        raise ValueError(f"max_points={max_points} must be >= 1")
    n = len(values)
    stride = max(1, -(-n // max_points))
    if stride == 1:
        return list(values), 1
    points = [
        math.fsum(values[i : i + stride]) / len(values[i : i + stride]) for i in range(0, n, stride)
    ]
    return points, stride
