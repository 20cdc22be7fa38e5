"""Opening the results DB a command names, and finding a sweep in it."""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import OrchestratorError
from orchestrator.store.results import ResultsStore, SweepInfo


def open_store(run_root: Path, db_url: str | None, *, must_exist: bool = False) -> ResultsStore:
    """The results DB: ``db_url`` if given, else SQLite under ``run_root`` (which must exist
    when ``must_exist``).

    Raises:
        OrchestratorError: ``must_exist`` and there is none, with the fix.
        StoreError: the DB cannot be reached or opened.
    """
    if db_url:
        return ResultsStore(db_url, create=not must_exist)
    if must_exist and not (run_root / "results.db").exists():
        raise OrchestratorError(
            f"no results DB at {run_root / 'results.db'}. Fix: pass the --run-root (or --db-url) "
            "the sweep was submitted with"
        )
    return ResultsStore.sqlite_under(run_root)


def find_sweep(store: ResultsStore, name: str) -> SweepInfo:
    """The sweep named ``name``.

    Raises:
        OrchestratorError: there is none; the message lists the sweeps there are.
    """
    info = store.get_sweep(name)
    if info is None:
        names = ", ".join(s.name for s in store.list_sweeps()) or "none"
        raise OrchestratorError(f"no sweep named {name!r} in {store.url}; sweeps: {names}")
    return info


def open_sweep(run_root: Path, db_url: str | None, name: str) -> tuple[ResultsStore, SweepInfo]:
    """The results DB a command names (:func:`open_store`, which must exist) and its sweep
    ``name``; on a refusal the DB is closed again, so it leaves nothing behind.

    Raises:
        OrchestratorError: no results DB, or no such sweep (as :func:`find_sweep`).
        StoreError: the DB cannot be reached or opened.
    """
    store = open_store(run_root, db_url, must_exist=True)
    try:
        return store, find_sweep(store, name)
    except Exception:
        store.close()
        raise
