"""What a sweep service tells whoever drives it (the CLI renders these; a test collects them).

A service never prints: it emits :class:`SweepOpened` once, a :class:`TrialEvent` per trial
transition, and :class:`SweepFinished` at the end, with the counts of the driver loop
(:class:`Tally`, kept by :func:`~orchestrator.driving.sweep_run.drive`) and of a search's study
(:class:`SearchSummary`, kept by :class:`~orchestrator.driving.search.SearchProposals`) or of
a design (:class:`DesignSummary`, kept by :class:`~orchestrator.design.driver.DesignProposals`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

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


@dataclass(frozen=True)
class Best:
    """The best trial of a study: its Optuna number, metric value, sampled params, trial key."""

    number: int
    value: float
    params: dict[str, Any]
    trial_key: str | None


@dataclass
class SearchSummary:
    """One submit of a search: trials run (completed, failed), reused, counted before and after.

    ``counted`` is the study's finished trials that count towards ``n_trials``; ``error`` is set
    when the search stopped early (the metric is not reported).
    """

    n_trials: int
    before: int
    completed: int = 0
    failed: int = 0
    reused: int = 0
    counted: int = 0
    best: Best | None = None
    error: str | None = None
    cancelled: int = 0


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
    search: SearchSummary | None = None
    """the study's side of a search (counted trials, best trial, stop error)"""
    design: DesignSummary | None = None
    """the design's side of an adaptive design (why it stopped, half-width, compute)"""


@dataclass(frozen=True)
class CostPredicted:
    """The predicted cost of the trials a submit is about to run, emitted once its checks
    passed and before the sweep opens (the banner's totals)."""

    cost: Any
    """an :class:`orchestrator.cost.model.SweepCost`"""


Event = SweepOpened | TrialEvent | SweepFinished | CostPredicted
Listener = Callable[[Event], None]


def ignore(_event: Event) -> None:
    """A listener that drops every event."""
