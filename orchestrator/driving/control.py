"""``orchestrator cancel``: stop a sweep from any machine that shares its results DB."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.driving.runner import STALE_AFTER_S
from orchestrator.errors import OrchestratorError
from orchestrator.store.results import ResultsStore, SweepInfo, TrialState
from orchestrator.tracking.mirror import Mirror
from orchestrator.tracking.tracker import Tracker


@dataclass(frozen=True)
class CancelResult:
    """What a cancel did: pending trials cancelled, running ones cancelled here (no live
    driver), whether a live driver was asked, and the sweep's counts afterwards."""

    pending: int
    running_here: int
    live_driver: bool
    cancelled: int
    total: int


def cancel_sweep(
    store: ResultsStore,
    info: SweepInfo,
    *,
    wait_s: float,
    tracker: Callable[[], Tracker],
    on_requested: Callable[[int, int, bool], None] = lambda *_: None,
) -> CancelResult:
    """Cancel the sweep's pending trials; ask its live driver to stop the running ones and wait
    up to ``wait_s`` for it, or, with no live driver (it crashed), cancel them here and close
    their MLflow runs (``tracker`` opens MLflow only then). ``on_requested(pending cancelled,
    running cancelled here, live driver)`` is called once the request is recorded.

    Raises:
        OrchestratorError: trials still running after ``wait_s``.
    """
    n_pending, n_running, live = store.request_cancel(info.id, stale_after_s=STALE_AFTER_S)
    on_requested(n_pending, n_running, live)
    if live:
        deadline = time.monotonic() + wait_s
        while store.trials(info.id, {TrialState.RUNNING}) and time.monotonic() < deadline:
            time.sleep(1.0)
        left = len(store.trials(info.id, {TrialState.RUNNING}))
        if left:
            raise OrchestratorError(
                f"{left} trials still running after {wait_s:.0f} s; the driver may be busy "
                "(it checks every 5 s) — run `orchestrator status` later"
            )
    else:
        mirror = Mirror(store, tracker(), info.id, info.name, info.mlflow_run_id or "")
        for t in store.trials(info.id, {TrialState.CANCELLED}):
            if t.mlflow_run_id:
                mirror.publish(t, t.mlflow_run_id)
    trials = store.trials(info.id)
    n_cancelled = sum(t.state == TrialState.CANCELLED for t in trials)
    return CancelResult(n_pending, n_running, live, n_cancelled, len(trials))
