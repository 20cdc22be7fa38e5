"""Options and helpers shared by the ``orchestrator`` commands (run root, DB, MLflow).

``--db-url`` and ``--tracking-uri`` come from the command line, else their environment variable,
and in a Ray Job submitted with ``--ray-job`` from the file its ``SPECSCALE_URLS_FILE`` names
(URLs with a password, kept out of the job's info: :mod:`orchestrator.driving.ray_job`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer


def flag(name: str, *, help: str) -> Any:
    """A boolean switch, ``--name`` (present: True), with no ``--no-name`` twin and no
    ``<bool>`` metavar in the help."""
    return typer.Option(name, help=help, metavar="")


RunRoot = Annotated[
    Path,
    typer.Option(
        "--run-root", help="folder for the SQLite DB, MLflow, cache, trial artifacts and dashboards"
    ),
]


def _from_job_file(var: str) -> Callable[[str | None], str | None]:
    """An option callback: the URL that ``--ray-job`` left for this job in its URLs file
    under ``var``, else the option's own value."""

    def value(given: str | None) -> str | None:
        from orchestrator.driving.ray_job import URLS_FILE_VAR, read_urls_file
        from orchestrator.errors import OrchestratorError

        path = os.environ.get(URLS_FILE_VAR)
        if not path:
            return given
        try:
            return read_urls_file(path).get(var) or given
        except OrchestratorError as exc:
            raise typer.BadParameter(str(exc)) from None

    return value


DbUrl = Annotated[
    str | None,
    typer.Option(
        "--db-url",
        envvar="SPECSCALE_DB_URL",
        callback=_from_job_file("SPECSCALE_DB_URL"),
        help="results DB URL (default: SQLite under the run "
        "root), e.g. postgresql://user@host:5432/db",
    ),
]
TrackingUri = Annotated[
    str | None,
    typer.Option(
        "--tracking-uri",
        envvar="MLFLOW_TRACKING_URI",
        callback=_from_job_file("MLFLOW_TRACKING_URI"),
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
