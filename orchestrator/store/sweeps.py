"""Sweep rows: creating or updating a sweep by name, reading sweeps, deleting one with all it
owns.

The functions take a :class:`~sqlalchemy.orm.Session` and run inside one unit of work of
:class:`~orchestrator.store.results.ResultsStore`. The lease columns (``driver``,
``heartbeat_at``, ``cancel_requested_at``) are written by :mod:`orchestrator.store.lease`.
"""

from __future__ import annotations

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from orchestrator.errors import StoreError
from orchestrator.store.engine import dialect_insert
from orchestrator.store.rows import (
    DesignRow,
    FitRow,
    MetricRow,
    SweepInfo,
    SweepRow,
    TrialRow,
    now_utc,
    sweep_info,
)

__all__ = ["all_sweeps", "delete_sweep", "find_sweep", "set_mlflow_run", "upsert_sweep"]


def upsert_sweep(
    s: Session, dialect: str, *, name: str, workload: str, spec_yaml: str, spec_path: str
) -> int:
    """Create the sweep ``name`` or update its spec (and ``updated_at``); return its id."""
    now = now_utc()
    stmt = dialect_insert(dialect, SweepRow).values(
        name=name,
        workload=workload,
        spec_yaml=spec_yaml,
        spec_path=spec_path,
        created_at=now,
        updated_at=now,
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=[SweepRow.name],
        set_={
            "workload": stmt.excluded.workload,
            "spec_yaml": stmt.excluded.spec_yaml,
            "spec_path": stmt.excluded.spec_path,
            "updated_at": stmt.excluded.updated_at,
        },
    ).returning(SweepRow.id)
    return int(s.execute(stmt).scalar_one())


def set_mlflow_run(s: Session, sweep_id: int, run_id: str | None, *, url_text: str) -> None:
    """Record the MLflow parent run id of a sweep.

    Raises:
        StoreError: no such sweep (``url_text`` names the database).
    """
    result = s.execute(
        update(SweepRow)
        .where(SweepRow.id == sweep_id)
        .values(mlflow_run_id=run_id, updated_at=now_utc())
    )
    if result.rowcount == 0:  # type: ignore[attr-defined]
        raise StoreError(f"no sweep with id {sweep_id} in {url_text}")


def find_sweep(s: Session, name: str) -> SweepInfo | None:
    """The sweep called ``name``, or None."""
    row = s.scalars(select(SweepRow).where(SweepRow.name == name)).one_or_none()
    return None if row is None else sweep_info(row)


def all_sweeps(s: Session) -> list[SweepInfo]:
    """All sweeps, oldest first."""
    rows = s.scalars(select(SweepRow).order_by(SweepRow.created_at, SweepRow.id)).all()
    return [sweep_info(r) for r in rows]


def delete_sweep(s: Session, sweep_id: int) -> None:
    """Delete a sweep with its trials, metrics, fits and design decisions."""
    trial_ids = select(TrialRow.id).where(TrialRow.sweep_id == sweep_id)
    s.execute(delete(MetricRow).where(MetricRow.trial_id.in_(trial_ids)))
    s.execute(delete(TrialRow).where(TrialRow.sweep_id == sweep_id))
    s.execute(delete(FitRow).where(FitRow.sweep_id == sweep_id))
    s.execute(delete(DesignRow).where(DesignRow.sweep_id == sweep_id))
    s.execute(delete(SweepRow).where(SweepRow.id == sweep_id))
