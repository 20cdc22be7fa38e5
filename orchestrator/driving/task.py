"""The Ray task that runs one trial (private): a typed config in, the workload's result out.

Runs in a Ray worker. It writes only the trial's own folder under the run root; the driver
records what it returns in SQL, then MLflow (:mod:`orchestrator.tracking.mirror`), so a worker on
another node needs no connection to either.
"""

from __future__ import annotations

import functools
import logging
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from workloads.config import Resources
from workloads.protocol import TrialContext
from workloads.registry import get_workload


@dataclass
class TaskOutcome:
    """What a trial task returns: metrics, series and artifact paths on success, else the error
    and traceback (the traceback file is among the artifacts when it could be written)."""

    ok: bool
    metrics: dict[str, float] = field(default_factory=dict)
    series: dict[str, list[float]] = field(default_factory=dict)
    error: str | None = None
    traceback: str | None = None
    artifacts: list[Path] = field(default_factory=list)


def _say(log: logging.Logger, trial_key: str, msg: str) -> None:
    log.info("%s: %s", trial_key, msg)


def run_trial(
    *,
    workload: str,
    config: BaseModel,
    trial_key: str,
    cache_dir: str,
    out_dir: str,
    run_root: str,
    threads: int,
    resources: Resources,
) -> TaskOutcome:
    """Run one trial of ``workload`` (a registry name) on its typed ``config``; never raises
    for a trial error.

    A Python error inside the workload is returned as a failed outcome (recorded, not retried)
    unless ``resources.retry_exceptions``: then it is raised for Ray to retry, and the driver
    records the last attempt's error. A dying worker or node is retried by Ray.
    ``resources`` (the spec's) are shared by a draft_train trial's training workers.
    """
    import torch

    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", force=True)
    for noisy in ("transformers", "mlflow", "httpx", "filelock", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    torch.set_num_threads(max(1, threads))
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    log = logging.getLogger("trial")
    out = Path(out_dir)
    ctx = TrialContext(
        cache_dir=Path(cache_dir),
        out_dir=out,
        run_root=Path(run_root),
        progress=functools.partial(_say, log, trial_key),
        resources=resources,
    )
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "traceback.txt").unlink(missing_ok=True)  # an earlier attempt's, now stale
        result = get_workload(workload).run(config, ctx)
    except Exception as exc:  # noqa: BLE001 - every trial error is recorded, the sweep goes on
        tb = traceback.format_exc()
        artifacts: list[Path] = []
        try:
            out.mkdir(parents=True, exist_ok=True)
            (out / "traceback.txt").write_text(tb)
            artifacts.append(out / "traceback.txt")
        except OSError:
            log.warning("could not write the traceback to %s", out, exc_info=True)
        if resources.retry_exceptions:
            raise  # Ray retries the task (resources.retry_exceptions, up to max_retries)
        error = f"{type(exc).__name__}: {exc}"
        return TaskOutcome(ok=False, error=error, traceback=tb, artifacts=artifacts)
    return TaskOutcome(
        ok=True,
        metrics=result.metrics,
        series=result.series,
        artifacts=list(result.artifact_paths),
    )
