"""What a sweep service tells whoever drives it (the CLI renders these; a test collects them).

A service never prints: it emits :class:`SweepOpened` once, a :class:`TrialEvent` per trial
transition, and :class:`SweepFinished` at the end, with the counts of the driver loop
(:class:`Tally`, kept by :func:`~orchestrator.driving.sweep_run.drive`) and the sweep kind's
:class:`Summary` (a search's study, a design's stop; :mod:`orchestrator.kinds`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from orchestrator.store.results import TrialInfo

if TYPE_CHECKING:
    from orchestrator.reports.fit import Report

TrialEventKind = Literal["started", "completed", "failed", "cancelled", "reused"]


@dataclass
class Tally:
    """Counts of one driver loop: trials run (completed, failed), cancelled, answered from
    the store without running (``reused``), and left alone (``skipped``)."""

    skipped: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    reused: int = 0

    @property
    def bad(self) -> int:
        """Trials that did not complete (failed or cancelled)."""
        return self.failed + self.cancelled


class Summary(Protocol):
    """A sweep kind's side of one driver loop (a search's study, a design's stop); the kind
    makes it (:mod:`orchestrator.kinds`), the console prints it."""

    error: str | None
    """why the kind stopped the sweep early (the command exits 2), None when it did not"""

    def counts_line(self, tally: Tally) -> str | None:
        """The closing counts in the kind's words (None: the grid's line)."""

    def lines(self, metric: str) -> list[str]:
        """Plain text lines after the counts (a search's best trial, a design's stop)."""

    @property
    def shows_fit(self) -> bool:
        """Whether the sweep's fit follows (False: the run index instead)."""


@dataclass(frozen=True)
class SweepOpened:
    """The sweep is claimed and its parent run open; ``todo`` trials are about to run."""

    name: str
    what: str
    """e.g. "12 trials" or "Optuna search of 8 trials (maximize acceptance_length, ...)" """
    store_url: str
    tracking_uri: str
    parent_run: str
    todo: int
    skipped: int
    """completed trials left alone (a grid resubmit)"""
    lost_parent: str | None = None
    """the parent run the results DB named, when this tracking store did not have it"""
    restored: int = 0
    """completed trials whose child runs MLflow no longer had, recreated from the results DB"""


@dataclass(frozen=True)
class TrialEvent:
    """One trial started, finished or was answered from the store (``reused``)."""

    kind: TrialEventKind
    trial: TrialInfo
    metrics: dict[str, float] | None = None


@dataclass(frozen=True)
class SweepFinished:
    """The trials ran and the sweep's report is written."""

    name: str
    tally: Tally
    report: Report
    tracking_uri: str
    """MLflow's URI, password masked"""
    experiment_id: str
    summary: Summary | None = None
    """the kind's side: a search's study (counted trials, best trial), a design's stop"""


@dataclass(frozen=True)
class CostPredicted:
    """The predicted cost of the trials a submit is about to run, emitted once its checks
    passed and before the sweep opens (the banner's totals)."""

    cost: Any
    """an :class:`orchestrator.cost.totals.SweepCost`"""


Event = SweepOpened | TrialEvent | SweepFinished | CostPredicted
Listener = Callable[[Event], None]


def ignore(_event: Event) -> None:
    """A listener that drops every event."""
