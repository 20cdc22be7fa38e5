"""Draft training: rows, target features, the two stages, workers, regeneration, checkpoints,
and the evaluation of a trained draft.

``stage_data`` (a trial's rows and features), ``rows`` (packed rows of both stages),
``features`` / ``feature_cache`` / ``online_features`` (the target's hidden states, cached on disk
or computed in the step), ``feature_mode`` (which of the two, torch-free), ``loop`` (one stage's
training loop and losses), ``stages`` (checkpointed stages, wsd-fork trunks), ``distributed``
(data-parallel and ZeRO workers), ``regenerate`` (SFT replies by the target), ``checkpoint``,
``corpus_check`` (submit-time corpus check) and ``evaluation`` (acceptance length and the lossless
check on held-out prompts).

May import: ``workloads.config``, ``workloads.result``, ``workloads.data``,
``workloads.models``, ``workloads.engine``, ``workloads.roofline``. Nothing is imported here.
"""
