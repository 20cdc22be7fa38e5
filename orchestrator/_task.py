"""The Ray task that runs one trial (private): workload in, MLflow child run filled, result out.

Runs in a Ray worker. It talks to MLflow through :class:`~orchestrator.tracking.Tracker`
(``MlflowClient`` with the explicit child run id) and returns metrics and series to the driver,
which owns the SQL store.
"""

from __future__ import annotations

import functools
import logging
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.tracking import Tracker


@dataclass
class TaskOutcome:
    """What a trial task returns: metrics and series on success, else the error and traceback."""

    ok: bool
    metrics: dict[str, float] = field(default_factory=dict)
    series: dict[str, list[float]] = field(default_factory=dict)
    error: str | None = None
    traceback: str | None = None


def _say(log: logging.Logger, trial_key: str, msg: str) -> None:
    log.info("%s: %s", trial_key, msg)


def run_trial(
    *,
    workload: str,
    config_json: dict[str, Any],
    tracker: Tracker,
    run_id: str,
    trial_key: str,
    cache_dir: str,
    out_dir: str,
    run_root: str,
    threads: int,
    resources: dict[str, Any] | None = None,
) -> TaskOutcome:
    """Run one trial and log it to its MLflow child run; never raises for a trial error.

    A Python error inside the workload is returned as a failed outcome (recorded, not retried)
    unless ``resources["retry_exceptions"]``: then it is raised for Ray to retry, and the driver
    records the last attempt's error. A dying worker or node is retried by Ray.
    ``resources`` (the spec's, as JSON) are shared by a draft_train trial's training workers.
    """
    import torch

    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", force=True)
    for noisy in ("transformers", "mlflow", "httpx", "filelock", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    torch.set_num_threads(max(1, threads))
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    from workloads import decode_bench, draft_train
    from workloads.config import DecodeBenchConfig, DraftTrainConfig, Resources

    log = logging.getLogger("trial")
    try:
        say = functools.partial(_say, log, trial_key)
        if workload == "draft_train":
            result = draft_train.run(
                DraftTrainConfig.model_validate(config_json),
                cache_dir=Path(cache_dir),
                out_dir=Path(out_dir),
                progress=say,
                resources=Resources.model_validate(resources or {}),
            )
        elif workload == "decode_bench":
            result = decode_bench.run(
                DecodeBenchConfig.model_validate(config_json),
                cache_dir=Path(cache_dir),
                out_dir=Path(out_dir),
                run_root=Path(run_root),
                progress=say,
            )
        elif workload == "sleep":
            from workloads import sleep

            result = sleep.run(
                sleep.SleepConfig.model_validate(config_json), out_dir=Path(out_dir), progress=say
            )
        else:
            raise ValueError(f"unknown workload {workload!r}")
    except Exception as exc:  # noqa: BLE001 - every trial error is recorded, the sweep goes on
        tb = traceback.format_exc()
        (Path(out_dir)).mkdir(parents=True, exist_ok=True)
        tb_path = Path(out_dir) / "traceback.txt"
        tb_path.write_text(tb)
        try:
            tracker.log_artifact(run_id, tb_path)
        except Exception:  # noqa: BLE001 - MLflow trouble must not hide the trial's error
            log.warning("could not upload the traceback to MLflow", exc_info=True)
        if (resources or {}).get("retry_exceptions"):
            raise  # Ray retries the task (resources.retry_exceptions, up to max_retries)
        return TaskOutcome(ok=False, error=f"{type(exc).__name__}: {exc}", traceback=tb)
    tracker.log_metrics(run_id, result.metrics)
    for name, values in result.series.items():
        tracker.log_series(run_id, name, values)
    for path in result.artifact_paths:
        if path.exists():
            tracker.log_artifact(run_id, path)
    return TaskOutcome(ok=True, metrics=result.metrics, series=result.series)
