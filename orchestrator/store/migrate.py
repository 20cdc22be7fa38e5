"""Schema migrations of the results store (Alembic, run in-process on every open).

A store opened on an empty database builds it from nothing to the newest revision; one at an
older revision is upgraded; one made before migrations existed (the tables but no version table)
is stamped as revision ``0001`` (the schema it has) and then upgraded; one at a revision this
code does not know (written by a newer orchestrator) is refused with a message.

The version table is ``ss_alembic_version`` (Optuna's is ``alembic_version``; see
docs/operations.md). Concurrent first starts are serialised: on PostgreSQL by a
transaction-scoped advisory lock, on SQLite by a file lock next to the database, removed after
the migration.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from filelock import FileLock
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, Engine

from orchestrator.errors import StoreError

__all__ = ["VERSION_TABLE", "current_revision", "head_revision", "upgrade"]

VERSION_TABLE = "ss_alembic_version"
"""Alembic's version table of the results store."""
_SCRIPTS = Path(__file__).with_name("migrations")
_ADVISORY_KEY = 0x5C5CA1E  # any constant shared by every orchestrator process
_LEGACY_REVISION = "0001"


def _config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_SCRIPTS))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The newest revision this code ships (e.g. ``"0002"``)."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def current_revision(connection: Connection) -> str | None:
    """The database's revision, or None when it has no version table (empty or pre-Alembic)."""
    ctx = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return ctx.get_current_revision()


def upgrade(engine: Engine, url_text: str, sqlite_file: Path | None) -> str:
    """Bring the database to the newest revision; return the revision it was at before.

    Args:
        engine: the store's engine (its ``search_path`` already selects the schema on PostgreSQL).
        url_text: the database URL with its password masked, for messages.
        sqlite_file: the SQLite database file (None for PostgreSQL or in-memory SQLite), whose
            sibling ``<file>.migrate.lock`` serialises concurrent first starts; it is taken only
            when the file is new or below head, and removed afterwards.

    Returns:
        The revision found (``"none"`` for an empty database, ``"pre-alembic"`` for tables
        without a version table).

    Raises:
        StoreError: the database is at a revision this code does not know.
    """
    if sqlite_file is None or not sqlite_file.parent.is_dir():  # else connecting fails below
        return _upgrade_locked(engine, url_text)
    if sqlite_file.is_file():
        with engine.connect() as conn:  # BEGIN IMMEDIATE: waits for a migration under way
            found = current_revision(conn)
        if found is not None and found == head_revision():
            return found
    lock = Path(f"{sqlite_file}.migrate.lock")
    try:
        with FileLock(lock, timeout=120):
            return _upgrade_locked(engine, url_text)
    finally:
        # Safe to remove: whoever waits on this file re-reads the revision under it, a later
        # opener finds the schema at head and takes no lock, and each migration runs in one
        # BEGIN IMMEDIATE transaction, which SQLite itself serialises.
        lock.unlink(missing_ok=True)


def _upgrade_locked(engine: Engine, url_text: str) -> str:
    scripts = ScriptDirectory.from_config(_config())
    head = scripts.get_current_head()
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _ADVISORY_KEY})
        found = current_revision(conn)
        if found is None and inspect(conn).has_table("ss_sweeps"):
            before = "pre-alembic"
            command.stamp(_config(conn), _LEGACY_REVISION)
        else:
            before = found or "none"
        if found is not None and found != head:
            try:
                scripts.get_revision(found)
            except Exception:  # noqa: BLE001 - alembic raises several types for an unknown id
                raise StoreError(
                    f"the results database {url_text} is at schema revision {found!r}, which "
                    f"this orchestrator does not know (its newest is {head!r}): it was written "
                    "by a newer version. Upgrade the orchestrator, or use another --db-url"
                ) from None
        if found != head:
            command.upgrade(_config(conn), "head")
    return before
