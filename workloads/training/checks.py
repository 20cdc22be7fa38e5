"""Acceptance length during training: the draft as it stands, decoded at checkpoints of a stage.

A check runs whenever the stage's tokens seen pass the next multiple of ``every_tokens`` (after
the optimiser step that passes it) and once at the stage's end; each appends (tokens seen,
acceptance length) to the stage's :class:`~workloads.training.loop.StageLog`, so the points
travel in its checkpoints and a resumed stage neither repeats nor loses one. The draft is
measured in evaluation mode with no gradient and goes back to training mode; the optimiser, the
row order and the feature noise draw nothing from the checks, so a trial trains the same draft
with or without them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from workloads.training.loop import StageLog

Measure = Callable[[], float]
"""the acceptance length of the draft as it stands (tokens per cycle)"""


@dataclass
class AcceptanceChecks:
    """When to measure acceptance during a stage, and the time the measuring took."""

    every_tokens: int
    """tokens seen between checks, > 0"""
    measure: Measure
    say: Callable[[str], None]
    stage: str = "pretrain"
    wall_s: float = 0.0
    """seconds spent in checks during this stage (this call; not restored on resume)"""

    def __post_init__(self) -> None:
        if self.every_tokens < 1:
            raise ValueError(f"every_tokens={self.every_tokens} must be >= 1")

    def due(self, log: StageLog) -> bool:
        """Whether the tokens seen passed the next multiple of ``every_tokens`` since the last
        check."""
        last = log.check_tokens[-1] if log.check_tokens else 0
        return log.tokens_seen >= (last // self.every_tokens + 1) * self.every_tokens

    def after_step(self, log: StageLog) -> None:
        """Check when :meth:`due` (call after every optimiser step)."""
        if self.due(log):
            self._check(log)

    def at_end(self, log: StageLog) -> None:
        """The stage's last check, unless one ran at its last tokens already (or it saw none)."""
        if log.tokens_seen and (not log.check_tokens or log.check_tokens[-1] < log.tokens_seen):
            self._check(log)

    def _check(self, log: StageLog) -> None:
        t0 = time.perf_counter()
        value = float(self.measure())
        took = time.perf_counter() - t0
        self.wall_s += took
        log.check_tokens.append(log.tokens_seen)
        log.check_acceptance.append(value)
        self.say(
            f"{self.stage}: acceptance length {value:.3f} at {log.tokens_seen} tokens "
            f"(check took {took:.1f} s)"
        )
