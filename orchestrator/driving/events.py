"""What a sweep service tells whoever drives it (the CLI renders these; a test collects them).

A service never prints: it emits :class:`SweepOpened` once, a :class:`TrialEvent` per trial
transition, and :class:`SweepFinished` at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from orchestrator.store.results import TrialInfo

if TYPE_CHECKING:
    from orchestrator.driving.search import SearchSummary
    from orchestrator.driving.sweep_run import Tally
    from orchestrator.reports.fit import Report

TrialEventKind = Literal["started", "completed", "failed", "cancelled", "reused"]


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


Event = SweepOpened | TrialEvent | SweepFinished
Listener = Callable[[Event], None]


def ignore(_event: Event) -> None:
    """A listener that drops every event."""
