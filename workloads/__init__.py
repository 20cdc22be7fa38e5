"""What a trial runs: target loading, data, feature cache, draft model, training, tree decoding.

A workload knows nothing of SQL, MLflow or Ray: config in, metrics and artifacts out. Each
workload is a package (``draft_train/``, ``decode_bench/``, ``serving/``, ``sleep/``) and
:mod:`workloads.registry` the table of them. Nothing is imported here, so the torch modules load
without pydantic (the GPU check's machine has only torch and transformers): import them
directly, ``workloads.draft_train.run.run``, ``workloads.engine.tree_decode.speculative_generate``,
``workloads.models.draft.DraftModel``, ``workloads.models.target.load_target``;
``DraftTrainConfig`` and ``Resources`` are loaded from their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {"DraftTrainConfig": "workloads.draft_train.config", "Resources": "workloads.config"}
__all__ = ["DraftTrainConfig", "Resources"]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'workloads' has no attribute {name!r}")
