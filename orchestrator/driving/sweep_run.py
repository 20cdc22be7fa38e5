"""One driver loop for every sweep: a :class:`SweepRun` and a source of proposals.

:func:`drive` keeps as many trials in flight as the Ray cluster has room for; it asks its
:class:`Proposals` for the next trial (the sweep kind's: the grid's pending queue, Optuna's ask,
an adaptive design's step; :mod:`orchestrator.kinds`) and tells it how each trial ended.
Every outcome is recorded by the driver only: in SQL, the system of record, then copied to MLflow
(:class:`~orchestrator.tracking.mirror.Mirror`). The driver renews its lease on the sweep every
:data:`HEARTBEAT_S`; a cancel request (``orchestrator cancel``) stops the running trials and ends
the loop.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import ray
from pydantic import BaseModel

from orchestrator.driving import runner
from orchestrator.driving.events import Listener, Summary, Tally, TrialEvent
from orchestrator.driving.task import TaskOutcome
from orchestrator.driving.worker_exit import crash_error
from orchestrator.spec.sweep import SweepSpec
from orchestrator.store.results import ResultsStore, TrialInfo, TrialState
from orchestrator.tracking.mirror import Mirror
from orchestrator.tracking.tracker import Tracker
from workloads.protocol import Workload

HEARTBEAT_S = runner.HEARTBEAT_S


@dataclass(frozen=True)
class TrialRef:
    """One trial in flight: its SQL row id, its MLflow child run id and its key."""

    trial_id: int
    run_id: str
    key: str


@dataclass
class SweepRun:
    """Everything one driver loop needs, opened once per submit or retry.

    ``driver`` is the lease holder's id (:func:`orchestrator.store.results.driver_id`): the
    sweep is claimed for it before the run is built and released after.
    """

    store: ResultsStore
    tracker: Tracker
    spec: SweepSpec
    sweep_id: int
    parent_run: str
    paths: runner.RunPaths
    driver: str
    mirror: Mirror = field(init=False)

    def __post_init__(self) -> None:
        self.mirror = Mirror(
            self.store, self.tracker, self.sweep_id, self.spec.name, self.parent_run
        )

    @property
    def workload(self) -> Workload:
        """The spec's workload (registry entry)."""
        return self.spec.workload_info

    def trial(self, key: str) -> TrialInfo | None:
        """The store's row of trial ``key`` in this sweep, or None."""
        return self.store.trial(self.sweep_id, key)

    def open_child(self, trial: TrialInfo) -> TrialRef:
        """Open (or reuse) the trial's MLflow child run and mark the trial running."""
        run_id = self.mirror.open(trial)
        self.store.mark_running(trial.id, run_id)
        return TrialRef(trial.id, run_id, trial.key)

    def submit(self, trial: TrialInfo, config: BaseModel) -> tuple[ray.ObjectRef, TrialRef]:
        """Open the trial's child run, mark it running and submit its Ray task."""
        ref = self.open_child(trial)
        remote = runner.trial_task(self.spec, hold_gpus=not runner.trains_on_workers(config))
        task = remote.remote(
            workload=self.spec.workload,
            config=config,
            trial_key=trial.key,
            cache_dir=str(self.paths.cache_dir),
            out_dir=str(self.paths.trial_dir(self.spec.name, trial.key)),
            run_root=str(self.paths.run_root),
            threads=max(1, int(self.spec.resources.num_cpus)),
            resources=self.spec.resources,
        )
        return task, ref

    def fail_unrun(self, trial: TrialInfo, error: str) -> None:
        """Record a trial that could not start (e.g. a config the model refuses) as failed."""
        ref = self.open_child(trial)
        self.record(ref, state=TrialState.FAILED, error=error, wall_s=0.0)

    def finish(self, task: ray.ObjectRef, ref: TrialRef, wall_s: float) -> TaskOutcome:
        """Fetch a finished task's outcome and record it in every sink; never raises for a
        trial error (a worker or node that died after its retries is a failed outcome, its
        error naming the exit Ray reports: :func:`.worker_exit.crash_error`)."""
        try:
            outcome: TaskOutcome = ray.get(task)
        except (ray.exceptions.RayError, OSError) as exc:  # worker/node died after retries
            out = self.paths.trial_dir(self.spec.name, ref.key) / "traceback.txt"
            outcome = TaskOutcome(
                ok=False,
                error=crash_error(exc, task)[:4000],  # a dead worker: how Ray says it ended
                artifacts=[out] if out.exists() else [],
            )
        if outcome.ok:
            self.record(
                ref,
                state=TrialState.COMPLETED,
                metrics=outcome.metrics,
                series=outcome.series,
                artifacts=outcome.artifacts,
                wall_s=wall_s,
            )
        else:
            error = outcome.error or "unknown error"
            if outcome.traceback:
                error += "\n" + outcome.traceback
            self.record(
                ref,
                state=TrialState.FAILED,
                artifacts=outcome.artifacts,
                error=error,
                wall_s=wall_s,
            )
        return outcome

    def record(
        self,
        ref: TrialRef,
        *,
        state: str,
        metrics: Mapping[str, float] | None = None,
        series: Mapping[str, Sequence[float]] | None = None,
        artifacts: Sequence[Path] = (),
        error: str | None = None,
        wall_s: float | None = None,
    ) -> None:
        """Record one finished trial in SQL, results first and then its final state (a crash
        in between leaves it ``running``, to be rerun, never ``completed`` without metrics);
        then copy it to its MLflow run (:meth:`Mirror.publish`).

        Raises:
            ValueError: ``state`` is not a final state.
            StoreError, TrackingError: the DB or MLflow failed.
        """
        if metrics:
            self.store.log_metrics(ref.trial_id, metrics)
        for name, values in (series or {}).items():
            self.store.log_metric_series(ref.trial_id, name, values)
        if state == TrialState.COMPLETED:
            self.store.mark_completed(ref.trial_id, wall_s or 0.0)
        elif state == TrialState.FAILED:
            self.store.mark_failed(ref.trial_id, error or "unknown error", wall_s)
        elif state == TrialState.CANCELLED:
            self.store.mark_cancelled(ref.trial_id)
        else:
            raise ValueError(f"not a final trial state: {state!r}")
        row = self.trial(ref.key)
        assert row is not None  # the row just written
        self.mirror.publish(row, ref.run_id, artifacts)

    def cancel(self, task: ray.ObjectRef, ref: TrialRef) -> None:
        """Stop a running trial's task and record it cancelled."""
        ray.cancel(task, force=True)
        self.record(ref, state=TrialState.CANCELLED, error="cancelled by the user")


@dataclass
class Flight:
    """A trial in flight: its row, its run's handle, when it started."""

    trial: TrialInfo
    ref: TrialRef
    t0: float


class Proposals(Protocol):
    """Where a driver loop's trials come from."""

    todo: int
    """trials this loop expects to run (for the progress bar)"""
    skipped: int
    """trials left alone (completed, or not in the states asked for)"""

    def propose(
        self, run: SweepRun, emit: Listener, tally: Tally, *, free: int = 1
    ) -> tuple[TrialInfo, Any] | None:
        """The next trial to run and its typed config, or None when nothing more is to run
        now. ``free``: the slots the cluster has room for now, this one included (a batch
        design picks that many at once). May record trials that need no run (refused,
        reused) and emit their events."""

    def finished(self, run: SweepRun, flight: Flight, outcome: TaskOutcome | None) -> None:
        """A trial ended (``outcome`` None: cancelled)."""

    def cancel_rest(self) -> int:
        """A cancel request: drop what is left to propose; return how many trials that was."""

    def close(self, run: SweepRun) -> Summary | None:
        """After the loop, under the lease: the kind's side of it (None: nothing to say)."""


def drive(run: SweepRun, proposals: Proposals, emit: Listener) -> Tally:
    """Run the proposals' trials on Ray, record each outcome, until none is left or a cancel
    request arrives. The caller holds the sweep's lease; Ray must be initialised.

    Raises:
        StoreError, TrackingError: the DB or MLflow failed.
    """
    tally = Tally(skipped=proposals.skipped)
    run.store.reset_stale_running(run.sweep_id)
    limit = runner.in_flight_limit(run.spec)
    running: dict[ray.ObjectRef, Flight] = {}
    beat = time.monotonic()
    while True:
        while (
            len(running) < limit
            and (nxt := proposals.propose(run, emit, tally, free=limit - len(running))) is not None
        ):
            trial, config = nxt
            task, ref = run.submit(trial, config)
            running[task] = Flight(trial, ref, time.perf_counter())
            emit(TrialEvent("started", trial))
        if not running:
            return tally
        done, _ = ray.wait(list(running), num_returns=1, timeout=HEARTBEAT_S)
        if not done or time.monotonic() - beat >= HEARTBEAT_S:
            beat = time.monotonic()
            if run.store.heartbeat(run.sweep_id, run.driver):  # cancel requested
                for task, flight in running.items():
                    run.cancel(task, flight.ref)
                    proposals.finished(run, flight, None)
                    tally.cancelled += 1
                    emit(TrialEvent("cancelled", flight.trial))
                tally.cancelled += proposals.cancel_rest()
                return tally
        if not done:
            continue
        flight = running.pop(done[0])
        outcome = run.finish(done[0], flight.ref, time.perf_counter() - flight.t0)
        if outcome.ok:
            tally.completed += 1
        else:
            tally.failed += 1
        proposals.finished(run, flight, outcome)
        if outcome.ok:
            emit(TrialEvent("completed", flight.trial, outcome.metrics))
        else:
            emit(TrialEvent("failed", flight.trial))
