"""The results store: sweeps, trials, metrics and law fits in SQL (SQLite or PostgreSQL).

The store is the source of truth for trial state: a resubmitted sweep skips completed trial keys.
One SQLAlchemy 2.x module, ``select()`` style, one session scope that commits, rolls back and
re-raises database errors as :class:`~orchestrator.errors.StoreError`. Every public method takes
and returns plain data (ints, strings, dicts, frozen dataclasses, a pandas frame); no ORM object
leaves this module.

The schema is built and upgraded by Alembic migrations (:mod:`orchestrator.store.migrate`) when a
store is opened; the ORM models below must match the newest migration (a test compares them).
SQLite transactions start with ``BEGIN IMMEDIATE`` so concurrent writers queue on the busy
timeout instead of failing with "database is locked" when a read turns into a write.

Non-finite metric values: SQLite stores NaN as NULL, so a metric row keeps finite values in
``value`` and non-finite ones as text (``"nan"``, ``"inf"``, ``"-inf"``) in ``nonfinite``, with
``value`` NULL; both dialects then behave alike. Fit coefficients that are NaN are stored as NULL
and read back as NaN.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import pandas as pd
from sqlalchemy import (
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    delete,
    event,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from orchestrator.errors import StoreError
from orchestrator.store import migrate

__all__ = [
    "ResultsStore",
    "SweepInfo",
    "TrialInfo",
    "TrialState",
    "driver_id",
    "mask_url",
    "normalize_db_url",
]

log = logging.getLogger(__name__)

_URL_EXAMPLE = "sqlite:///runs/results.db or postgresql://user@host:5432/db"
_SCHEMA_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_CHUNK = 500  # rows per multi-row INSERT (keeps SQLite under its bound-parameter limit)
_TRIAL_KEY_LEN = 64
_METRIC_NAME_LEN = 250
_FIT_FLOATS = ("a", "b", "a_lo", "a_hi", "b_lo", "b_hi", "r2")
_FIT_STRINGS = ("law", "x_name", "y_name", "form")


class TrialState(StrEnum):
    """The explicit state every trial is in; written to SQL on each transition."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


def _now() -> datetime:
    return datetime.now(UTC)


# ---------------------------------------------------------------------------------------------
# ORM models (private to this module)
# ---------------------------------------------------------------------------------------------


class _Base(DeclarativeBase):
    pass


class SweepRow(_Base):
    """One sweep: a named spec file and its MLflow parent run."""

    __tablename__ = "ss_sweeps"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    workload: Mapped[str] = mapped_column(String(64))
    spec_yaml: Mapped[str] = mapped_column(Text)
    spec_path: Mapped[str] = mapped_column(String(1024))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
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
    trial_key: Mapped[str] = mapped_column(String(_TRIAL_KEY_LEN))
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
    name: Mapped[str] = mapped_column(String(_METRIC_NAME_LEN))
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
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


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
# URL helpers
# ---------------------------------------------------------------------------------------------


def mask_url(url: str) -> str:
    """Return ``url`` with its password replaced by ``***`` (for messages and logs).

    Works on strings that do not parse as URLs too (then a regex masks ``user:password@``).
    """
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return re.sub(r"(//[^/:@]*:)[^@/]*@", r"\1***@", url)


def normalize_db_url(url: str) -> URL:
    """Parse a database URL, mapping ``postgres://`` and ``postgresql://`` to psycopg 3.

    Raises:
        StoreError: ``url`` is not a URL of a supported database (SQLite or PostgreSQL).
    """
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise StoreError(
            f"{mask_url(url)!r} is not a database URL. Example: {_URL_EXAMPLE}"
        ) from exc
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise StoreError(
            f"{mask_url(url)!r} is not a database URL this store supports (SQLite or PostgreSQL). "
            f"Example: {_URL_EXAMPLE}"
        )
    return parsed


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    message = str(orig if orig is not None else exc).strip()
    return message.splitlines()[0] if message else type(exc).__name__


def _canonical_json(value: Mapping[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _utc(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)  # SQLite drops the offset; we always write UTC
    return value


def _flatten_overrides(overrides: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten_overrides(value, prefix=f"{name}."))
        else:
            out[name] = value
    return out


def _encode_metric(value: float) -> tuple[float | None, str | None]:
    value = float(value)
    if math.isfinite(value):
        return value, None
    return None, "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _decode_metric(value: float | None, nonfinite: str | None) -> float:
    if nonfinite is not None:
        return float(nonfinite)
    return math.nan if value is None else float(value)


def _chunks(
    rows: Sequence[dict[str, Any]], size: int = _CHUNK
) -> Iterable[Sequence[dict[str, Any]]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


# ---------------------------------------------------------------------------------------------
# The store
# ---------------------------------------------------------------------------------------------


RECONNECT_S = 120.0
"""how long a store call keeps retrying while the database is unreachable (e.g. a PostgreSQL
restart) before it raises, s"""

_T = TypeVar("_T")
_P = ParamSpec("_P")


def _reconnecting(method: Callable[_P, _T]) -> Callable[_P, _T]:
    """Retry a store call whose connection failed (``OperationalError``: server restarted or
    unreachable, SQLite busy past its timeout) with backoff for up to :data:`RECONNECT_S`.

    Every wrapped call is one transaction that is safe to repeat: inserts skip or update what
    exists, updates set values (``mark_running`` adds 1 to ``attempts``: a retry after a commit
    whose reply was lost can count one attempt twice).
    """

    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        deadline = time.monotonic() + RECONNECT_S
        delay = 0.5
        while True:
            try:
                return method(*args, **kwargs)
            except StoreError as exc:
                if not isinstance(exc.__cause__, OperationalError):
                    raise
                if time.monotonic() + delay > deadline:
                    raise
                log.warning("%s; retrying in %.1f s", exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    return wrapper


class ResultsStore:
    """SQL results store of sweeps, trials, metrics and fits (SQLite or PostgreSQL).

    Args:
        url: a SQLAlchemy database URL, e.g. ``sqlite:///runs/results.db`` or
            ``postgresql://user@host:5432/db`` (plain ``postgresql://`` and ``postgres://`` use
            psycopg 3).
        schema: PostgreSQL only: create this schema if missing and keep all tables in it (via
            the connection's ``search_path``); used to isolate tests and teams.

    Raises:
        StoreError: the URL is not a database URL, or the database is unreachable; the message
            names the URL with its password masked and a fix.
        ValueError: ``schema`` is not a plain identifier or is given for SQLite.
    """

    def __init__(self, url: str, *, schema: str | None = None, create: bool = True) -> None:
        """Open (and migrate) the store at ``url``; with ``create=False`` (read-only commands)
        a database without this project's tables is refused, never created.

        Raises:
            StoreError: the URL is wrong, the server unreachable, or (``create=False``) the
                database has no results tables.
        """
        self._url_text = mask_url(url)
        parsed = normalize_db_url(url)
        self._dialect = parsed.get_backend_name()
        connect_args: dict[str, Any] = {}
        if self._dialect == "sqlite":
            if schema is not None:
                raise ValueError("schema= is only supported for PostgreSQL URLs")
            connect_args["timeout"] = 30.0
        else:
            if "connect_timeout" not in parsed.query:
                connect_args["connect_timeout"] = 10
            if schema is not None:
                if not _SCHEMA_RE.match(schema):
                    raise ValueError(f"schema {schema!r} is not a plain SQL identifier")
                connect_args["options"] = f"-csearch_path={schema}"
        try:
            self._engine: Engine = create_engine(
                parsed, connect_args=connect_args, pool_pre_ping=True
            )
        except (ArgumentError, NoSuchModuleError, ImportError) as exc:
            raise StoreError(
                f"cannot open the results database {self._url_text}: {_first_line(exc)}. "
                f"Example URL: {_URL_EXAMPLE}"
            ) from exc
        if self._dialect == "sqlite":
            event.listen(self._engine, "connect", _sqlite_on_connect)
            event.listen(self._engine, "begin", _sqlite_begin_immediate)
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)
        sqlite_file = (
            Path(parsed.database)
            if self._dialect == "sqlite" and parsed.database not in (None, "", ":memory:")
            else None
        )
        if not create:
            self._require_tables(sqlite_file)
        try:
            if schema is not None:
                with self._engine.begin() as conn:
                    conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:s))"), {"s": schema})
                    conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
            self.schema_found = migrate.upgrade(self._engine, self._url_text, sqlite_file)
        except StoreError:
            self._engine.dispose()
            raise
        except SQLAlchemyError as exc:
            self._engine.dispose()
            fix = (
                "Check that the file's directory exists and is writable"
                if self._dialect == "sqlite"
                else "Check that the server is running, the database exists and the URL is right"
            )
            raise StoreError(
                f"cannot reach the results database {self._url_text}: {_first_line(exc)}. "
                f"{fix} (e.g. {_URL_EXAMPLE})"
            ) from exc

    def _require_tables(self, sqlite_file: Path | None) -> None:
        fix = "Fix: pass the --db-url (or --run-root) the sweeps were submitted with"
        if sqlite_file is not None and not sqlite_file.is_file():
            self._engine.dispose()
            raise StoreError(f"no results DB at {sqlite_file}. {fix}")
        try:
            found = inspect(self._engine).has_table(SweepRow.__tablename__)
        except SQLAlchemyError as exc:
            self._engine.dispose()
            raise StoreError(
                f"cannot reach the results database {self._url_text}: {_first_line(exc)}"
            ) from exc
        if not found:
            self._engine.dispose()
            raise StoreError(f"{self._url_text} holds no results tables (no sweeps yet). {fix}")

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
        """One unit of work: commit on success, roll back on any error, SQL errors -> StoreError."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except SQLAlchemyError as exc:
            session.rollback()
            raise StoreError(f"results database {self._url_text}: {_first_line(exc)}") from exc
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def _insert(self, table: type[_Base]) -> Any:
        module = sqlite_dialect if self._dialect == "sqlite" else pg_dialect
        return module.insert(table)

    @_reconnecting
    def _update_trial(self, trial_id: int, **values: Any) -> None:
        with self._session() as s:
            result = s.execute(update(TrialRow).where(TrialRow.id == trial_id).values(**values))
            if result.rowcount == 0:  # type: ignore[attr-defined]
                raise StoreError(f"no trial with id {trial_id} in {self._url_text}")

    # -- sweeps ------------------------------------------------------------------------------

    @_reconnecting
    def upsert_sweep(self, name: str, workload: str, spec_yaml: str, spec_path: str) -> int:
        """Create the sweep ``name`` or update its spec; return its id (stable across calls).

        Raises:
            StoreError: the write failed.
        """
        now = _now()
        stmt = self._insert(SweepRow).values(
            name=name,
            workload=workload,
            spec_yaml=spec_yaml,
            spec_path=str(spec_path),
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
        with self._session() as s:
            return int(s.execute(stmt).scalar_one())

    @_reconnecting
    def set_sweep_mlflow_run(self, sweep_id: int, run_id: str | None) -> None:
        """Record the MLflow parent run id of a sweep.

        Raises:
            StoreError: no such sweep, or the write failed.
        """
        with self._session() as s:
            result = s.execute(
                update(SweepRow).where(SweepRow.id == sweep_id).values(mlflow_run_id=run_id)
            )
            if result.rowcount == 0:  # type: ignore[attr-defined]
                raise StoreError(f"no sweep with id {sweep_id} in {self._url_text}")

    @_reconnecting
    def get_sweep(self, name: str) -> SweepInfo | None:
        """Return the sweep called ``name``, or None."""
        with self._session() as s:
            row = s.scalars(select(SweepRow).where(SweepRow.name == name)).one_or_none()
            return None if row is None else _sweep_info(row)

    @_reconnecting
    def list_sweeps(self) -> list[SweepInfo]:
        """Return all sweeps, oldest first."""
        with self._session() as s:
            rows = s.scalars(select(SweepRow).order_by(SweepRow.created_at, SweepRow.id)).all()
            return [_sweep_info(r) for r in rows]

    # -- the driver's lease and cancel requests ---------------------------------------------

    @_reconnecting
    def claim_sweep(self, sweep_id: int, driver: str, *, stale_after_s: float) -> None:
        """Make ``driver`` (``host:pid``) the one process running the sweep, and clear any
        cancel request.

        The sweep is free when no driver holds it, when its holder's heartbeat is older than
        ``stale_after_s``, or when the holder ran on this host and its process is gone (a
        driver killed with ``kill -9``).

        Raises:
            StoreError: another driver holds the sweep and is alive; the message says which.
        """
        now = _now()
        with self._session() as s:
            row = s.get(SweepRow, sweep_id)
            if row is None:
                raise StoreError(f"no sweep with id {sweep_id} in {self._url_text}")
            holder, beat = row.driver, _utc(row.heartbeat_at)
            age = (now - beat).total_seconds() if beat is not None else math.inf
            if holder and holder != driver and age < stale_after_s and _driver_alive(holder):
                raise StoreError(
                    f"sweep {row.name!r} is being run by driver {holder} (last heartbeat "
                    f"{age:.0f} s ago). Wait for it, or stop it with `orchestrator cancel "
                    f"{row.name}` and the same --run-root or --db-url; a driver on another "
                    f"host that died frees the sweep {stale_after_s:.0f} s after its last "
                    "heartbeat"
                )
            result = s.execute(
                update(SweepRow)
                .where(SweepRow.id == sweep_id, _same_holder(holder))
                .values(driver=driver, heartbeat_at=now, cancel_requested_at=None)
            )
            if result.rowcount == 0:  # type: ignore[attr-defined]
                raise StoreError(
                    f"sweep {row.name!r} was claimed by another driver just now; try again"
                )

    @_reconnecting
    def heartbeat(self, sweep_id: int, driver: str) -> bool:
        """Renew ``driver``'s lease on the sweep; return True when a cancel was requested.

        Raises:
            StoreError: the lease was taken over by another driver.
        """
        with self._session() as s:
            s.execute(
                update(SweepRow)
                .where(SweepRow.id == sweep_id, SweepRow.driver == driver)
                .values(heartbeat_at=_now())
            )
            row = s.get(SweepRow, sweep_id)
            if row is None or row.driver != driver:
                raise StoreError(f"driver {driver} lost its lease on sweep id {sweep_id}")
            return row.cancel_requested_at is not None

    @_reconnecting
    def release_sweep(self, sweep_id: int, driver: str) -> None:
        """End ``driver``'s lease (a finished or stopped submit)."""
        with self._session() as s:
            s.execute(
                update(SweepRow)
                .where(SweepRow.id == sweep_id, SweepRow.driver == driver)
                .values(driver=None, heartbeat_at=None)
            )

    @_reconnecting
    def request_cancel(self, sweep_id: int, *, stale_after_s: float) -> tuple[int, int, bool]:
        """Ask the sweep's driver to stop: pending trials become cancelled at once; running
        ones are cancelled by the driver at its next heartbeat, or here when no live driver
        holds the sweep (it crashed).

        Returns:
            ``(pending cancelled, running cancelled here, a live driver was told)``.
        """
        now = _now()
        with self._session() as s:
            row = s.get(SweepRow, sweep_id)
            if row is None:
                raise StoreError(f"no sweep with id {sweep_id} in {self._url_text}")
            beat = _utc(row.heartbeat_at)
            live = bool(
                row.driver
                and beat is not None
                and (now - beat).total_seconds() < stale_after_s
                and _driver_alive(row.driver)
            )
            s.execute(
                update(SweepRow).where(SweepRow.id == sweep_id).values(cancel_requested_at=now)
            )
            states = [TrialState.PENDING.value] + ([] if live else [TrialState.RUNNING.value])
            counts = []
            for state in states:
                result = s.execute(
                    update(TrialRow)
                    .where(TrialRow.sweep_id == sweep_id, TrialRow.state == state)
                    .values(state=TrialState.CANCELLED.value, finished_at=now)
                )
                counts.append(int(result.rowcount))  # type: ignore[attr-defined]
            return counts[0], counts[1] if len(counts) > 1 else 0, live

    @_reconnecting
    def reset_trials(self, sweep_id: int, states: set[str]) -> int:
        """Turn the sweep's trials in ``states`` (e.g. failed, cancelled) back into pending;
        return how many. Their attempts, MLflow run and metrics are kept."""
        wanted = sorted(TrialState(x).value for x in states)
        with self._session() as s:
            result = s.execute(
                update(TrialRow)
                .where(TrialRow.sweep_id == sweep_id, TrialRow.state.in_(wanted))
                .values(state=TrialState.PENDING.value)
            )
            return int(result.rowcount)  # type: ignore[attr-defined]

    # -- trials ------------------------------------------------------------------------------

    @_reconnecting
    def add_trials(
        self, sweep_id: int, trials: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]]
    ) -> int:
        """Insert the missing ``(trial_key, config, overrides)`` as pending; return how many.

        Existing keys are left untouched (their state, attempts and config stay), so calling this
        twice, or from two processes at once, never duplicates a trial.

        Raises:
            ValueError: a trial key is longer than 64 characters.
            StoreError: no such sweep, or the write failed.
        """
        rows = []
        for key, config, overrides in trials:
            if len(key) > _TRIAL_KEY_LEN:
                raise ValueError(f"trial key {key!r} is longer than {_TRIAL_KEY_LEN} characters")
            rows.append(
                {
                    "sweep_id": sweep_id,
                    "trial_key": key,
                    "config_json": _canonical_json(config),
                    "overrides_json": _canonical_json(overrides),
                    "state": TrialState.PENDING.value,
                    "attempts": 0,
                }
            )
        inserted = 0
        with self._session() as s:
            for chunk in _chunks(rows):
                stmt = self._insert(TrialRow).values(list(chunk))
                stmt = stmt.on_conflict_do_nothing(
                    index_elements=[TrialRow.sweep_id, TrialRow.trial_key]
                ).returning(TrialRow.id)
                inserted += len(s.execute(stmt).all())
        return inserted

    @_reconnecting
    def trials(self, sweep_id: int, states: set[str] | None = None) -> list[TrialInfo]:
        """Return the trials of a sweep in insertion order, optionally only those in ``states``.

        Raises:
            ValueError: ``states`` names an unknown state.
        """
        stmt = select(TrialRow).where(TrialRow.sweep_id == sweep_id).order_by(TrialRow.id)
        if states is not None:
            wanted = {TrialState(s).value for s in states}
            stmt = stmt.where(TrialRow.state.in_(sorted(wanted)))
        with self._session() as s:
            return [_trial_info(r) for r in s.scalars(stmt).all()]

    def trial(self, sweep_id: int, key: str) -> TrialInfo | None:
        """The trial ``key`` of a sweep, or None."""
        stmt = select(TrialRow).where(TrialRow.sweep_id == sweep_id, TrialRow.trial_key == key)
        with self._session() as s:
            row = s.scalars(stmt).first()
            return None if row is None else _trial_info(row)

    def mark_running(self, trial_id: int, mlflow_run_id: str | None) -> None:
        """Mark a trial running: attempts += 1, started_at = now, error/finish cleared."""
        self._update_trial(
            trial_id,
            state=TrialState.RUNNING.value,
            mlflow_run_id=mlflow_run_id,
            attempts=TrialRow.attempts + 1,
            started_at=_now(),
            finished_at=None,
            wall_s=None,
            error=None,
        )

    def mark_completed(self, trial_id: int, wall_s: float) -> None:
        """Mark a trial completed after ``wall_s`` seconds of wall-clock time."""
        self._update_trial(
            trial_id,
            state=TrialState.COMPLETED.value,
            finished_at=_now(),
            wall_s=float(wall_s),
            error=None,
        )

    def mark_failed(self, trial_id: int, error: str, wall_s: float | None) -> None:
        """Mark a trial failed with its error text (e.g. the traceback) after ``wall_s`` s."""
        self._update_trial(
            trial_id,
            state=TrialState.FAILED.value,
            finished_at=_now(),
            wall_s=None if wall_s is None else float(wall_s),
            error=error,
        )

    def mark_cancelled(self, trial_id: int) -> None:
        """Mark a trial cancelled (by the user or because the sweep was stopped)."""
        self._update_trial(trial_id, state=TrialState.CANCELLED.value, finished_at=_now())

    @_reconnecting
    def reset_stale_running(self, sweep_id: int) -> int:
        """Turn the sweep's ``running`` trials back into ``pending``; return how many.

        Used when a sweep is resubmitted after the driver crashed mid-run.
        """
        with self._session() as s:
            result = s.execute(
                update(TrialRow)
                .where(TrialRow.sweep_id == sweep_id, TrialRow.state == TrialState.RUNNING.value)
                .values(state=TrialState.PENDING.value)
            )
            return int(result.rowcount)  # type: ignore[attr-defined]

    # -- metrics -----------------------------------------------------------------------------

    def log_metrics(self, trial_id: int, metrics: Mapping[str, float], step: int = 0) -> None:
        """Write metric values of a trial at ``step``; re-logging a (name, step) replaces it.

        NaN and +-inf are kept (see the module docstring).

        Raises:
            ValueError: a metric name is longer than 250 characters or a value is not a number.
            StoreError: no such trial, or the write failed.
        """
        rows = []
        for name, value in metrics.items():
            rows.append(self._metric_row(trial_id, name, value, step))
        self._upsert_metrics(rows)

    def log_metric_series(self, trial_id: int, name: str, values: Sequence[float]) -> None:
        """Write ``values`` as metric ``name`` at steps 0..n-1 (e.g. a loss curve), replacing."""
        self._upsert_metrics(
            [self._metric_row(trial_id, name, v, step) for step, v in enumerate(values)]
        )

    @_reconnecting
    def metric_series(self, trial_id: int, name: str) -> list[float]:
        """Return metric ``name`` of a trial ordered by step (all steps)."""
        stmt = (
            select(MetricRow.value, MetricRow.nonfinite)
            .where(MetricRow.trial_id == trial_id, MetricRow.name == name)
            .order_by(MetricRow.step)
        )
        with self._session() as s:
            return [_decode_metric(v, nf) for v, nf in s.execute(stmt).all()]

    @_reconnecting
    def series_names(self, sweep_id: int) -> set[str]:
        """Names of the metrics logged as series (at a step > 0) by any trial of the sweep."""
        stmt = (
            select(MetricRow.name)
            .join(TrialRow, TrialRow.id == MetricRow.trial_id)
            .where(TrialRow.sweep_id == sweep_id, MetricRow.step > 0)
            .distinct()
        )
        with self._session() as s:
            return set(s.scalars(stmt).all())

    @_reconnecting
    def sweep_series(
        self, sweep_id: int, names: Sequence[str]
    ) -> dict[str, dict[str, list[float]]]:
        """Series ``names`` of every trial of a sweep in one query: trial key -> name -> values
        ordered by step. Trials without any of them are absent."""
        stmt = (
            select(TrialRow.trial_key, MetricRow.name, MetricRow.value, MetricRow.nonfinite)
            .join(TrialRow, TrialRow.id == MetricRow.trial_id)
            .where(TrialRow.sweep_id == sweep_id, MetricRow.name.in_(list(names)))
            .order_by(TrialRow.id, MetricRow.name, MetricRow.step)
        )
        out: dict[str, dict[str, list[float]]] = {}
        with self._session() as s:
            for key, name, value, nonfinite in s.execute(stmt).all():
                out.setdefault(key, {}).setdefault(name, []).append(
                    _decode_metric(value, nonfinite)
                )
        return out

    def _metric_row(self, trial_id: int, name: str, value: float, step: int) -> dict[str, Any]:
        if len(name) > _METRIC_NAME_LEN:
            raise ValueError(f"metric name {name[:40]!r}... is longer than {_METRIC_NAME_LEN}")
        try:
            stored, nonfinite = _encode_metric(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"metric {name!r} has a non-numeric value {value!r}") from exc
        return {
            "trial_id": trial_id,
            "name": name,
            "step": int(step),
            "value": stored,
            "nonfinite": nonfinite,
        }

    @_reconnecting
    def _upsert_metrics(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        with self._session() as s:
            for chunk in _chunks(rows):
                stmt = self._insert(MetricRow).values(list(chunk))
                stmt = stmt.on_conflict_do_update(
                    index_elements=[MetricRow.trial_id, MetricRow.name, MetricRow.step],
                    set_={"value": stmt.excluded.value, "nonfinite": stmt.excluded.nonfinite},
                )
                s.execute(stmt)

    @_reconnecting
    def metrics_frame(self, sweep_id: int) -> pd.DataFrame:
        """One row per trial of the sweep (any state), wide: the analysis input table.

        Columns: ``trial_key``, ``state``, every override by dotted name (``pretrain.tokens``,
        ``seed``) and every metric logged at step 0 (NaN where a trial lacks it). A metric whose
        name equals an override's is named ``metric.<name>``.
        """
        with self._session() as s:
            trial_rows = s.execute(
                select(TrialRow.id, TrialRow.trial_key, TrialRow.state, TrialRow.overrides_json)
                .where(TrialRow.sweep_id == sweep_id)
                .order_by(TrialRow.id)
            ).all()
            metric_rows = s.execute(
                select(MetricRow.trial_id, MetricRow.name, MetricRow.value, MetricRow.nonfinite)
                .join(TrialRow, TrialRow.id == MetricRow.trial_id)
                .where(TrialRow.sweep_id == sweep_id, MetricRow.step == 0)
            ).all()
        records: list[dict[str, Any]] = []
        index: dict[int, dict[str, Any]] = {}
        override_names: dict[str, None] = {}
        for trial_id, key, state, overrides_json in trial_rows:
            record: dict[str, Any] = {"trial_key": key, "state": state}
            for name, value in _flatten_overrides(json.loads(overrides_json)).items():
                override_names.setdefault(name, None)
                record[name] = value
            records.append(record)
            index[trial_id] = record
        metric_names: set[str] = set()
        for trial_id, name, value, nonfinite in metric_rows:
            column = (
                f"metric.{name}"
                if name in override_names or name in ("trial_key", "state")
                else name
            )
            metric_names.add(column)
            index[trial_id][column] = _decode_metric(value, nonfinite)
        columns = ["trial_key", "state", *sorted(override_names), *sorted(metric_names)]
        frame = pd.DataFrame.from_records(records, columns=columns)
        for column in metric_names:
            frame[column] = frame[column].astype("float64")
        return frame

    # -- fits --------------------------------------------------------------------------------

    @_reconnecting
    def save_fit(self, sweep_id: int, fit: Mapping[str, Any]) -> None:
        """Store one law fit, replacing the sweep's previous fit of the same ``law``.

        ``fit`` keys: ``law``, ``x_name``, ``y_name``, ``form`` (str); ``a``, ``b``, ``a_lo``,
        ``a_hi``, ``b_lo``, ``b_hi``, ``r2`` (float, NaN allowed); ``n`` (int, points fitted);
        optional ``details`` (JSON-able dict: residuals, baseline, ...).

        Raises:
            ValueError: a required key is missing.
            StoreError: no such sweep, or the write failed.
        """
        missing = [k for k in (*_FIT_STRINGS, *_FIT_FLOATS, "n") if k not in fit]
        if missing:
            raise ValueError(f"fit is missing key(s) {', '.join(missing)}")
        values: dict[str, Any] = {"sweep_id": sweep_id, "n": int(fit["n"]), "created_at": _now()}
        values.update({k: str(fit[k]) for k in _FIT_STRINGS})
        for k in _FIT_FLOATS:
            v = fit[k]
            values[k] = None if v is None or math.isnan(float(v)) else float(v)
        values["details_json"] = json.dumps(
            fit.get("details") or {}, sort_keys=True, default=str, allow_nan=True
        )
        stmt = self._insert(FitRow).values(**values)
        stmt = stmt.on_conflict_do_update(
            index_elements=[FitRow.sweep_id, FitRow.law],
            set_={k: getattr(stmt.excluded, k) for k in values if k not in ("sweep_id", "law")},
        )
        with self._session() as s:
            s.execute(stmt)

    @_reconnecting
    def fits(self, sweep_id: int) -> list[dict[str, Any]]:
        """Return the sweep's fits ordered by law: the ``save_fit`` keys plus ``created_at``."""
        with self._session() as s:
            rows = s.scalars(
                select(FitRow).where(FitRow.sweep_id == sweep_id).order_by(FitRow.law)
            ).all()
            out = []
            for r in rows:
                item: dict[str, Any] = {k: getattr(r, k) for k in _FIT_STRINGS}
                for k in _FIT_FLOATS:
                    v = getattr(r, k)
                    item[k] = math.nan if v is None else float(v)
                item["n"] = r.n
                item["details"] = json.loads(r.details_json)
                item["created_at"] = _utc(r.created_at)
                out.append(item)
            return out

    @_reconnecting
    def delete_sweep(self, sweep_id: int) -> None:
        """Delete a sweep with its trials, metrics and fits."""
        with self._session() as s:
            trial_ids = select(TrialRow.id).where(TrialRow.sweep_id == sweep_id)
            s.execute(delete(MetricRow).where(MetricRow.trial_id.in_(trial_ids)))
            s.execute(delete(TrialRow).where(TrialRow.sweep_id == sweep_id))
            s.execute(delete(FitRow).where(FitRow.sweep_id == sweep_id))
            s.execute(delete(SweepRow).where(SweepRow.id == sweep_id))


def driver_id() -> str:
    """This process as a sweep driver: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def lease_alive(info: SweepInfo, *, stale_after_s: float) -> bool:
    """Whether a live driver holds the sweep: one whose heartbeat is younger than
    ``stale_after_s`` and whose process (on this host) still exists."""
    if not info.driver or info.heartbeat_at is None:
        return False
    age = (_now() - _utc(info.heartbeat_at)).total_seconds()  # type: ignore[operator]
    return age < stale_after_s and _driver_alive(info.driver)


def _driver_alive(driver: str) -> bool:
    """False only when ``driver`` ran on this host and its process is gone."""
    host, _, pid = driver.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine: only its heartbeat can tell
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def _same_holder(holder: str | None) -> Any:
    return SweepRow.driver.is_(None) if holder is None else SweepRow.driver == holder


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    """Per-connection SQLite settings: WAL (readers do not block the writer), 30 s busy wait;
    the driver's own transaction handling is off so :func:`_sqlite_begin_immediate` owns BEGIN."""
    dbapi_conn.isolation_level = None
    cursor = dbapi_conn.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _sqlite_begin_immediate(conn: Any) -> None:
    """Start every SQLite transaction holding the write lock (waits on the busy timeout)."""
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def _sweep_info(row: SweepRow) -> SweepInfo:
    created = _utc(row.created_at)
    updated = _utc(row.updated_at)
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
        heartbeat_at=_utc(row.heartbeat_at),
        cancel_requested_at=_utc(row.cancel_requested_at),
    )


def _trial_info(row: TrialRow) -> TrialInfo:
    return TrialInfo(
        id=row.id,
        key=row.trial_key,
        config=json.loads(row.config_json),
        overrides=json.loads(row.overrides_json),
        state=row.state,
        error=row.error,
        attempts=row.attempts,
        mlflow_run_id=row.mlflow_run_id,
        started_at=_utc(row.started_at),
        finished_at=_utc(row.finished_at),
        wall_s=row.wall_s,
    )
