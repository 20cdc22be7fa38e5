"""Options and helpers shared by the ``orchestrator`` commands (run root, DB, MLflow)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.errors import OrchestratorError

RunRoot = Annotated[
    Path,
    typer.Option(
        "--run-root", help="folder for the SQLite DB, MLflow, cache, trial artifacts and dashboards"
    ),
]
DbUrl = Annotated[
    str | None,
    typer.Option(
        "--db-url",
        envvar="SPECSCALE_DB_URL",
        help="results DB URL (default: SQLite under the run "
        "root), e.g. postgresql://user@host:5432/db",
    ),
]
TrackingUri = Annotated[
    str | None,
    typer.Option(
        "--tracking-uri",
        envvar="MLFLOW_TRACKING_URI",
        help="MLflow tracking URI (default: SQLite under the run root), e.g. http://host:5000",
    ),
]


def open_store(run_root: Path, db_url: str | None, *, must_exist: bool = False) -> Any:
    """The results DB: ``db_url`` if given, else SQLite under ``run_root`` (which must exist
    when ``must_exist``). Raises OrchestratorError with a fix when it does not."""
    from orchestrator.store import ResultsStore

    if db_url:
        return ResultsStore(db_url, create=not must_exist)
    if must_exist and not (run_root / "results.db").exists():
        raise OrchestratorError(
            f"no results DB at {run_root / 'results.db'}. Fix: pass the --run-root (or --db-url) "
            "the sweep was submitted with"
        )
    return ResultsStore.sqlite_under(run_root)


def find_sweep(store: Any, name: str) -> Any:
    """The sweep named ``name``, or OrchestratorError listing the sweeps there are."""
    info = store.get_sweep(name)
    if info is None:
        names = ", ".join(s.name for s in store.list_sweeps()) or "none"
        raise OrchestratorError(f"no sweep named {name!r} in {store.url}; sweeps: {names}")
    return info
