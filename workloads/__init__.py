"""What a trial runs: target loading, data, feature cache, draft model, training, tree decoding.

A workload knows nothing of SQL, MLflow or Ray: config in, metrics and artifacts out. Only the
configuration is imported here (cheap); import the torch modules directly:
``workloads.draft_train.run``, ``workloads.tree_decode.speculative_generate``,
``workloads.draft_model.DraftModel``, ``workloads.target.load_target``.
"""

from workloads.config import DraftTrainConfig, Resources

__all__ = ["DraftTrainConfig", "Resources"]
