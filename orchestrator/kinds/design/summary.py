"""What one submit of an adaptive design says at its end: :class:`DesignSummary`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from analysis.numbers import fmt

__all__ = ["DesignSummary"]


@dataclass
class DesignSummary:
    """One submit of an adaptive design (``design:``): why it stopped (``stop``: goal, budget,
    candidates or error; None: cancelled before a stop), the rule's words for it (``message``),
    the slope's CI half-width and the compute spent (trial seconds; GPU-seconds for GPU trials)
    against the budget, and what this submit did.

    ``already`` is set when the design had stopped before this submit and nothing was left to
    run; ``error`` when it stopped because the metric is not reported.
    """

    goal: float
    budget_s: float
    stop: str | None = None
    message: str = ""
    half_width: float | None = None
    spent_s: float = 0.0
    trials: int = 0
    """trials of the design completed (this submit and before)"""
    decisions: int = 0
    """decisions recorded by this submit"""
    already: bool = False
    error: str | None = None

    def counts_line(self, tally: Any) -> str | None:
        """The grid's counts line."""
        return None

    def lines(self, metric: str) -> list[str]:
        """Why the design stopped (or that it had stopped before), its slope's CI half-width
        against the goal and its compute against the budget."""
        if self.stop is None:
            return ["design: not finished (cancelled); resubmit to continue it"]
        half = fmt(self.half_width, ".4g")
        spent = f"{fmt(self.spent_s / 3600, '.3g')} of {fmt(self.budget_s / 3600, '.3g')} h spent"
        head = "design: done before this submit" if self.already else "design: stopped"
        return [
            f"{head} ({self.stop}): {self.message} [half-width {half}, goal "
            f"{fmt(self.goal, 'g')}; {spent}; {self.trials} trials]"
        ]

    @property
    def shows_fit(self) -> bool:
        """A design's law is fitted as a grid's."""
        return True
