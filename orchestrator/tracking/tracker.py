"""MLflow tracking sink: one parent run per sweep, one child run per trial.

Uses :class:`mlflow.tracking.MlflowClient` with explicit run ids only (never the fluent
active-run API). A :class:`Tracker` pickles as ``(tracking_uri, experiment, experiment id)``, so
it can be shipped to a Ray task. Reads no environment variables (the CLI sets
``MLFLOW_DISABLE_TELEMETRY``).

Tags written: ``specscale.kind`` (sweep | trial), ``specscale.sweep``, ``specscale.trial_key``,
``specscale.state`` (a :class:`TrialState` value), ``specscale.error`` and
``specscale.nonfinite``.

Upstream limits worked around (docs/operations.md, "Tracking edge cases"): keys and long param
values through :mod:`orchestrator.tracking.values`; +-inf metrics as a tag (mlflow/mlflow#22826);
``MLFLOW_RUN_ID`` ignored (mlflow/mlflow#15713, #1348).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from filelock import FileLock
from mlflow.entities import Metric, Param, RunStatus, RunTag
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import (
    RESOURCE_ALREADY_EXISTS,
    RESOURCE_DOES_NOT_EXIST,
    ErrorCode,
)
from mlflow.tracking import MlflowClient
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from orchestrator._secrets import redact
from orchestrator.errors import TrackingError
from orchestrator.store.results import TrialState, mask_url
from orchestrator.tracking.values import (
    MAX_ERROR_TAG_LEN,
    MAX_TAG_VALUE_LEN,
    METRICS_PER_BATCH,
    SWEEP_RUN_NAME_LEN,
    batches,
    cap,
    flatten,
    mlflow_key,
    run_name,
)

__all__ = ["Tracker", "default_tracking_uri"]

log = logging.getLogger(__name__)

_NONFINITE_PER_METRIC = 20
"""non-finite points listed per metric in the ``specscale.nonfinite`` tag"""

TAG_KIND = "specscale.kind"
TAG_SWEEP = "specscale.sweep"
TAG_TRIAL_KEY = "specscale.trial_key"
TAG_STATE = "specscale.state"
TAG_ERROR = "specscale.error"
TAG_NONFINITE = "specscale.nonfinite"
TAG_PARENT = "mlflow.parentRunId"
TAG_RECORD = "specscale.results_db"
"""a sweep's parent run: a hash of its results DB's (masked) URL, to find it by"""

_TERMINAL_STATUS = {
    TrialState.COMPLETED: RunStatus.to_string(RunStatus.FINISHED),
    TrialState.FAILED: RunStatus.to_string(RunStatus.FAILED),
    TrialState.CANCELLED: RunStatus.to_string(RunStatus.KILLED),
}


def default_tracking_uri(run_root: Path) -> str:
    """Return the embedded MLflow backend of a run root: ``sqlite:///<abs run_root>/mlflow.db``
    (created by MLflow on first use)."""
    return f"sqlite:///{Path(run_root).expanduser().resolve() / 'mlflow.db'}"


def _artifact_location(tracking_uri: str) -> str | None:
    """``<dir of the sqlite db>/mlartifacts`` for sqlite backends; None lets MLflow decide."""
    if not tracking_uri.startswith("sqlite:"):
        return None
    database = make_url(tracking_uri).database
    if not database or database == ":memory:":
        return None
    return (Path(database).expanduser().resolve().parent / "mlartifacts").as_uri()


def _error_code(exc: MlflowException) -> str:
    return str(exc.error_code)


def _is(exc: MlflowException, code: int) -> bool:
    return _error_code(exc) == ErrorCode.Name(code)


class Tracker:
    """MLflow sink for sweeps (parent runs) and trials (child runs) via ``MlflowClient``.

    Args:
        tracking_uri: e.g. ``sqlite:////abs/run_root/mlflow.db`` (see
            :func:`default_tracking_uri`) or ``http://host:5000``.
        experiment: MLflow experiment name, created if missing (for SQLite backends its
            artifacts go to ``mlartifacts/`` next to the database file).

    Raises:
        TrackingError: the tracking backend cannot be reached or refused the experiment.
    """

    def __init__(
        self, tracking_uri: str, experiment: str = "specscale", *, _experiment_id: str | None = None
    ) -> None:
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.masked_uri = mask_url(tracking_uri)
        """the tracking URI with its password (if any) replaced by ``***``, for messages"""
        with self._first_start_lock():
            self._client = self._make_client()
            self.experiment_id = _experiment_id or self._get_or_create_experiment()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as (uri, experiment, experiment id): a worker rebuilds its own client."""
        return (_rebuild_tracker, (self.tracking_uri, self.experiment, self.experiment_id))

    def __repr__(self) -> str:
        return f"Tracker({self.masked_uri!r}, experiment={self.experiment!r})"

    def close(self) -> None:
        """Nothing to release (each call is a request); present for the metric-sink interface."""

    # -- internals ---------------------------------------------------------------------------

    def _first_start_lock(self) -> AbstractContextManager[object]:
        """A file lock next to a SQLite database, held while MLflow builds its schema (see
        docs/operations.md); a null context for other backends."""
        if not self.tracking_uri.startswith("sqlite:"):
            return nullcontext()
        database = make_url(self.tracking_uri).database
        if not database or database == ":memory:":
            return nullcontext()
        path = Path(database).expanduser().resolve()
        with self._errors("create the store's folder"):
            path.parent.mkdir(parents=True, exist_ok=True)
        return FileLock(f"{path}.init.lock", timeout=300)

    def _make_client(self) -> MlflowClient:
        with self._errors("connect"):
            if self.tracking_uri.startswith("sqlite:"):
                database = make_url(self.tracking_uri).database
                if database and database != ":memory:":
                    Path(database).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
            return MlflowClient(tracking_uri=self.tracking_uri)

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """Turn backend failures into one-line TrackingErrors naming the (masked) URI; the
        message is redacted, and an original exception carrying the password is not chained."""
        try:
            yield
        except (MlflowException, SQLAlchemyError, OSError) as exc:
            raw = str(exc)
            clean = redact(raw, self.tracking_uri)
            message = (clean.strip().splitlines() or [type(exc).__name__])[0]
            if "Connection refused" in message or "Max retries exceeded" in message:
                message = "no server answers there (connection refused)"
            error = TrackingError(
                f"MLflow at {self.masked_uri}: {action} failed: {message[:300]}. Fix: start the "
                "tracking server, or correct --tracking-uri (e.g. sqlite:///runs/mlflow.db or "
                "http://host:5000)"
            )
            if clean != raw:
                raise error from None
            raise error from exc

    def _get_or_create_experiment(self) -> str:
        with self._errors(f"get or create experiment {self.experiment!r}"):
            found = self._client.get_experiment_by_name(self.experiment)
            if found is not None:
                if found.lifecycle_stage == "deleted":
                    self._client.restore_experiment(found.experiment_id)
                return str(found.experiment_id)
            try:
                return str(
                    self._client.create_experiment(
                        self.experiment, artifact_location=_artifact_location(self.tracking_uri)
                    )
                )
            except MlflowException as exc:  # another process created it first
                if not _is(exc, RESOURCE_ALREADY_EXISTS):
                    raise
                again = self._client.get_experiment_by_name(self.experiment)
                if again is None:
                    raise
                return str(again.experiment_id)

    def _live_run(self, run_id: str | None) -> Any | None:
        """The run ``run_id`` if it exists and is not deleted, else None."""
        if not run_id:
            return None
        try:
            run = self._client.get_run(run_id)
        except MlflowException as exc:
            if _is(exc, RESOURCE_DOES_NOT_EXIST) or "not found" in str(exc).lower():
                return None
            raise
        return None if run.info.lifecycle_stage == "deleted" else run

    def _child_of(self, parent_run_id: str, trial_key: str) -> Any | None:
        """The live child run of ``parent_run_id`` tagged with ``trial_key``, if any."""
        runs = self._client.search_runs(
            [self.experiment_id],
            filter_string=(  # trial keys are hex digests: nothing to quote
                f"tags.`{TAG_PARENT}` = '{parent_run_id}' "
                f"and tags.`{TAG_TRIAL_KEY}` = '{trial_key}'"
            ),
            max_results=1,
            order_by=["attributes.start_time ASC"],
        )
        return runs[0] if runs else None

    def _log_params(
        self, run_id: str, params: Mapping[str, str], existing: Mapping[str, str]
    ) -> None:
        todo = []
        for key, value in params.items():
            if key in existing:
                if existing[key] != value:
                    log.warning(
                        "run %s: param %r already set to %r; keeping it (new value %r)",
                        run_id,
                        key,
                        existing[key][:80],
                        value[:80],
                    )
                continue
            todo.append(Param(key, value))
        for batch in batches(todo):
            self._client.log_batch(run_id, params=batch)

    def _resume(self, run: Any, tags: Mapping[str, str], params: Mapping[str, str]) -> str:
        run_id = str(run.info.run_id)
        if run.info.status != RunStatus.to_string(RunStatus.RUNNING):
            self._client.update_run(run_id, status=RunStatus.to_string(RunStatus.RUNNING))
        if TAG_ERROR in run.data.tags:
            self._client.delete_tag(run_id, TAG_ERROR)
        self._client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        self._log_params(run_id, params, run.data.params)
        return run_id

    # -- runs --------------------------------------------------------------------------------

    def start_sweep_run(
        self,
        sweep_name: str,
        params: Mapping[str, Any],
        existing_run_id: str | None,
        *,
        record: str | None = None,
    ) -> str:
        """Start (or resume) the sweep's parent run and return its run id.

        The run is ``existing_run_id`` (from the results store) when it is alive, else, with
        ``record`` (the results DB the sweep lives in, e.g. its masked URL), the oldest live
        parent run of ``sweep_name`` tagged with that DB (the DB names a run in another
        tracking store), else a new run named ``sweep_name``; a resumed run goes back to
        RUNNING. ``params`` are flattened with :func:`flatten`; params already set are kept.

        Raises:
            TrackingError: the backend failed.
        """
        tags = {
            TAG_SWEEP: cap(sweep_name, MAX_TAG_VALUE_LEN),
            TAG_KIND: "sweep",
            TAG_STATE: TrialState.RUNNING.value,
        }
        if record is not None:
            tags[TAG_RECORD] = hashlib.sha256(record.encode()).hexdigest()[:16]
        flat = flatten(params)
        with self._errors(f"start the run of sweep {sweep_name!r}"):
            run = self._live_run(existing_run_id) or self._sweep_run_of(tags)
            if run is not None:
                return self._resume(run, tags, flat)
            created = self._client.create_run(
                self.experiment_id, tags=tags, run_name=cap(sweep_name, SWEEP_RUN_NAME_LEN)
            )
            run_id = str(created.info.run_id)
            self._log_params(run_id, flat, {})
            return run_id

    def _sweep_run_of(self, tags: Mapping[str, str]) -> Any | None:
        """The oldest live parent run carrying ``tags``' sweep name and results DB, if any."""
        if TAG_RECORD not in tags:
            return None
        sweep = tags[TAG_SWEEP]  # a sweep name is letters, digits, . _ -: nothing to quote
        runs = self._client.search_runs(
            [self.experiment_id],
            filter_string=(
                f"tags.`{TAG_KIND}` = 'sweep' and tags.`{TAG_RECORD}` = '{tags[TAG_RECORD]}' "
                f"and tags.`{TAG_SWEEP}` = '{sweep}'"
            ),
            max_results=1,
            order_by=["attributes.start_time ASC"],
        )
        return runs[0] if runs else None

    def start_trial_run(
        self,
        parent_run_id: str,
        sweep_name: str,
        trial_key: str,
        params: Mapping[str, Any],
        existing_run_id: str | None,
        *,
        overrides: Mapping[str, Any] | None = None,
    ) -> str:
        """Start (or resume) a trial's child run under ``parent_run_id``; return its run id.

        The run is ``existing_run_id`` if alive (moved under ``parent_run_id``), else the live
        child of ``parent_run_id`` tagged ``trial_key``, else a new one named by the first 8
        characters of ``trial_key`` and the ``overrides`` in short form. Tags: the parent,
        sweep, trial key, ``specscale.kind=trial``, ``specscale.state=running``. ``params`` are
        logged flattened; on a resumed run params already set are kept, a ``specscale.error``
        tag is removed and the status goes back to RUNNING.

        Raises:
            TrackingError: the backend failed.
        """
        tags = {
            TAG_PARENT: parent_run_id,
            TAG_SWEEP: cap(sweep_name, MAX_TAG_VALUE_LEN),
            TAG_TRIAL_KEY: trial_key,
            TAG_KIND: "trial",
            TAG_STATE: TrialState.RUNNING.value,
        }
        flat = flatten(params)
        with self._errors(f"start the run of trial {trial_key!r}"):
            run = self._live_run(existing_run_id) or self._child_of(parent_run_id, trial_key)
            if run is not None:
                return self._resume(run, tags, flat)  # the parent tag set again moves it
            created = self._client.create_run(
                self.experiment_id, tags=tags, run_name=run_name(trial_key, overrides)
            )
            run_id = str(created.info.run_id)
            self._log_params(run_id, flat, {})
            return run_id

    def log_metrics(
        self,
        run_id: str,
        metrics: Mapping[str, float],
        step: int = 0,
        *,
        timestamp_ms: int | None = None,
    ) -> None:
        """Log metric values at ``step`` under :func:`mlflow_key` names, stamped
        ``timestamp_ms`` (ms since the epoch; default now).

        NaN is logged as NaN; +inf and -inf are not logged but listed in the tag
        ``specscale.nonfinite`` (``{"name": "inf@<step> -inf@<step> ... +<more>"}``).

        Raises:
            TrackingError: the backend failed.
        """
        now_ms = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        items = [Metric(mlflow_key(k), float(v), now_ms, int(step)) for k, v in metrics.items()]
        self._log_metric_items(run_id, items)

    def update_metrics(self, run_id: str, metrics: Mapping[str, float]) -> None:
        """:meth:`log_metrics` at step 0 of only the values that differ from the run's latest
        (NaN equals NaN): a refit that changed nothing adds nothing to the run's history.

        Raises:
            TrackingError: the backend failed.
        """
        with self._errors(f"read run {run_id}"):
            latest = self._client.get_run(run_id).data.metrics

        def same(old: float | None, new: float) -> bool:
            return old is not None and (old == new or (math.isnan(old) and math.isnan(new)))

        changed = {k: v for k, v in metrics.items() if not same(latest.get(mlflow_key(k)), v)}
        if changed:
            self.log_metrics(run_id, changed)

    def log_series(
        self,
        run_id: str,
        name: str,
        values: Sequence[float],
        *,
        timestamp_ms: int | None = None,
    ) -> None:
        """Log ``values`` as metric ``name`` at steps 0..n-1 (e.g. a loss curve); stamp and
        infinities as in :meth:`log_metrics`.

        Raises:
            TrackingError: the backend failed.
        """
        now_ms = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        key = mlflow_key(name)
        self._log_metric_items(
            run_id, [Metric(key, float(v), now_ms, i) for i, v in enumerate(values)]
        )

    def _log_metric_items(self, run_id: str, items: list[Metric]) -> None:
        finite = [m for m in items if not math.isinf(m.value)]
        infinite = [m for m in items if math.isinf(m.value)]
        with self._errors(f"log metrics to run {run_id}"):
            for start in range(0, len(finite), METRICS_PER_BATCH):
                self._client.log_batch(run_id, metrics=finite[start : start + METRICS_PER_BATCH])
            if infinite:
                self._note_nonfinite(run_id, infinite)

    def _note_nonfinite(self, run_id: str, items: list[Metric]) -> None:
        """Merge ``items`` (infinite values) into the run's ``specscale.nonfinite`` tag."""
        known = self._client.get_run(run_id).data.tags.get(TAG_NONFINITE)
        try:
            notes: dict[str, str] = json.loads(known) if known else {}
        except ValueError:
            notes = {}
        points: dict[str, list[str]] = {}
        for m in items:
            points.setdefault(m.key, []).append(f"{'inf' if m.value > 0 else '-inf'}@{m.step}")
        for key, new in points.items():
            old = notes.get(key, "").split()
            more = sum(int(p[1:]) for p in old if p.startswith("+") and p[1:].isdigit())
            kept = [p for p in old if not p.startswith("+")]
            merged = kept + [p for p in new if p not in kept]  # logged again: nothing new
            shown = merged[:_NONFINITE_PER_METRIC]
            more += len(merged) - len(shown)
            notes[key] = " ".join(shown + ([f"+{more}"] if more else []))
        text = json.dumps(notes, sort_keys=True, ensure_ascii=False)
        while len(text) > MAX_TAG_VALUE_LEN and notes:
            notes.pop(sorted(notes)[-1])
            text = json.dumps(notes, sort_keys=True, ensure_ascii=False)
        self._client.set_tag(run_id, TAG_NONFINITE, text)

    def log_artifact(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        """Upload a file (or a directory's contents, under its name) to the run's artifacts.

        Raises:
            TrackingError: ``path`` does not exist or the upload failed.
        """
        local = Path(path)
        if not local.exists():
            raise TrackingError(f"artifact {local} does not exist (run {run_id})")
        with self._errors(f"upload {local.name} to run {run_id}"):
            if local.is_dir():
                self._client.log_artifacts(run_id, str(local), artifact_path or local.name)
            else:
                self._client.log_artifact(run_id, str(local), artifact_path)

    def set_state(self, run_id: str, state: str, error: str | None = None) -> None:
        """Set tag ``specscale.state``; completed/failed/cancelled end the run as FINISHED,
        FAILED, KILLED. ``error`` (first 5000 characters) goes to tag ``specscale.error``.

        Raises:
            ValueError: ``state`` is not a trial state.
            TrackingError: the backend failed.
        """
        trial_state = TrialState(state)
        tags = [RunTag(TAG_STATE, trial_state.value)]
        if error is not None:
            tags.append(RunTag(TAG_ERROR, cap(error, MAX_ERROR_TAG_LEN)))
        with self._errors(f"set state {trial_state.value} on run {run_id}"):
            self._client.log_batch(run_id, tags=tags)
            status = _TERMINAL_STATUS.get(trial_state)
            if status is not None:
                self._client.set_terminated(run_id, status=status)
            elif trial_state is TrialState.RUNNING:
                self._client.update_run(run_id, status=RunStatus.to_string(RunStatus.RUNNING))

    def set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        """Set tags on a run (keys through :func:`mlflow_key`, values cut to 8000 characters),
        e.g. ``specscale.design.stop`` on a sweep's parent run.

        Raises:
            TrackingError: the backend failed.
        """
        items = [RunTag(mlflow_key(k), cap(str(v), MAX_TAG_VALUE_LEN)) for k, v in tags.items()]
        with self._errors(f"set tags on run {run_id}"):
            self._client.log_batch(run_id, tags=items)

    def runs_tagged(self, key: str, value: str) -> list[str]:
        """The ids of this experiment's live runs whose tag ``key`` is ``value`` (e.g. the
        plans of one name, tag ``specscale.plan``).

        Raises:
            TrackingError: the backend failed.
        """
        quoted = value.replace("'", "\\'")
        with self._errors(f"find runs tagged {key}={value!r}"):
            runs = self._client.search_runs(
                [self.experiment_id], filter_string=f"tags.`{mlflow_key(key)}` = '{quoted}'"
            )
        return [r.info.run_id for r in runs]

    def delete_runs(self, run_ids: Sequence[str]) -> None:
        """Soft-delete runs (MLflow's trash: ``mlflow runs restore --run-id`` brings one back).

        Raises:
            TrackingError: the backend failed.
        """
        with self._errors(f"delete runs {', '.join(run_ids)}"):
            for run_id in run_ids:
                self._client.delete_run(run_id)

    def child_runs(self, parent_run_id: str) -> list[dict[str, Any]]:
        """Return the live child runs of a parent, oldest first.

        Each item: ``run_id``, ``run_name``, ``status`` (MLflow status string), ``tags``,
        ``params`` and ``metrics`` (latest value per key) as dicts.

        Raises:
            TrackingError: the backend failed.
        """
        out: list[dict[str, Any]] = []
        token: str | None = None
        with self._errors(f"list child runs of {parent_run_id}"):
            while True:
                page = self._client.search_runs(
                    [self.experiment_id],
                    filter_string=f"tags.`{TAG_PARENT}` = '{parent_run_id}'",
                    max_results=1000,
                    order_by=["attributes.start_time ASC"],
                    page_token=token,
                )
                for run in page:
                    out.append(
                        {
                            "run_id": run.info.run_id,
                            "run_name": run.info.run_name,
                            "status": run.info.status,
                            "tags": dict(run.data.tags),
                            "params": dict(run.data.params),
                            "metrics": dict(run.data.metrics),
                        }
                    )
                token = page.token
                if not token:
                    return out


def _rebuild_tracker(tracking_uri: str, experiment: str, experiment_id: str) -> Tracker:
    return Tracker(tracking_uri, experiment, _experiment_id=experiment_id)
