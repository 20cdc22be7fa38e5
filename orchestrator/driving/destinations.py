"""Where a sweep runs and writes: the CLI's destination options as one value, read by the
services (:mod:`orchestrator.driving.service`) and the guards (:mod:`.guards`) alike."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.driving.runner import RunPaths
from orchestrator.tracking.tracker import default_tracking_uri


@dataclass(frozen=True)
class Destinations:
    """Where a sweep runs and writes (the CLI's ``--run-root``, ``--cache-dir``, ``--db-url``,
    ``--tracking-uri``, ``--address``); ``run_root`` absolute."""

    run_root: Path
    db_url: str | None = None
    tracking_uri: str | None = None
    address: str | None = None
    cache_dir: Path | None = None

    @property
    def paths(self) -> RunPaths:
        """The run root and the shared cache (default ``<run root>/cache``)."""
        return RunPaths(
            run_root=self.run_root,
            cache_dir=(self.cache_dir or self.run_root / "cache").resolve(),
        )

    @property
    def tracking(self) -> str:
        """The MLflow tracking URI (default: SQLite under the run root)."""
        return self.tracking_uri or default_tracking_uri(self.run_root)
