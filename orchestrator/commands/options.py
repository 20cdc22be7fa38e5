"""Options and helpers shared by the ``orchestrator`` commands (run root, DB, MLflow)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

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
Address = Annotated[
    str | None,
    typer.Option(
        "--address",
        envvar="RAY_ADDRESS",
        help="Ray cluster address, e.g. ray://head:10001 or head:6379 (default: a local Ray on "
        "127.0.0.1); with --ray-job the job server, e.g. http://head:8265",
    ),
]
