"""The rows and target features of a ``draft_train`` trial's two stages, and its draft vocabulary.

Pretraining rows come from the builtin mix (ShareGPT's pretrain split + the Python stdlib, packed
in RAM, ~10M tokens) or, with ``pretrain.corpus``, from memory-mapped token shards
(:mod:`workloads.data.shards`); SFT rows are ShareGPT chats (with the target's own replies by
default). Features are cached on disk (:func:`workloads.training.feature_cache.ensure_features`,
shared by every trial with the same target, corpus, sequence length and packing) or computed online
in each training step (:class:`workloads.training.online_features.OnlineFeatures`), as
``features.mode`` says (:func:`workloads.training.feature_mode.resolve_feature_mode`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from workloads.data import (
    Conversation,
    InMemoryRows,
    PackedRows,
    RowSource,
    corpus_fingerprint,
    read_sharegpt,
    split_conversations,
)
from workloads.draft_train.config import DraftTrainConfig
from workloads.models.fusion import folder_mark, resolve_layers
from workloads.models.target import Target
from workloads.result import Progress
from workloads.training import rows as _rows
from workloads.training.feature_cache import ensure_features, feature_dir
from workloads.training.feature_mode import resolve_feature_mode
from workloads.training.features import FeatureSet, LazyRows, tokenizer_fingerprint
from workloads.training.online_features import OnlineFeatures, TargetSpec
from workloads.training.regenerate import (
    RegenSettings,
    ReplyGenerator,
    ResponseRegenerator,
    recipe_of,
    regen_cache_file,
)

log = logging.getLogger(__name__)

CHUNK_TOKENS = 4096
"""tokens per feature-cache chunk (rows per chunk = this // seq_len, at least 1)"""


@functools.lru_cache(maxsize=1)
def splits() -> dict[str, list[Conversation]]:
    """ShareGPT's pretrain / sft / heldout splits (read once per process)."""
    convs, stats = read_sharegpt()
    log.info(
        "ShareGPT: %d complete objects, %d conversations kept (truncated tail: %s)",
        stats.objects,
        stats.conversations,
        stats.truncated,
    )
    return split_conversations(convs)


@functools.lru_cache(maxsize=2)
def _tokenizer_fp(name: str, tokenizer: object) -> str:
    return tokenizer_fingerprint(tokenizer)


def tokenizer_id(target: Target) -> str:
    """The target tokenizer's fingerprint (computed once per process and target)."""
    return _tokenizer_fp(target.name, target.tokenizer)


def target_spec(cfg: DraftTrainConfig, cache_dir: Path, device: torch.device) -> TargetSpec:
    """How a process (this one, or a training worker) loads the trial's target."""
    return TargetSpec(
        name=cfg.target.model,
        cache_dir=cache_dir,
        dtype=cfg.target.dtype,
        weights=cfg.target.weights,
        device_map=cfg.target.device_map,
        seed=cfg.seed,
        device=device.type,
    )


ReplySource = Callable[[RegenSettings], ReplyGenerator]
"""Makes the :class:`ReplyGenerator` of ``sft.regen_engine`` (other than ``engine``) for the
settings (the workload builds it; training may not import the serving environment)."""


def _regenerator(
    cfg: DraftTrainConfig,
    target: Target,
    cache_dir: Path,
    say: Progress,
    replies: ReplySource | None,
) -> ResponseRegenerator | None:
    """The target's own SFT replies (``sft.responses: target``), or None for the dataset's."""
    sft = cfg.sft
    if sft.responses != "target":
        return None
    settings = RegenSettings(
        max_new_tokens=sft.regen_reply_tokens,
        temperature=sft.regen_temperature,
        max_prompt_tokens=sft.seq_len - sft.regen_reply_tokens,
        engine=sft.regen_engine,
    )
    if sft.regen_engine != "engine" and replies is None:
        raise ValueError(f"sft.regen_engine {sft.regen_engine!r} needs a reply source")
    cache_file = regen_cache_file(
        cache_dir,
        target=_target_key(cfg),
        dtype=_dtype_name(cfg, None),
        tokenizer_fp=tokenizer_id(target),
        conversation_ids=[c.id for c in _rows.sft_order(splits()["sft"])],
        settings=settings,
    )
    return ResponseRegenerator(
        target.model,
        target.tokenizer,
        target.eos_token_ids,
        cache_file=cache_file,
        settings=settings,
        progress=say,
        generator=replies(settings) if sft.regen_engine != "engine" and replies else None,
        recipe=recipe_of(regen_target_key(cfg), _dtype_name(cfg, None), settings),
    )


def regen_target_key(cfg: DraftTrainConfig) -> str:
    """The target in the regenerated replies' recipe (:func:`recipe_of`): the cache key's
    target name, then ``-<dtype>`` unless float32 or auto (as ``workloads.draft_train.cost`` names
    it)."""
    t = cfg.target.dtype
    return _target_key(cfg) + ("" if t in ("float32", "auto") else f"-{t}")


def fusion_layers(cfg: DraftTrainConfig, target: Target) -> tuple[int, ...]:
    """The target layers the trial's draft fuses (``draft.fusion``; () = none), resolved
    against the loaded target (:func:`workloads.models.fusion.resolve_layers`)."""
    layers = int(target.model.config.num_hidden_layers)
    return resolve_layers(cfg.draft.fusion, cfg.draft.fusion_layers, layers)


def _target_key(cfg: DraftTrainConfig) -> str:
    """The target's name in cache keys: random weights are their own target, per seed."""
    t = cfg.target
    return t.model if t.weights == "pretrained" else f"{t.model}@random-seed{cfg.seed}"


def _dtype_name(cfg: DraftTrainConfig, target: Target | None) -> str:
    """``target.dtype`` as configured; ``auto`` resolved by the loaded target's weights (so the
    features of a bfloat16 GPU run and a float32 CPU run are never mixed)."""
    if cfg.target.dtype != "auto" or target is None:
        return cfg.target.dtype
    return str(target.model.dtype).removeprefix("torch.")


@dataclass
class StageData:
    """One stage's feature set, its row source, the mode used and its metrics."""

    feats: FeatureSet
    rows: RowSource
    mode: str
    metrics: dict[str, float]


def _pretrain_rows(
    cfg: DraftTrainConfig, target: Target, cache_dir: Path, n_rows: int, say: Progress
) -> tuple[RowSource, str]:
    """Pretraining rows (at least ``n_rows``) and the corpus recipe that keys their features."""
    p = cfg.pretrain
    if p.corpus is not None and n_rows == 0:  # SFT only: the corpus is not even opened
        empty = torch.zeros(0, p.seq_len, dtype=torch.long)
        return InMemoryRows(PackedRows(empty, empty.bool(), empty.clone())), "corpus-unread"
    if p.corpus is not None:
        from workloads.data.shards import corpus_recipe, corpus_rows

        fp = tokenizer_id(target)
        rows = corpus_rows(
            p.corpus,
            target.tokenizer,
            tokenizer_fp=fp,
            cache_dir=cache_dir,
            seq_len=p.seq_len,
            packing=p.packing,
            n_rows=n_rows,
            repeat=p.repeat,
            progress=say,
        )
        return rows, "corpus-" + corpus_recipe(p.corpus, fp)
    build = functools.partial(
        _rows.pretrain_rows,
        target.tokenizer,
        splits()["pretrain"],
        dict(p.mix),
        p.seq_len,
        packing=p.packing,
    )
    return LazyRows(build, n_rows, p.seq_len), corpus_fingerprint(p.mix, 0)


def stage_data(
    cfg: DraftTrainConfig,
    target: Target,
    spec: TargetSpec,
    cache_dir: Path,
    stage: str,
    tokens: int,
    say: Progress,
    replies: ReplySource | None = None,
) -> StageData:
    """The features of one stage covering ``tokens`` tokens (rounded up to whole rows), cached or
    online as ``features.mode`` decides for this stage's size. ``replies``: what generates the
    SFT replies under ``sft.regen_engine`` other than ``engine``; its server runs only while
    this stage's rows are built (here, also for online features) and is stopped on return.

    Raises:
        ValueError: the corpus is smaller than the budget (``CorpusTooSmall``, both sizes), the
            SFT split is too small, or a cached feature folder describes other features.
    """
    seq_len = cfg.pretrain.seq_len if stage == "pretrain" else cfg.sft.seq_len
    packing = cfg.pretrain.packing
    n_rows = -(-tokens // seq_len)
    f = cfg.features
    layers = fusion_layers(cfg, target)
    mode = resolve_feature_mode(
        f.mode,
        tokens=n_rows * seq_len,
        hidden=target.hidden_size * (len(layers) + 1),
        max_cache_gb=f.max_cache_gb,
    )
    per_chunk = max(1, CHUNK_TOKENS // seq_len)
    whole = -(-n_rows // per_chunk) * per_chunk if mode == "cached" else n_rows
    regen = None
    rows: RowSource
    if stage == "pretrain":
        rows, recipe = _pretrain_rows(
            cfg, target, cache_dir, whole if cfg.pretrain.corpus is None else n_rows, say
        )
    else:
        recipe = corpus_fingerprint({"sharegpt": 1.0}, 0) + "-sft"
        regen = _regenerator(cfg, target, cache_dir, say, replies) if tokens else None
        if regen is not None:  # the replies' recipe: its cache file's key
            recipe += "-regen" + regen.cache_file.stem[:8]
        build = functools.partial(
            _rows.sft_rows,
            target.tokenizer,
            splits()["sft"],
            seq_len,
            packing=packing,
            regenerator=regen,
        )
        rows = LazyRows(build, whole, seq_len)
    try:
        metrics: dict[str, float] = {f"features/{stage}_online": float(mode == "online")}
        if mode == "online":
            if regen is not None and regen.generator is not None:
                rows.packed(torch.arange(1))  # the replies now, while the server is up
            feats: FeatureSet = OnlineFeatures(rows, spec, model=target.model, layers=layers)
            return StageData(feats, rows, mode, metrics)
        folder, manifest = _cache_identity(cfg, target, cache_dir, stage, recipe, seq_len, layers)
        feats, stats = ensure_features(
            folder,
            rows=rows,
            n_rows=n_rows,
            rows_per_chunk=per_chunk,
            target_model=target.model,
            manifest=manifest,
            layers=layers,
        )
        metrics |= {
            f"features/{stage}_hits": stats.hits,
            f"features/{stage}_misses": stats.misses,
            f"features/{stage}_rebuilt": stats.rebuilt,
            f"wall_s/features_{stage}": stats.build_s,
        }
        if regen is not None and (regen.stats.generated or regen.stats.cached):  # chunks built
            r = regen.stats
            metrics |= {
                "wall_s/regenerate": r.seconds,
                "sft.regen_generated": r.generated,
                "sft.regen_cached": r.cached,
                "sft.regen_tokens": r.tokens,
                "sft.regen_skipped": r.skipped,
            }
            metrics[f"wall_s/features_{stage}"] = stats.build_s - r.seconds
        return StageData(feats, rows, mode, metrics)
    finally:
        if regen is not None:
            regen.close()


def _cache_identity(
    cfg: DraftTrainConfig,
    target: Target,
    cache_dir: Path,
    stage: str,
    recipe: str,
    seq_len: int,
    layers: tuple[int, ...],
) -> tuple[Path, dict[str, object]]:
    """The feature folder of a stage's cached features and the manifest that names them (the
    corpus ``recipe``, rows of ``seq_len``, the fused target ``layers``)."""
    packing = cfg.pretrain.packing
    dtype = _dtype_name(cfg, target)
    folder = feature_dir(
        cache_dir,
        target=_target_key(cfg) + ("" if dtype in ("float32", "auto") else f"-{dtype}"),
        stage=stage,
        recipe=(recipe if packing == "joined" else f"{recipe}-isolated") + folder_mark(layers),
        seq_len=seq_len,
    )
    manifest: dict[str, object] = {
        "target": _target_key(cfg),
        "dtype": dtype,
        "stage": stage,
        "recipe": recipe,
        "seq_len": seq_len,
        "tokenizer": tokenizer_id(target),
        "hidden": (f"hidden_states{list(layers)}+" if layers else "") + "last_hidden_state:float16",
        "packing": packing,
    }
    return folder, manifest


def count_ids(rows: RowSource, n_rows: int, vocab: int, block: int = 1024) -> torch.Tensor:
    """[vocab] long: how often each target id occurs in the first ``n_rows`` rows, read in blocks
    of ``block`` rows (never all the ids at once)."""
    counts = torch.zeros(vocab, dtype=torch.long)
    for lo in range(0, min(n_rows, rows.rows), block):
        ids = rows.packed(torch.arange(lo, min(lo + block, n_rows, rows.rows))).input_ids
        counts += torch.bincount(ids.flatten(), minlength=vocab)[:vocab]
    return counts


def draft_vocab(
    cfg: DraftTrainConfig,
    target: Target,
    cache_dir: Path,
    pre: StageData,
    sft: StageData,
    say: Progress,
) -> torch.Tensor | None:
    """The ``draft.vocab_size`` most frequent target ids (ties by id), sorted, or None = the full
    vocabulary (EAGLE-3-style truncation, arXiv 2503.01840 Sec. 3).

    Counted over the trial's own pretraining rows, or the first ``draft.vocab_tokens`` tokens of
    the same stream (tokenised only, no features), and the SFT rows.
    """
    size, vocab = cfg.draft.vocab_size, int(target.model.config.vocab_size)
    if size == 0 or size >= vocab:
        return None
    seq_len = cfg.pretrain.seq_len
    pre_rows, n_pre = pre.rows, pre.feats.rows
    if cfg.draft.vocab_tokens is not None:
        n_pre = -(-cfg.draft.vocab_tokens // seq_len)
        pre_rows, _ = (
            _pretrain_rows(cfg, target, cache_dir, n_pre, say) if n_pre else (pre_rows, "")
        )
    counts = count_ids(sft.rows, sft.feats.rows, vocab)
    if n_pre:
        counts += count_ids(pre_rows, n_pre, vocab)
    order = torch.argsort(-counts * vocab + torch.arange(vocab))  # count desc, id asc
    return order[:size].sort().values
