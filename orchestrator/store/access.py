"""Opening the results DB a command names, and finding a sweep in it."""

from __future__ import annotations

import difflib
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
        every = [s.name for s in store.list_sweeps()]
        close = difflib.get_close_matches(name, every, n=1)
        if close:
            fix = f"did you mean {close[0]!r}?"
        else:
            fix = "name one of these" if every else "submit a sweep first (orchestrator submit)"
        raise OrchestratorError(
            f"no sweep named {name!r} in {store.url}; sweeps: {', '.join(every) or 'none'}. "
            f"Fix: {fix}"
        )
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
