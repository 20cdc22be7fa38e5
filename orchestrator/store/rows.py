"""The stored shape of the results: ORM tables, trial states, and the plain data callers get.

The ORM models must match the newest Alembic migration (``orchestrator/store/migrations``) and
stay inside the package: callers get :class:`SweepInfo`, :class:`TrialInfo` and plain dicts.
Timestamps are written as UTC and read through :func:`as_utc` (SQLite drops the offset). Every
writer of a sweep's trials, metrics and fits calls :func:`touch_sweep` or
:func:`touch_sweep_of_trial`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    ColumnElement,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    select,
    update,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

__all__ = [
    "METRIC_NAME_LEN",
    "TRIAL_KEY_LEN",
    "DesignRow",
    "FitRow",
    "MetricRow",
    "SweepInfo",
    "SweepRow",
    "TrialInfo",
    "TrialRow",
    "TrialState",
    "as_utc",
    "now_utc",
    "sweep_info",
    "touch_sweep",
    "touch_sweep_of_trial",
    "trial_info",
]

TRIAL_KEY_LEN = 64
"""longest trial key, characters"""
METRIC_NAME_LEN = 250
"""longest metric name, characters"""


class TrialState(StrEnum):
    """The explicit state every trial is in; written to SQL on each transition."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


def now_utc() -> datetime:
    """The current time, timezone-aware UTC (what every timestamp column is written with)."""
    return datetime.now(UTC)


def as_utc(value: datetime | None) -> datetime | None:
    """``value`` with UTC attached when the database dropped the offset (SQLite); None stays."""
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)  # SQLite drops the offset; we always write UTC
    return value


# ---------------------------------------------------------------------------------------------
# ORM models (private to the package)
# ---------------------------------------------------------------------------------------------


class _Base(DeclarativeBase):
    pass


class SweepRow(_Base):
    """One sweep: a named spec file and its MLflow parent run.

    ``updated_at`` moves whenever the sweep or any of its trials, metrics or fits change (not on
    lease heartbeats).
    """

    __tablename__ = "ss_sweeps"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    workload: Mapped[str] = mapped_column(String(64))
    spec_yaml: Mapped[str] = mapped_column(Text)
    spec_path: Mapped[str] = mapped_column(String(1024))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now_utc)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now_utc)
    mlflow_run_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    driver: Mapped[str | None] = mapped_column(String(255), nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    cancel_requested_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )


class TrialRow(_Base):
    """One grid point of a sweep (including its seed), keyed by the hash of its config."""

    __tablename__ = "ss_trials"
    __table_args__ = (UniqueConstraint("sweep_id", "trial_key", name="uq_ss_trials_sweep_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sweep_id: Mapped[int] = mapped_column(
        ForeignKey("ss_sweeps.id", ondelete="CASCADE"), index=True
    )
    trial_key: Mapped[str] = mapped_column(String(TRIAL_KEY_LEN))
    config_json: Mapped[str] = mapped_column(Text)
    overrides_json: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(16), default=TrialState.PENDING.value, index=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    mlflow_run_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    wall_s: Mapped[float | None] = mapped_column(Float, nullable=True)


class MetricRow(_Base):
    """One metric value of a trial at one step; ``nonfinite`` holds nan/inf/-inf as text."""

    __tablename__ = "ss_metrics"
    __table_args__ = (
        UniqueConstraint("trial_id", "name", "step", name="uq_ss_metrics_trial_name_step"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(
        ForeignKey("ss_trials.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(METRIC_NAME_LEN))
    value: Mapped[float | None] = mapped_column(Float, nullable=True)
    nonfinite: Mapped[str | None] = mapped_column(String(8), nullable=True)
    step: Mapped[int] = mapped_column(Integer, default=0)


class FitRow(_Base):
    """One fitted law ``y = form(x; a, b)`` of a sweep with 95% CIs; one row per (sweep, law)."""

    __tablename__ = "ss_fits"
    __table_args__ = (UniqueConstraint("sweep_id", "law", name="uq_ss_fits_sweep_law"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sweep_id: Mapped[int] = mapped_column(
        ForeignKey("ss_sweeps.id", ondelete="CASCADE"), index=True
    )
    law: Mapped[str] = mapped_column(String(64))
    x_name: Mapped[str] = mapped_column(String(250))
    y_name: Mapped[str] = mapped_column(String(250))
    form: Mapped[str] = mapped_column(String(250))
    a: Mapped[float | None] = mapped_column(Float, nullable=True)
    b: Mapped[float | None] = mapped_column(Float, nullable=True)
    a_lo: Mapped[float | None] = mapped_column(Float, nullable=True)
    a_hi: Mapped[float | None] = mapped_column(Float, nullable=True)
    b_lo: Mapped[float | None] = mapped_column(Float, nullable=True)
    b_hi: Mapped[float | None] = mapped_column(Float, nullable=True)
    r2: Mapped[float | None] = mapped_column(Float, nullable=True)
    n: Mapped[int] = mapped_column(Integer)
    details_json: Mapped[str] = mapped_column(Text, default="{}")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now_utc)


class DesignRow(_Base):
    """One decision of a sweep's adaptive design (``design:``): a pick (a trial to run, with why)
    or the stop; one row per (sweep, step, rank). Seconds are trial seconds (GPU-seconds for
    GPU trials)."""

    __tablename__ = "ss_design_decisions"
    __table_args__ = (UniqueConstraint("sweep_id", "step", "rank", name="uq_ss_design_step_rank"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sweep_id: Mapped[int] = mapped_column(
        ForeignKey("ss_sweeps.id", ondelete="CASCADE"), index=True
    )
    step: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(8))
    value: Mapped[float | None] = mapped_column(Float, nullable=True)
    seed: Mapped[int | None] = mapped_column(Integer, nullable=True)
    trial_key: Mapped[str | None] = mapped_column(String(TRIAL_KEY_LEN), nullable=True)
    predicted_cost_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    cost_basis: Mapped[str | None] = mapped_column(String(250), nullable=True)
    expected_half_width: Mapped[float | None] = mapped_column(Float, nullable=True)
    half_width: Mapped[float | None] = mapped_column(Float, nullable=True)
    spent_s: Mapped[float] = mapped_column(Float)
    committed_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    stop: Mapped[str | None] = mapped_column(String(16), nullable=True)
    reason: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now_utc)


# ---------------------------------------------------------------------------------------------
# Plain-data views returned to callers
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class SweepInfo:
    """A sweep as stored; timestamps are timezone-aware UTC."""

    id: int
    name: str
    workload: str
    spec_yaml: str
    spec_path: str
    created_at: datetime
    updated_at: datetime
    """last change to the sweep, its trials (state, metrics) or fits; lease heartbeats excluded"""
    mlflow_run_id: str | None
    driver: str | None = None
    """``host:pid`` of the driver holding the sweep's lease, if any"""
    heartbeat_at: datetime | None = None
    cancel_requested_at: datetime | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialInfo:
    """A trial as stored; ``wall_s`` is wall-clock seconds of the last attempt, UTC timestamps."""

    id: int
    key: str
    config: dict[str, Any]
    overrides: dict[str, Any]
    state: str
    error: str | None
    attempts: int
    mlflow_run_id: str | None
    started_at: datetime | None
    finished_at: datetime | None
    wall_s: float | None


# ---------------------------------------------------------------------------------------------
# Row <-> plain data
# ---------------------------------------------------------------------------------------------


def sweep_info(row: SweepRow) -> SweepInfo:
    """The plain view of a sweep row, timestamps in UTC."""
    created = as_utc(row.created_at)
    updated = as_utc(row.updated_at)
    assert created is not None and updated is not None
    return SweepInfo(
        id=row.id,
        name=row.name,
        workload=row.workload,
        spec_yaml=row.spec_yaml,
        spec_path=row.spec_path,
        created_at=created,
        updated_at=updated,
        mlflow_run_id=row.mlflow_run_id,
        driver=row.driver,
        heartbeat_at=as_utc(row.heartbeat_at),
        cancel_requested_at=as_utc(row.cancel_requested_at),
    )


def trial_info(row: TrialRow) -> TrialInfo:
    """The plain view of a trial row: config and overrides decoded from JSON, UTC timestamps."""
    return TrialInfo(
        id=row.id,
        key=row.trial_key,
        config=json.loads(row.config_json),
        overrides=json.loads(row.overrides_json),
        state=row.state,
        error=row.error,
        attempts=row.attempts,
        mlflow_run_id=row.mlflow_run_id,
        started_at=as_utc(row.started_at),
        finished_at=as_utc(row.finished_at),
        wall_s=row.wall_s,
    )


# ---------------------------------------------------------------------------------------------
# Keeping SweepRow.updated_at current
# ---------------------------------------------------------------------------------------------


def touch_sweep(s: Session, sweep_id: int, *, when: ColumnElement[bool] | None = None) -> bool:
    """Move the sweep's ``updated_at`` to now, only if ``when`` holds (an SQL condition) when
    given; return whether it moved (False for an unknown id)."""
    stmt = update(SweepRow).where(SweepRow.id == sweep_id)
    if when is not None:
        stmt = stmt.where(when)
    result = s.execute(
        stmt.values(updated_at=now_utc()).execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def touch_sweep_of_trial(s: Session, trial_id: int) -> None:
    """Move ``updated_at`` of the sweep that trial ``trial_id`` belongs to (nothing happens for
    an unknown id).

    Writers of existing trials call this (or :func:`touch_sweep`) before they change them:
    on PostgreSQL the sweep row is locked before its trial rows, as ``request_cancel`` does.
    """
    owner = select(TrialRow.sweep_id).where(TrialRow.id == trial_id).scalar_subquery()
    s.execute(
        update(SweepRow)
        .where(SweepRow.id == owner)
        .values(updated_at=now_utc())
        .execution_options(synchronize_session=False)
    )
