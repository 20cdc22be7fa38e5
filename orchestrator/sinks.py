"""Where a trial's results go: the results store and the MLflow tracker, through one call.

:class:`TrialSink` is the small protocol both sides implement (:class:`StoreSink` over
:class:`~orchestrator.store.results.ResultsStore`, :class:`TrackerSink` over
:class:`~orchestrator.tracking.tracker.Tracker`); :class:`Sinks` fans one trial's outcome out to
all of them. Only the sweep driver writes results: trial tasks return their metrics, series
and artifact paths (see ``docs/architecture.md``, "Who writes what").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from orchestrator.store.results import ResultsStore, TrialState
from orchestrator.tracking.tracker import Tracker


@dataclass(frozen=True)
class TrialRef:
    """One trial in both sinks: its store row id, its MLflow child run id and its key."""

    trial_id: int
    run_id: str
    key: str


class TrialSink(Protocol):
    """What a results sink does with one trial."""

    def log_metrics(self, trial: TrialRef, metrics: Mapping[str, float]) -> None:
        """Record scalar metrics (NaN and inf kept as such)."""

    def log_series(self, trial: TrialRef, name: str, values: Sequence[float]) -> None:
        """Record a per-step series (step = index)."""

    def log_artifacts(self, trial: TrialRef, paths: Sequence[Path]) -> None:
        """Keep files or folders the trial wrote (a sink without files ignores them)."""

    def set_state(
        self, trial: TrialRef, state: str, error: str | None = None, wall_s: float | None = None
    ) -> None:
        """Set the trial's final state (completed, failed or cancelled), with its error."""

    def close(self) -> None:
        """Release connections."""


class StoreSink:
    """:class:`TrialSink` over the SQL results store."""

    def __init__(self, store: ResultsStore) -> None:
        self.store = store

    def log_metrics(self, trial: TrialRef, metrics: Mapping[str, float]) -> None:
        self.store.log_metrics(trial.trial_id, metrics)

    def log_series(self, trial: TrialRef, name: str, values: Sequence[float]) -> None:
        self.store.log_metric_series(trial.trial_id, name, values)

    def log_artifacts(self, trial: TrialRef, paths: Sequence[Path]) -> None:
        """The store keeps no files (they stay in the trial's folder under the run root)."""

    def set_state(
        self, trial: TrialRef, state: str, error: str | None = None, wall_s: float | None = None
    ) -> None:
        if state == TrialState.COMPLETED:
            self.store.mark_completed(trial.trial_id, wall_s or 0.0)
        elif state == TrialState.FAILED:
            self.store.mark_failed(trial.trial_id, error or "unknown error", wall_s)
        elif state == TrialState.CANCELLED:
            self.store.mark_cancelled(trial.trial_id)
        else:
            raise ValueError(f"not a final trial state: {state!r}")

    def close(self) -> None:
        self.store.close()


class TrackerSink:
    """:class:`TrialSink` over the trial's MLflow child run."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker

    def log_metrics(self, trial: TrialRef, metrics: Mapping[str, float]) -> None:
        self.tracker.log_metrics(trial.run_id, metrics)

    def log_series(self, trial: TrialRef, name: str, values: Sequence[float]) -> None:
        self.tracker.log_series(trial.run_id, name, values)

    def log_artifacts(self, trial: TrialRef, paths: Sequence[Path]) -> None:
        for path in paths:
            if path.exists():
                self.tracker.log_artifact(trial.run_id, path)

    def set_state(
        self, trial: TrialRef, state: str, error: str | None = None, wall_s: float | None = None
    ) -> None:
        self.tracker.set_state(trial.run_id, state, error)

    def close(self) -> None:
        self.tracker.close()


class Sinks:
    """Every sink of a sweep; each call goes to all of them, in order (the store first)."""

    def __init__(self, *sinks: TrialSink) -> None:
        self.sinks = sinks

    def record(
        self,
        trial: TrialRef,
        *,
        state: str,
        metrics: Mapping[str, float] | None = None,
        series: Mapping[str, Sequence[float]] | None = None,
        artifacts: Sequence[Path] = (),
        error: str | None = None,
        wall_s: float | None = None,
    ) -> None:
        """Record one finished trial in every sink: results first, then its final state (so a
        crash in between leaves it ``running``, to be rerun, never ``completed`` without
        metrics)."""
        for sink in self.sinks:
            if metrics:
                sink.log_metrics(trial, metrics)
            for name, values in (series or {}).items():
                sink.log_series(trial, name, values)
            if artifacts:
                sink.log_artifacts(trial, artifacts)
        for sink in self.sinks:
            sink.set_state(trial, state, error, wall_s)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
