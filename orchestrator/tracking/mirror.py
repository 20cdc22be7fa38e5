"""MLflow as a view of the results DB, the one system of record.

The driver records a trial in SQL; :class:`Mirror` then copies what SQL holds to the trial's
MLflow child run. Every call is idempotent and keyed by the trial key: metrics are stamped with
the trial's finish time, so writing a trial again adds nothing. :meth:`Mirror.sync` rebuilds
runs MLflow lost. See docs/scale.md, "Who writes what".
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orchestrator.store.results import ResultsStore, TrialInfo, TrialState
from orchestrator.tracking.tracker import TAG_TRIAL_KEY, Tracker

__all__ = ["Mirror"]


class Mirror:
    """One sweep's MLflow runs, written from the results DB.

    ``parent_run``: the sweep's parent run id (:meth:`Tracker.start_sweep_run`), which SQL
    names for the sweep.
    """

    def __init__(
        self, store: ResultsStore, tracker: Tracker, sweep_id: int, sweep: str, parent_run: str
    ) -> None:
        self.store, self.tracker = store, tracker
        self.sweep_id, self.sweep, self.parent_run = sweep_id, sweep, parent_run

    def open(self, trial: TrialInfo) -> str:
        """The trial's child run, running: the live run SQL names (moved under this parent
        when MLflow lost the old one), else the one tagged with the trial key, else a new one;
        its params are the trial's config. Returns the run id (the caller records it in SQL).

        Raises:
            TrackingError: MLflow failed.
        """
        return self.tracker.start_trial_run(
            self.parent_run,
            self.sweep,
            trial.key,
            trial.config,
            trial.mlflow_run_id,
            overrides=trial.overrides,
        )

    def publish(self, trial: TrialInfo, run_id: str, artifacts: Sequence[Path] = ()) -> None:
        """Copy the trial's record from SQL to run ``run_id``: its metrics (one value: a
        scalar; more: a series by step), ``artifacts`` (files in the trial's folder), then its
        final state and error. ``trial`` is the row as SQL holds it after its final state.

        Raises:
            TrackingError: MLflow failed (SQL already holds the trial).
        """
        finished = trial.finished_at or trial.started_at
        stamp = int(finished.timestamp() * 1000) if finished else None
        logged = self.store.trial_metrics(trial.id)
        scalars = {name: values[0] for name, values in logged.items() if len(values) == 1}
        if scalars:
            self.tracker.log_metrics(run_id, scalars, timestamp_ms=stamp)
        for name, values in logged.items():
            if len(values) > 1:
                self.tracker.log_series(run_id, name, values, timestamp_ms=stamp)
        for path in artifacts:
            if path.exists():
                self.tracker.log_artifact(run_id, path)
        self.tracker.set_state(run_id, trial.state, trial.error)

    def sync(self) -> int:
        """Give each completed trial its finished child run, found by its trial key: made
        again where MLflow lost it, finished where MLflow left it unfinished, moved under this
        parent where it was under a lost one; finished runs are left alone. SQL is pointed at
        the run found (it may have named a run of another tracking store). Returns how many
        runs were made anew.

        Raises:
            StoreError, TrackingError: the DB or MLflow failed.
        """
        done = self.store.trials(self.sweep_id, {TrialState.COMPLETED})
        if not done:
            return 0
        children = {
            c["tags"].get(TAG_TRIAL_KEY): c for c in self.tracker.child_runs(self.parent_run)
        }
        made = 0
        for trial in done:
            child = children.get(trial.key)
            if child is not None and child.get("status") == "FINISHED":
                if child["run_id"] != trial.mlflow_run_id:
                    self.store.set_trial_mlflow_run(trial.id, child["run_id"])
                continue
            run_id = self.open(trial)
            if run_id != trial.mlflow_run_id:
                self.store.set_trial_mlflow_run(trial.id, run_id)
                made += child is None  # not found under this parent: made (or moved) here
            self.publish(trial, run_id)
        return made
