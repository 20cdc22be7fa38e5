"""The results store: sweeps, trials, metrics and law fits in SQL (SQLite or PostgreSQL).

:class:`ResultsStore` is the package's facade (its modules: docs/architecture.md): every public
method is one unit of work (:func:`~orchestrator.store.engine.session_scope`: commit, or roll
back and re-raise database errors as :class:`~orchestrator.errors.StoreError`) and takes and
returns plain data, never an ORM object.

A sweep's ``updated_at`` moves on every change to the sweep, its trials (added, state changed,
reset to pending), their metrics, its fits, or a cancel request; lease heartbeats leave it alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.errors import StoreError
from orchestrator.store import decisions as design
from orchestrator.store import fits, history, lease, metrics, sweeps
from orchestrator.store.decisions import Decision
from orchestrator.store.engine import (
    mask_url,
    normalize_db_url,
    open_database,
    reconnecting,
    session_scope,
)
from orchestrator.store.history import CompletedTrial
from orchestrator.store.lease import driver_id, lease_alive
from orchestrator.store.metrics import metric_row  # log_metrics(metrics=) hides the module
from orchestrator.store.rows import SweepInfo, TrialInfo, TrialRow, TrialState, _Base, now_utc
from orchestrator.store.trials import (
    find_trial,
    insert_trials,
    reset_to_pending,
    set_mlflow_run,
    set_trial_state,
    sweep_trials,
)

__all__ = [
    "CompletedTrial",
    "Decision",
    "ResultsStore",
    "SweepInfo",
    "TrialInfo",
    "TrialState",
    "_Base",
    "driver_id",
    "lease_alive",
    "mask_url",
    "normalize_db_url",
]


class ResultsStore:
    """SQL results store of sweeps, trials, metrics and fits (SQLite or PostgreSQL).

    Args:
        url: a SQLAlchemy database URL, e.g. ``sqlite:///runs/results.db`` or
            ``postgresql://user@host:5432/db`` (plain ``postgresql://`` and ``postgres://`` use
            psycopg 3).
        schema: PostgreSQL only: create this schema if missing and keep all tables in it (via
            the connection's ``search_path``).
        create: False (read-only commands): a database without this project's tables is
            refused, never created or migrated.

    Raises:
        StoreError: the URL is not a database URL, the database is unreachable, or
            (``create=False``) it has no results tables; the password is masked.
        ValueError: ``schema`` is not a plain identifier or is given for SQLite.
    """

    def __init__(self, url: str, *, schema: str | None = None, create: bool = True) -> None:
        db = open_database(url, schema=schema, create=create)
        self._url_text = db.url_text
        self._dialect = db.dialect
        self._engine = db.engine
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)
        self.schema_found = db.schema_found
        """the schema revision found on opening (``"none"`` for a new database)"""

    @classmethod
    def sqlite_under(cls, run_root: Path) -> ResultsStore:
        """Open (creating if needed) the SQLite store ``<run_root>/results.db``.

        Raises:
            StoreError: the file cannot be created or opened.
        """
        root = Path(run_root).expanduser().resolve()
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the run root {root}: {exc}") from exc
        return cls(f"sqlite:///{root / 'results.db'}")

    @property
    def url(self) -> str:
        """The database URL with its password masked."""
        return self._url_text

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._dialect

    def close(self) -> None:
        """Dispose of the engine and its pooled connections."""
        self._engine.dispose()

    # -- internals ---------------------------------------------------------------------------

    @contextmanager
    def _session(self) -> Iterator[Session]:
        with session_scope(self._sessions, self._url_text) as session:
            yield session

    # -- sweeps ------------------------------------------------------------------------------

    @reconnecting
    def upsert_sweep(self, name: str, workload: str, spec_yaml: str, spec_path: str) -> int:
        """Create the sweep ``name`` or update its spec; return its id (stable across calls).

        Raises:
            StoreError: the write failed.
        """
        with self._session() as s:
            return sweeps.upsert_sweep(
                s,
                self._dialect,
                name=name,
                workload=workload,
                spec_yaml=spec_yaml,
                spec_path=str(spec_path),
            )

    @reconnecting
    def set_sweep_mlflow_run(self, sweep_id: int, run_id: str | None) -> None:
        """Record the MLflow parent run id of a sweep.

        Raises:
            StoreError: no such sweep, or the write failed.
        """
        with self._session() as s:
            sweeps.set_mlflow_run(s, sweep_id, run_id, url_text=self._url_text)

    @reconnecting
    def get_sweep(self, name: str) -> SweepInfo | None:
        """Return the sweep called ``name``, or None."""
        with self._session() as s:
            return sweeps.find_sweep(s, name)

    @reconnecting
    def list_sweeps(self) -> list[SweepInfo]:
        """Return all sweeps, oldest first."""
        with self._session() as s:
            return sweeps.all_sweeps(s)

    @reconnecting
    def delete_sweep(self, sweep_id: int) -> None:
        """Delete a sweep with its trials, metrics and fits."""
        with self._session() as s:
            sweeps.delete_sweep(s, sweep_id)

    # -- the driver's lease and cancel requests (orchestrator.store.lease) -------------------

    @reconnecting
    def claim_sweep(self, sweep_id: int, driver: str, *, stale_after_s: float) -> None:
        """Make ``driver`` (``host:pid``) the one process running the sweep, and clear any
        cancel request. The sweep is free when no driver holds it, its holder's heartbeat is
        older than ``stale_after_s``, or the holder ran on this host and its process is gone.

        Raises:
            StoreError: another driver holds the sweep and is alive; the message says which.
        """
        with self._session() as s:
            lease.claim(s, sweep_id, driver, stale_after_s=stale_after_s, url_text=self._url_text)

    @reconnecting
    def heartbeat(self, sweep_id: int, driver: str) -> bool:
        """Renew ``driver``'s lease on the sweep; return True when a cancel was requested.

        Raises:
            StoreError: the lease was taken over by another driver.
        """
        with self._session() as s:
            return lease.renew(s, sweep_id, driver)

    @reconnecting
    def release_sweep(self, sweep_id: int, driver: str) -> None:
        """End ``driver``'s lease (a finished or stopped submit)."""
        with self._session() as s:
            lease.release(s, sweep_id, driver)

    @reconnecting
    def request_cancel(self, sweep_id: int, *, stale_after_s: float) -> tuple[int, int, bool]:
        """Ask the sweep's driver to stop: pending trials become cancelled at once; running
        ones are cancelled by the driver at its next heartbeat, or here when no live driver
        holds the sweep (it crashed).

        Returns:
            ``(pending cancelled, running cancelled here, a live driver was told)``.
        """
        with self._session() as s:
            return lease.cancel(s, sweep_id, stale_after_s=stale_after_s, url_text=self._url_text)

    # -- trials (orchestrator.store.trials) ---------------------------------------------------

    @reconnecting
    def add_trials(
        self, sweep_id: int, trials: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]]
    ) -> int:
        """Insert the missing ``(trial_key, config, overrides)`` as pending; return how many.
        Existing keys are left untouched (safe to call twice, or from two processes).

        Raises:
            ValueError: a trial key is longer than 64 characters.
            StoreError: no such sweep, or the write failed.
        """
        with self._session() as s:
            return insert_trials(s, self._dialect, sweep_id, trials)

    @reconnecting
    def trials(self, sweep_id: int, states: set[str] | None = None) -> list[TrialInfo]:
        """Return the trials of a sweep in insertion order, optionally only those in ``states``.

        Raises:
            ValueError: ``states`` names an unknown state.
        """
        with self._session() as s:
            return sweep_trials(s, sweep_id, states)

    def trial(self, sweep_id: int, key: str) -> TrialInfo | None:
        """The trial ``key`` of a sweep, or None."""
        with self._session() as s:
            return find_trial(s, sweep_id, key)

    def mark_running(self, trial_id: int, mlflow_run_id: str | None) -> None:
        """Mark a trial running: attempts += 1, started_at = now, error/finish cleared."""
        self._set_trial_state(
            trial_id,
            TrialState.RUNNING,
            mlflow_run_id=mlflow_run_id,
            attempts=TrialRow.attempts + 1,
            started_at=now_utc(),
            finished_at=None,
            wall_s=None,
            error=None,
        )

    @reconnecting
    def set_trial_mlflow_run(self, trial_id: int, run_id: str) -> None:
        """Record a new MLflow child run of a trial, leaving its state (a run recreated after
        MLflow lost the first one).

        Raises:
            StoreError: no such trial, or the write failed.
        """
        with self._session() as s:
            set_mlflow_run(s, trial_id, run_id, url_text=self._url_text)

    def mark_completed(self, trial_id: int, wall_s: float) -> None:
        """Mark a trial completed after ``wall_s`` seconds of wall-clock time."""
        self._set_trial_state(
            trial_id, TrialState.COMPLETED, finished_at=now_utc(), wall_s=float(wall_s), error=None
        )

    def mark_failed(self, trial_id: int, error: str, wall_s: float | None) -> None:
        """Mark a trial failed with its error text (e.g. the traceback) after ``wall_s`` s."""
        self._set_trial_state(
            trial_id,
            TrialState.FAILED,
            finished_at=now_utc(),
            wall_s=None if wall_s is None else float(wall_s),
            error=error,
        )

    def mark_cancelled(self, trial_id: int) -> None:
        """Mark a trial cancelled (by the user or because the sweep was stopped)."""
        self._set_trial_state(trial_id, TrialState.CANCELLED, finished_at=now_utc())

    @reconnecting
    def _set_trial_state(self, trial_id: int, state: TrialState, **values: Any) -> None:
        with self._session() as s:
            set_trial_state(s, trial_id, state, url_text=self._url_text, **values)

    @reconnecting
    def reset_trials(self, sweep_id: int, states: set[str]) -> int:
        """Turn the sweep's trials in ``states`` (e.g. failed, cancelled) back into pending;
        return how many. Their attempts, MLflow run and metrics are kept."""
        wanted = sorted(TrialState(x).value for x in states)
        with self._session() as s:
            return reset_to_pending(s, sweep_id, wanted)

    @reconnecting
    def reset_stale_running(self, sweep_id: int) -> int:
        """Turn the sweep's ``running`` trials back into ``pending``; return how many (a
        resubmit after a crashed driver)."""
        with self._session() as s:
            return reset_to_pending(s, sweep_id, [TrialState.RUNNING.value])

    # -- metrics (orchestrator.store.metrics) -------------------------------------------------

    def log_metrics(self, trial_id: int, metrics: Mapping[str, float], step: int = 0) -> None:
        """Write metric values of a trial at ``step``; re-logging a (name, step) replaces it.

        NaN and +-inf are kept (see :mod:`orchestrator.store.metrics`).

        Raises:
            ValueError: a metric name is longer than 250 characters or a value is not a number.
            StoreError: no such trial, or the write failed.
        """
        rows = [metric_row(trial_id, name, value, step) for name, value in metrics.items()]
        self._upsert_metrics(trial_id, rows)

    def log_metric_series(self, trial_id: int, name: str, values: Sequence[float]) -> None:
        """Write ``values`` as metric ``name`` at steps 0..n-1 (e.g. a loss curve), replacing."""
        rows = [metric_row(trial_id, name, v, step) for step, v in enumerate(values)]
        self._upsert_metrics(trial_id, rows)

    @reconnecting
    def _upsert_metrics(self, trial_id: int, rows: list[dict[str, Any]]) -> None:
        with self._session() as s:
            metrics.upsert(s, self._dialect, trial_id, rows)

    @reconnecting
    def metric_series(self, trial_id: int, name: str) -> list[float]:
        """Return metric ``name`` of a trial ordered by step (all steps)."""
        with self._session() as s:
            return metrics.series(s, trial_id, name)

    @reconnecting
    def trial_metrics(self, trial_id: int) -> dict[str, list[float]]:
        """Every metric of a trial: name -> values by step (one value: a scalar metric)."""
        with self._session() as s:
            return metrics.trial_metrics(s, trial_id)

    @reconnecting
    def series_names(self, sweep_id: int) -> set[str]:
        """Names of the metrics logged as series (at a step > 0) by any trial of the sweep."""
        with self._session() as s:
            return metrics.series_names(s, sweep_id)

    @reconnecting
    def sweep_series(
        self, sweep_id: int, names: Sequence[str]
    ) -> dict[str, dict[str, list[float]]]:
        """Series ``names`` of every trial of a sweep in one query: trial key -> name -> values
        ordered by step. Trials without any of them are absent."""
        with self._session() as s:
            return metrics.sweep_series(s, sweep_id, names)

    @reconnecting
    def metrics_frame(self, sweep_id: int) -> pd.DataFrame:
        """One row per trial of the sweep (any state), wide: the analysis input table.

        Columns: ``trial_key``, ``state``, every override by dotted name (``pretrain.tokens``,
        ``seed``) and every metric logged at step 0 (NaN where a trial lacks it). A metric whose
        name equals an override's is named ``metric.<name>``.
        """
        with self._session() as s:
            return metrics.sweep_frame(s, sweep_id)

    @reconnecting
    def completed_trials(self, workload: str) -> list[CompletedTrial]:
        """Every completed trial of every sweep of ``workload`` with its step-0 metrics, oldest
        first (:mod:`orchestrator.store.history`: what trial costs are calibrated on)."""
        with self._session() as s:
            return history.completed_trials(s, workload)

    # -- fits (orchestrator.store.fits) -------------------------------------------------------

    @reconnecting
    def save_fit(self, sweep_id: int, fit: Mapping[str, Any]) -> None:
        """Store one law fit, replacing the sweep's previous fit of the same ``law``.

        ``fit`` keys: ``law``, ``x_name``, ``y_name``, ``form`` (str); ``a``, ``b``, ``a_lo``,
        ``a_hi``, ``b_lo``, ``b_hi``, ``r2`` (float, NaN allowed); ``n`` (int, points fitted);
        optional ``details`` (JSON-able dict: residuals, baseline, ...).

        Raises:
            ValueError: a required key is missing.
            StoreError: no such sweep, or the write failed.
        """
        values = fits.fit_values(sweep_id, fit)
        with self._session() as s:
            fits.save(s, self._dialect, values)

    @reconnecting
    def fits(self, sweep_id: int) -> list[dict[str, Any]]:
        """Return the sweep's fits ordered by law: the ``save_fit`` keys plus ``created_at``
        (UTC); NaN coefficients read back as NaN."""
        with self._session() as s:
            return fits.sweep_fits(s, sweep_id)

    # -- adaptive designs (orchestrator.store.decisions) -----------------------------------------

    @reconnecting
    def add_decisions(self, sweep_id: int, decisions: Sequence[Decision]) -> int:
        """Record design decisions of a sweep; one already recorded (same step and rank) is
        kept as it is, so a resumed design never duplicates one. Returns how many were new.

        Raises:
            StoreError: no such sweep, or the write failed.
        """
        with self._session() as s:
            return design.insert(s, self._dialect, sweep_id, decisions)

    @reconnecting
    def decisions(self, sweep_id: int) -> list[Decision]:
        """The sweep's design decisions by step, then rank (none for a grid or a search)."""
        with self._session() as s:
            return design.sweep_decisions(s, sweep_id)
