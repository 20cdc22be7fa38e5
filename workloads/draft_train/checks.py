"""The checks of a ``draft_train`` sweep at submit, before anything is written: the device, the
draft's vocabulary and fused layers against the target, the prompt sets, chat templates, the
serving environment for replies regenerated in vLLM, the SFT and pretraining budgets against
their data, the evaluation prompts against the target's positions, the cached features against
the disk. Each raises :class:`~workloads.config.ConfigError` naming the field at fault and a fix.

The field rules of one config are validators on
:class:`~workloads.draft_train.config.DraftTrainConfig`; these need the machine, the target or
the whole sweep. Heavy modules are imported inside them.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from workloads.checks import PromptJob, check_prompt_jobs, check_targets
from workloads.config import ConfigError
from workloads.draft_train.config import DraftTrainConfig
from workloads.draft_train.describe import gib_text, target_hidden_size
from workloads.protocol import Preflight
from workloads.training.feature_mode import feature_gib, resolve_feature_mode


def check_chat_templates(configs: Sequence[DraftTrainConfig], _run_root: Path, **_: object) -> None:
    """SFT renders chats with the target's chat template, or a base model's with the plain
    template that ends replies with EOS: a target with neither is refused.

    Raises:
        ConfigError: blaming ``target.model``.
    """
    from workloads.models.target_source import check_chat_template

    pretrained = (c for c in configs if c.target.weights == "pretrained")  # random: builtin's
    for name in sorted({c.target.model for c in pretrained if c.sft.tokens > 0}):
        try:
            check_chat_template(name)
        except ValueError as exc:
            raise ConfigError(str(exc), ("target", "model")) from exc


def check_devices(configs: Sequence[DraftTrainConfig], _run_root: Path, **_: object) -> None:
    """``device: cuda`` needs a CUDA GPU that torch sees on this machine (as decode_bench's).

    Raises:
        ConfigError: blaming ``device``.
    """
    if not any(c.device == "cuda" for c in configs):
        return  # auto and cpu always resolve; no need to import torch
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(
            "device 'cuda' asked for but torch sees no CUDA GPU on this machine. Fix: device: "
            "auto (CUDA when present, else the CPU), or submit from a machine with a GPU",
            ("device",),
        )


def check_corpora(
    configs: Sequence[DraftTrainConfig],
    run_root: Path,
    *,
    cache_dir: Path | None = None,
    dry_run: bool = False,
) -> None:
    """Each pretraining corpus can be read and each budget fits it (see
    :mod:`workloads.training.corpus_check`: exact up to 20M tokens, an upper bound above; the
    trials' cache keeps what was tokenised once the sweep is accepted; a dry run writes nothing).

    Raises:
        ConfigError: a budget over its corpus blaming ``pretrain.tokens``, with both sizes and
            the fix; a corpus that cannot be read (a missing file, a file that is not UTF-8, a
            record of another type) blaming ``pretrain.corpus``.
    """
    from workloads.training.corpus_check import BudgetTooLarge, check_budget, check_sources

    cache = cache_dir or run_root / "cache"
    biggest: dict[str, DraftTrainConfig] = {}
    for c in configs:  # the largest budget per corpus: smaller ones are its prefixes
        key = c.pretrain.model_dump_json(exclude={"tokens", "lr", "schedule", "decay_frac"})
        key += c.target.model_dump_json()
        if key not in biggest or c.pretrain.tokens > biggest[key].pretrain.tokens:
            biggest[key] = c
    for c in biggest.values():
        try:
            check_sources(c.pretrain.corpus or [])
            check_budget(c, cache, dry_run=dry_run)
        except BudgetTooLarge as exc:
            raise ConfigError(str(exc), ("pretrain", "tokens")) from exc
        except ValueError as exc:
            raise ConfigError(str(exc), ("pretrain", "corpus")) from exc


def check_sft_budgets(configs: Sequence[DraftTrainConfig], _run_root: Path, **_: object) -> None:
    """Each ``sft.tokens`` fits the SFT split (an upper bound from its bytes, see
    :func:`workloads.training.corpus_check.check_sft_budget`; nothing is tokenised).

    Raises:
        ConfigError: blaming ``sft.tokens``, with both sizes and the fix.
    """
    from workloads.training.corpus_check import check_sft_budget

    biggest: dict[str, DraftTrainConfig] = {}
    for c in configs:  # the largest budget per reply recipe and row length
        key = c.sft.model_dump_json(exclude={"tokens", "epochs", "lr"})
        if key not in biggest or c.sft.tokens > biggest[key].sft.tokens:
            biggest[key] = c
    for c in biggest.values():
        try:
            check_sft_budget(c)
        except ValueError as exc:
            raise ConfigError(str(exc), ("sft", "tokens")) from exc


def check_prompt_sets(configs: Sequence[DraftTrainConfig], _run_root: Path, **_: object) -> None:
    """``eval.prompt_sets`` names builtin sets, directories of ``*.jsonl`` files or both
    mixed, each directory there and no two sets of one name (as ``decode_bench``'s
    ``prompts.prompt_sets`` is checked).

    Raises:
        ConfigError: blaming ``eval.prompt_sets``, with the known names.
    """
    from workloads.data.prompts import check_prompt_spec

    for spec in {repr(c.eval.prompt_sets): c.eval.prompt_sets for c in configs}.values():
        try:
            check_prompt_spec(spec, field="eval.prompt_sets")
        except ValueError as exc:
            raise ConfigError(str(exc), ("eval", "prompt_sets")) from exc


def check_eval_prompts(
    configs: Sequence[DraftTrainConfig],
    run_root: Path,
    *,
    cache_dir: Path | None = None,
    **_: object,
) -> None:
    """Every evaluation prompt fits the target: its tokens (chat template included),
    ``eval.max_new_tokens`` and the tree's ``eval.depth`` within the target's
    ``max_position_embeddings``.

    Raises:
        ConfigError: blaming ``eval.prompt_sets``, naming the prompt, the sizes and the fix.
    """
    jobs = [
        PromptJob(
            c.target.model,
            c.target.weights,
            c.eval.prompt_sets,
            c.eval.num_prompts,
            False,
            c.eval.max_new_tokens,
            c.eval.depth,
            "eval",
            "eval.max_new_tokens",
        )  # fmt: skip
        for c in configs
    ]
    check_prompt_jobs(jobs, cache_dir or run_root / "cache")


def check_feature_disks(
    configs: Sequence[DraftTrainConfig],
    run_root: Path,
    *,
    cache_dir: Path | None = None,
    **_: object,
) -> None:
    """The cached features fit the free disk of the cache
    (:func:`check_feature_disk`).

    Raises:
        ConfigError: blaming ``features.mode``, with both sizes and the fix.
    """
    check_feature_disk(configs, cache_dir or run_root / "cache")


def check_tree_vocab(configs: Sequence[DraftTrainConfig], _run_root: Path, **_: object) -> None:
    """``eval.topk`` is at most a truncated draft vocabulary (``draft.vocab_size``), and a
    ``draft.vocab_size`` at or above the target's vocabulary (where it is known) is refused:
    0 is the whole vocabulary.

    Raises:
        ConfigError: blaming ``eval.topk`` (and ``draft.vocab_size``), with both values.
    """
    from workloads.models.target_source import target_vocab_size

    for c in configs:
        n, topk = c.draft.vocab_size, c.eval.topk
        vocab = target_vocab_size(c.target.model, weights=c.target.weights) if n else None
        if vocab is not None and n >= vocab:
            raise ConfigError(
                f"draft.vocab_size {n} is not below the target's vocabulary ({vocab}): it would "
                "run as the whole vocabulary under another trial key than 0. Fix: "
                f"draft.vocab_size: 0 (the whole vocabulary), or a size below {vocab}",
                ("draft", "vocab_size"),
            )
        if 0 < n < topk:
            raise ConfigError(
                f"eval.topk {topk} is larger than the draft vocabulary (draft.vocab_size {n}): "
                f"each tree node takes its {topk} most likely draft tokens, so every trial "
                f"would fail at evaluation, after training. Fix: eval.topk <= {n}, or "
                f"draft.vocab_size >= {topk} (0 = the target's whole vocabulary)",
                ("eval", "topk"),
                ("draft", "vocab_size"),
            )


def check_fusion_layers(configs: Sequence[DraftTrainConfig], _run_root: Path, **_: object) -> None:
    """``draft.fusion_layers`` are layers of the target (where its layer count is known
    without loading it: :func:`~workloads.models.target_source.target_num_layers`).

    Raises:
        ConfigError: blaming ``draft.fusion_layers``, with the target's layer count and a fix.
    """
    from workloads.models.fusion import resolve_layers
    from workloads.models.target_source import target_num_layers

    for c in configs:
        d = c.draft
        if d.fusion == "none" or d.fusion_layers is None:
            continue
        try:
            resolve_layers(d.fusion, d.fusion_layers,
                           target_num_layers(c.target.model, weights=c.target.weights))  # fmt: skip
        except ValueError as err:
            raise ConfigError(str(err), ("draft", "fusion_layers")) from None


def check_regen_engine(configs: Sequence[DraftTrainConfig], _run_root: Path, **_: object) -> None:
    """``sft.regen_engine: vllm``: the serving environment and a target vLLM can load
    (:func:`workloads.serving.checks.check_regen_configs`).

    Raises:
        ConfigError: blaming ``sft.regen_python`` or ``target.*``, with the fix.
    """
    if not any(c.sft.regen_engine == "vllm" for c in configs):
        return  # no need to import the serving checks
    from workloads.serving.checks import check_regen_configs

    check_regen_configs(configs)


def _cached_gib(cache_dir: Path, cfg: DraftTrainConfig, stage: str, seq_len: int) -> float:
    """GiB already in the largest feature folder of this target, stage and sequence length
    under ``cache_dir`` (the corpus recipe is not known before the trial: the largest folder
    is counted, so the disk check errs towards passing)."""
    from workloads.training.feature_cache import feature_dir

    t = cfg.target
    key = t.model if t.weights == "pretrained" else f"{t.model}@random-seed{cfg.seed}"
    key += "" if t.dtype in ("float32", "auto") else f"-{t.dtype}"
    parent = feature_dir(cache_dir, target=key, stage=stage, recipe="x", seq_len=seq_len).parent
    sizes = [
        sum(f.stat().st_size for f in d.glob("chunk-*"))
        for d in parent.glob(f"{stage}-*-L{seq_len}")
    ]
    return max(sizes, default=0) / 2**30


def check_feature_disk(configs: Sequence[DraftTrainConfig], cache_dir: Path) -> None:
    """Refuse a sweep whose cached features (the stages
    :func:`~workloads.training.feature_mode.resolve_feature_mode` caches, the largest budget per
    target, stage and sequence length, less what is cached already) need more disk than is free
    under ``cache_dir``, before a trial fills the disk.

    Raises:
        ConfigError: blaming ``features.mode``, with both sizes and the fix.
    """
    need: dict[tuple[str, str, int], tuple[float, DraftTrainConfig]] = {}
    hidden_of: dict[str, int | None] = {}
    for c in configs:
        base = hidden_of.setdefault(c.target.model, target_hidden_size(c.target.model))
        if base is None:
            continue  # not known before the trial loads the target
        hidden = base * c.draft.feature_copies  # hidden fusion: wider features
        for stage, tokens, seq_len in (
            ("pretrain", c.pretrain.tokens, c.pretrain.seq_len),
            ("sft", c.sft.tokens, c.sft.seq_len),
        ):
            mode = resolve_feature_mode(
                c.features.mode, tokens=tokens, hidden=hidden, max_cache_gb=c.features.max_cache_gb
            )
            key = (c.target.model + c.target.weights + c.target.dtype + str(c.draft.fusion_layers)
                   + c.draft.fusion, stage, seq_len)  # fmt: skip
            gib = feature_gib(tokens, hidden)
            if tokens and mode == "cached" and gib > need.get(key, (0.0, c))[0]:
                need[key] = (gib, c)
    if not need:
        return
    missing = sum(
        max(0.0, gib - _cached_gib(cache_dir, c, stage, seq_len))
        for (_, stage, seq_len), (gib, c) in need.items()
    )
    existing = next(p for p in (cache_dir, *cache_dir.resolve().parents) if p.exists())
    free = shutil.disk_usage(existing).free / 2**30
    if missing <= free:
        return
    raise ConfigError(
        f"features.mode: the sweep caches target features of {gib_text(missing)} not cached yet "
        f"under {cache_dir}, but its disk has {gib_text(free)} free. Fix: features.mode: online "
        "(computed in each training step, nothing on disk), a smaller features.max_cache_gb "
        "(auto goes online above it), or --cache-dir on a disk with room",
        ("features", "mode"),
    )


CHECKS: tuple[Preflight, ...] = (
    check_targets,
    check_devices,
    check_tree_vocab,
    check_fusion_layers,
    check_prompt_sets,
    check_chat_templates,
    check_regen_engine,
    check_sft_budgets,
    check_corpora,
    check_eval_prompts,
    check_feature_disks,
)
"""the checks of a ``draft_train`` sweep at submit, in the order they run"""
