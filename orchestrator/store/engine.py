"""Connecting to the results database: URLs, the engine, SQLite settings, sessions, retries.

:func:`open_database` turns a URL into a migrated :class:`Database` (an engine plus what the
store needs to know about it); :func:`session_scope` is the one unit of work of every store call
(commit, or roll back and re-raise SQL errors as :class:`~orchestrator.errors.StoreError`);
:func:`reconnecting` retries a call while the server is unreachable.

SQLite transactions start with ``BEGIN IMMEDIATE`` (concurrent writers queue on the busy
timeout).
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.errors import NoResultsTables, StoreError
from orchestrator.store import migrate
from orchestrator.store.rows import SweepRow

__all__ = [
    "RECONNECT_S",
    "URL_EXAMPLE",
    "Database",
    "chunks",
    "dialect_insert",
    "first_line",
    "mask_url",
    "normalize_db_url",
    "open_database",
    "reconnecting",
    "session_scope",
]

log = logging.getLogger(__name__)

URL_EXAMPLE = "sqlite:///runs/results.db or postgresql://user@host:5432/db"
"""the example URL that error messages show"""
_SCHEMA_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

_CHUNK = 500  # rows per multi-row INSERT (keeps SQLite under its bound-parameter limit)

RECONNECT_S = 120.0
"""how long a store call keeps retrying while the database is unreachable (e.g. a PostgreSQL
restart) before it raises, s"""


# ---------------------------------------------------------------------------------------------
# URLs
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
            f"{mask_url(url)!r} is not a database URL. Fix: a URL such as {URL_EXAMPLE}"
        ) from exc
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise StoreError(
            f"{mask_url(url)!r} is not a database URL this store supports (SQLite or PostgreSQL). "
            f"Fix: a URL such as {URL_EXAMPLE}"
        )
    return parsed


def first_line(exc: BaseException) -> str:
    """The first line of a (DBAPI) error's message, for one-line ``StoreError`` messages."""
    orig = getattr(exc, "orig", None)
    message = str(orig if orig is not None else exc).strip()
    return message.splitlines()[0] if message else type(exc).__name__


# ---------------------------------------------------------------------------------------------
# Opening the database
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Database:
    """An open, migrated results database."""

    engine: Engine
    url_text: str
    """the URL with its password masked"""
    dialect: str
    """``"sqlite"`` or ``"postgresql"``"""
    schema_found: str
    """the schema revision found on opening (see :func:`orchestrator.store.migrate.upgrade`)"""


def open_database(url: str, *, schema: str | None, create: bool) -> Database:
    """Connect to ``url`` and bring its schema to the newest revision (see ``ResultsStore``).

    Raises:
        StoreError: the URL is wrong, the server unreachable, or (``create=False``) the
            database has no results tables.
        ValueError: ``schema`` is not a plain identifier or is given for SQLite.
    """
    url_text = mask_url(url)
    parsed = normalize_db_url(url)
    dialect = parsed.get_backend_name()
    connect_args: dict[str, Any] = {}
    if dialect == "sqlite":
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
        engine = create_engine(parsed, connect_args=connect_args, pool_pre_ping=True)
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:
        raise StoreError(
            f"cannot open the results database {url_text}: {first_line(exc)}. "
            f"Example URL: {URL_EXAMPLE}"
        ) from exc
    if dialect == "sqlite":
        event.listen(engine, "connect", _sqlite_on_connect)
        event.listen(engine, "begin", _sqlite_begin_immediate)
    sqlite_file = (
        Path(parsed.database)
        if dialect == "sqlite" and parsed.database not in (None, "", ":memory:")
        else None
    )
    if not create:
        _require_tables(engine, url_text, sqlite_file)
    try:
        if schema is not None:
            with engine.begin() as conn:
                conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:s))"), {"s": schema})
                conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
        found = migrate.upgrade(engine, url_text, sqlite_file)
    except StoreError:
        engine.dispose()
        raise
    except SQLAlchemyError as exc:
        engine.dispose()
        fix = (
            "Fix: make the file's directory exist and writable, or give another --db-url"
            if dialect == "sqlite"
            else "Fix: start the server and create the database, or correct --db-url"
        )
        raise StoreError(
            f"cannot reach the results database {url_text}: {first_line(exc)}. "
            f"{fix} (e.g. {URL_EXAMPLE})"
        ) from exc
    return Database(engine=engine, url_text=url_text, dialect=dialect, schema_found=found)


def _require_tables(engine: Engine, url_text: str, sqlite_file: Path | None) -> None:
    """Refuse (and dispose of ``engine``) a database without this project's tables."""
    fix = "Fix: pass the --db-url (or --run-root) the sweeps were submitted with"
    if sqlite_file is not None and not sqlite_file.is_file():
        engine.dispose()
        raise NoResultsTables(f"no results DB at {sqlite_file}. {fix}")
    try:
        found = inspect(engine).has_table(SweepRow.__tablename__)
    except SQLAlchemyError as exc:
        engine.dispose()
        raise StoreError(
            f"cannot reach the results database {url_text}: {first_line(exc)}. Fix: start the "
            "server, or correct --db-url"
        ) from exc
    if not found:
        engine.dispose()
        raise NoResultsTables(f"{url_text} holds no results tables (no sweeps yet). {fix}")


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


# ---------------------------------------------------------------------------------------------
# Units of work
# ---------------------------------------------------------------------------------------------


@contextmanager
def session_scope(sessions: sessionmaker[Session], url_text: str) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on any error.

    Raises:
        StoreError: a SQL error (the message names ``url_text``); the SQLAlchemy error is its
            ``__cause__``, which :func:`reconnecting` inspects.
    """
    session = sessions()
    try:
        yield session
        session.commit()
    except SQLAlchemyError as exc:
        session.rollback()
        raise StoreError(f"results database {url_text}: {first_line(exc)}") from exc
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def dialect_insert(dialect: str, table: type[Any]) -> Any:
    """An ``INSERT`` of ``table`` with the dialect's ``ON CONFLICT`` clauses (SQLite or
    PostgreSQL)."""
    module = sqlite_dialect if dialect == "sqlite" else pg_dialect
    return module.insert(table)


def chunks(rows: Sequence[dict[str, Any]]) -> Iterable[Sequence[dict[str, Any]]]:
    """``rows`` in slices of at most 500, one multi-row ``INSERT`` each (SQLite limits the
    bound parameters of one statement)."""
    for start in range(0, len(rows), _CHUNK):
        yield rows[start : start + _CHUNK]


_T = TypeVar("_T")
_P = ParamSpec("_P")


def reconnecting(method: Callable[_P, _T]) -> Callable[_P, _T]:
    """Retry a store call whose connection failed (``OperationalError``: server restarted or
    unreachable, SQLite busy past its timeout) with backoff for up to :data:`RECONNECT_S`.

    Every wrapped call must be one transaction safe to repeat (``mark_running`` may count one
    attempt twice when a commit's reply was lost).
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
