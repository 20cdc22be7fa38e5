"""What a trial runs: target loading, data, feature cache, draft model, training, tree decoding.

A workload knows nothing of SQL, MLflow or Ray: config in, metrics and artifacts out. Nothing is
imported here, so the torch modules load without pydantic (the GPU check's machine has only
torch and transformers): import them directly, ``workloads.draft_train.run``,
``workloads.engine.tree_decode.speculative_generate``, ``workloads.models.draft.DraftModel``,
``workloads.models.target.load_target``; ``DraftTrainConfig`` and ``Resources`` are loaded from
``workloads.config`` on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DraftTrainConfig", "Resources"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from workloads import config

        return getattr(config, name)
    raise AttributeError(f"module 'workloads' has no attribute {name!r}")
