"""The sweep driver: spec -> trials in SQL -> Ray tasks -> SQL + MLflow -> fit -> dashboard.

The results store is the source of truth: a resubmitted sweep skips completed trial keys and
reruns pending, failed and stale running ones. At most as many trials are in flight as the
Ray cluster has room for, so ``running`` in the store means running. A spec with a ``search:``
block registers no grid trials: :mod:`orchestrator.search` asks Optuna for them and runs each
with :func:`start_trial` / :func:`finish_trial`, like :func:`run_trials` does.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from orchestrator import _task
from orchestrator.errors import OrchestratorError
from orchestrator.grid import TrialSpec, expand
from orchestrator.spec import SweepSpec
from orchestrator.store import ResultsStore, TrialInfo, TrialState, driver_id, mask_url
from orchestrator.tracking import Tracker

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunPaths:
    """Where a sweep writes: run root, shared cache, trial artifacts, dashboard."""

    run_root: Path
    cache_dir: Path

    def trial_dir(self, sweep: str, key: str) -> Path:
        """Artifact folder of one trial."""
        return self.run_root / sweep / "trials" / key

    def dashboard(self, sweep: str) -> Path:
        """The sweep's HTML dashboard."""
        return self.run_root / sweep / "dashboard.html"


@dataclass
class SubmitSummary:
    """Counts of one submit: trials in the sweep, skipped as completed (or not asked for), run,
    failed, cancelled."""

    total: int
    skipped: int
    completed: int
    failed: int
    cancelled: int = 0


HEARTBEAT_S = 5.0
"""how often a driver renews its lease on the sweep and checks for a cancel request, s"""
STALE_AFTER_S = 60.0
"""a lease not renewed for this long is free (a driver on another host that died)"""


Events = Callable[[str, TrialInfo, dict[str, float] | None], None]
"""``(event, trial, metrics)`` with event in started/completed/failed/cancelled (and reused for a
search proposal already completed): progress for the CLI"""


def register(
    store: ResultsStore, spec: SweepSpec, spec_path: Path, spec_text: str
) -> tuple[int, list[TrialSpec]]:
    """Create or update the sweep row and insert its missing trials as pending.

    A search spec inserts none: its trials are added as the study proposes them.
    """
    sweep_id = store.upsert_sweep(spec.name, spec.workload, spec_text, str(spec_path))
    trials = [] if spec.search is not None else expand(spec)
    store.add_trials(
        sweep_id, [(t.key, t.config.model_dump(mode="json"), t.overrides) for t in trials]
    )
    return sweep_id, trials


def in_flight_limit(spec: SweepSpec) -> int:
    """Trials of ``spec`` the Ray cluster has room for at once (at least 1)."""
    res = ray.cluster_resources()
    limits = [int(res.get("CPU", 1) // spec.resources.num_cpus)]
    if spec.resources.num_gpus:
        limits.append(int(res.get("GPU", 0) // spec.resources.num_gpus))
    return max(1, min(limits))


def run_trials(
    store: ResultsStore,
    tracker: Tracker,
    spec: SweepSpec,
    sweep_id: int,
    parent_run: str,
    paths: RunPaths,
    on_event: Events | None = None,
    *,
    states: set[str] | None = None,
) -> SubmitSummary:
    """Run every trial of the sweep that is not completed (or only those in ``states``, e.g.
    ``{"failed"}``); record each outcome.

    The driver holds the sweep's lease (:meth:`ResultsStore.claim_sweep`) while it runs,
    renewing it every :data:`HEARTBEAT_S`; a cancel request (``orchestrator cancel``) stops the
    running trials (``ray.cancel``, force) and marks them cancelled. One trial's failure is
    recorded (state failed, error text, traceback artifact) and the sweep goes on. Ray must be
    initialised.

    Raises:
        StoreError: another live driver runs this sweep.
    """
    emit = on_event or (lambda *_: None)
    with sweep_lease(store, sweep_id) as me:
        return _run_claimed(store, tracker, spec, sweep_id, parent_run, paths, emit, states, me)


@contextmanager
def sweep_lease(store: ResultsStore, sweep_id: int) -> Iterator[str]:
    """Hold the sweep's lease (claim, yield this driver's id, release) around a driver loop.

    Raises:
        StoreError: another live driver holds it (a stale one, silent for
            :data:`STALE_AFTER_S`, is taken over).
    """
    me = driver_id()
    store.claim_sweep(sweep_id, me, stale_after_s=STALE_AFTER_S)
    try:
        yield me
    finally:
        store.release_sweep(sweep_id, me)


def _run_claimed(
    store: ResultsStore,
    tracker: Tracker,
    spec: SweepSpec,
    sweep_id: int,
    parent_run: str,
    paths: RunPaths,
    emit: Events,
    states: set[str] | None,
    me: str,
) -> SubmitSummary:
    store.reset_stale_running(sweep_id)
    all_trials = store.trials(sweep_id)
    todo = [
        t
        for t in all_trials
        if t.state != TrialState.COMPLETED and (states is None or t.state in states)
    ]
    summary = SubmitSummary(
        total=len(all_trials), skipped=len(all_trials) - len(todo), completed=0, failed=0
    )
    remote = trial_task(spec)
    limit = in_flight_limit(spec)
    pending = list(todo)
    running: dict[ray.ObjectRef, tuple[TrialInfo, str, float]] = {}
    beat = time.monotonic()
    while pending or running:
        while pending and len(running) < limit:
            trial = pending.pop(0)
            ref, run_id = start_trial(store, tracker, remote, spec, trial, parent_run, paths)
            running[ref] = (trial, run_id, time.perf_counter())
            emit("started", trial, None)
        done, _ = ray.wait(list(running), num_returns=1, timeout=HEARTBEAT_S)
        if time.monotonic() - beat >= HEARTBEAT_S or not done:
            beat = time.monotonic()
            if store.heartbeat(sweep_id, me):
                _cancel_running(store, tracker, running, emit, summary)
                summary.cancelled += len(pending)
                break
        if not done:
            continue
        trial, run_id, t0 = running.pop(done[0])
        outcome = finish_trial(store, tracker, trial, run_id, done[0], time.perf_counter() - t0)
        if outcome.ok:
            summary.completed += 1
            emit("completed", trial, outcome.metrics)
        else:
            summary.failed += 1
            emit("failed", trial, {"error": 0.0})
    return summary


def _cancel_running(
    store: ResultsStore,
    tracker: Tracker,
    running: dict[ray.ObjectRef, tuple[TrialInfo, str, float]],
    emit: Events,
    summary: SubmitSummary,
) -> None:
    """Stop every running trial's task and record it cancelled (SQL and MLflow)."""
    for ref, (trial, run_id, _t0) in running.items():
        ray.cancel(ref, force=True)
        store.mark_cancelled(trial.id)
        tracker.set_state(run_id, TrialState.CANCELLED, "cancelled by the user")
        summary.cancelled += 1
        emit("cancelled", trial, None)
    running.clear()


def task_options(spec: SweepSpec, *, hold_gpus: bool = True) -> dict[str, Any]:
    """Ray options of a trial's task: the spec's resources and retries.

    ``hold_gpus=False``: the task asks for no GPU, for a trial whose training workers take the
    spec's GPUs (Ray lends a waiting task's CPUs to the workers it waits for, not its GPUs).
    """
    r = spec.resources
    return {
        "num_cpus": r.num_cpus,
        "num_gpus": r.num_gpus if hold_gpus else 0,
        "max_retries": r.max_retries,
        "retry_exceptions": r.retry_exceptions,
        "memory": int(r.memory_gb * 2**30) if r.memory_gb else None,
    }


def trial_task(spec: SweepSpec, *, hold_gpus: bool = True) -> Any:
    """The Ray remote function of one trial with :func:`task_options`."""
    # ray's stubs only model positional-argument functions (run_trial is keyword-only)
    return ray.remote(_task.run_trial).options(  # type: ignore[arg-type]
        **task_options(spec, hold_gpus=hold_gpus)
    )


def start_trial(
    store: ResultsStore,
    tracker: Tracker,
    remote: Any,
    spec: SweepSpec,
    trial: TrialInfo,
    parent_run: str,
    paths: RunPaths,
) -> tuple[ray.ObjectRef, str]:
    """Open the trial's MLflow child run, mark it running, submit its Ray task.

    Returns:
        The task's object ref and the MLflow run id.
    """
    run_id = tracker.start_trial_run(
        parent_run,
        spec.name,
        trial.key,
        trial.config,
        trial.mlflow_run_id,
        overrides=trial.overrides,
    )
    store.mark_running(trial.id, run_id)
    if trains_on_workers(spec, trial.config):
        remote = trial_task(spec, hold_gpus=False)
    ref = remote.remote(
        workload=spec.workload,
        config_json=trial.config,
        tracker=tracker,
        run_id=run_id,
        trial_key=trial.key,
        cache_dir=str(paths.cache_dir),
        out_dir=str(paths.trial_dir(spec.name, trial.key)),
        run_root=str(paths.run_root),
        threads=max(1, int(spec.resources.num_cpus)),
        resources=spec.resources.model_dump(mode="json"),
    )
    return ref, run_id


def trains_on_workers(spec: SweepSpec, config: dict[str, Any]) -> bool:
    """Whether a trial trains its draft on Ray Train workers (``train.workers > 1`` or
    ``train.deepspeed``): its task then holds the spec's CPUs, lent to the workers while it
    waits for them, and no GPU (each worker takes ``num_gpus / workers``)."""
    train = getattr(spec.config_model.model_validate(config), "train", None)
    return bool(getattr(train, "on_workers", False))


def finish_trial(
    store: ResultsStore,
    tracker: Tracker,
    trial: TrialInfo,
    run_id: str,
    ref: ray.ObjectRef,
    wall_s: float,
) -> _task.TaskOutcome:
    """Fetch a finished task's outcome and record it (SQL and MLflow state); never raises for
    a trial error (a worker or node that died after its retries is a failed outcome)."""
    try:
        outcome: _task.TaskOutcome = ray.get(ref)
    except (ray.exceptions.RayError, OSError) as exc:  # worker/node died after retries
        outcome = _task.TaskOutcome(ok=False, error=f"{type(exc).__name__}: {exc}"[:4000])
    if outcome.ok:
        store.log_metrics(trial.id, outcome.metrics)
        for name, values in outcome.series.items():
            store.log_metric_series(trial.id, name, values)
        store.mark_completed(trial.id, wall_s)
        tracker.set_state(run_id, TrialState.COMPLETED)
    else:
        error = outcome.error or "unknown error"
        if outcome.traceback:
            error += "\n" + outcome.traceback
        store.mark_failed(trial.id, error, wall_s)
        tracker.set_state(run_id, TrialState.FAILED, error)
    return outcome


def check_ray_address(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast when nothing listens at a Ray address (``host:port`` or ``ray://host:port``).

    Raises:
        OrchestratorError: the address is malformed or its port does not accept connections.
    """
    hostport = address.split("://", 1)[-1].rstrip("/")
    if address == "auto":
        return
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise OrchestratorError(
            f"--address {address!r} is not a Ray address. Example: --address ray://head:10001 "
            "or --address 10.0.0.5:6379"
        )
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise OrchestratorError(
            f"cannot reach the Ray cluster at {mask_url(address)} ({e}). Check that the head node "
            "is up, or leave out --address (and RAY_ADDRESS) to run on a local Ray"
        ) from None


def init_ray(address: str | None, *, num_cpus: int | None = None) -> None:
    """Connect to ``address`` (a Ray cluster) or start a local Ray bound to 127.0.0.1.

    Raises:
        OrchestratorError: the cluster cannot be reached.
    """
    if ray.is_initialized():
        return
    if not address:
        ray.init(
            # "local": always a new Ray; None would attach to the last cluster started on this
            # machine (/tmp/ray/ray_current_cluster), even a test cluster that is gone
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            log_to_driver=True,
            logging_level=logging.WARNING,
        )
        return
    check_ray_address(address)
    try:
        ray.init(address=address, log_to_driver=True, logging_level=logging.WARNING)
    except (ConnectionError, TimeoutError, RuntimeError) as e:
        raise OrchestratorError(f"cannot connect to the Ray cluster at {address}: {e}") from None
