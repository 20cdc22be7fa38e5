"""Workload ``draft_train``: pretrain a draft on T tokens, SFT it, measure acceptance length.

Config in (:class:`~workloads.config.DraftTrainConfig`), metrics and artifacts out; knows
nothing of SQL, MLflow or Ray, so it runs the same in a test, a Ray task or a notebook.
Source: Scylla (arXiv 2505.07858) Sec. 4 (two-stage training, Thm 1.1 experiment).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import time
from pathlib import Path
from typing import cast

import torch

from workloads import _rows, distributed
from workloads.config import DraftTrainConfig, Resources
from workloads.data import (
    Conversation,
    corpus_fingerprint,
    load_prompt_sets,
    read_sharegpt,
    split_conversations,
)
from workloads.draft_model import DraftArch, DraftModel
from workloads.evaluation import TreeShape, evaluate
from workloads.features import Features, ensure_features, feature_dir, tokenizer_fingerprint
from workloads.regenerate import RegenSettings, ResponseRegenerator, regen_cache_file
from workloads.result import Progress, TrialResult
from workloads.stages import clear_checkpoints, run_stage, run_wsd_fork_pretrain, trunk_key
from workloads.step_cost import measure_step_cost
from workloads.target import Target, load_target
from workloads.training import StageLog, StageSettings

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def _splits() -> dict[str, list[Conversation]]:
    convs, stats = read_sharegpt()
    log.info(
        "ShareGPT: %d complete objects, %d conversations kept (truncated tail: %s)",
        stats.objects,
        stats.conversations,
        stats.truncated,
    )
    return split_conversations(convs)


@functools.lru_cache(maxsize=2)
def _target(name: str, cache_dir: Path, dtype: str) -> Target:
    return load_target(name, cache_dir=cache_dir, dtype=dtype)


def _regenerator(
    cfg: DraftTrainConfig, target: Target, cache_dir: Path, say: Progress
) -> ResponseRegenerator | None:
    """The target's own SFT replies (``sft.responses: target``), or None for the dataset's."""
    sft = cfg.sft
    if sft.responses != "target":
        return None
    settings = RegenSettings(
        max_new_tokens=sft.regen_reply_tokens,
        temperature=sft.regen_temperature,
        max_prompt_tokens=sft.seq_len - sft.regen_reply_tokens,
    )
    cache_file = regen_cache_file(
        cache_dir,
        target=cfg.target.model,
        dtype=cfg.target.dtype,
        tokenizer_fp=_tokenizer_id(target),
        conversation_ids=[c.id for c in _rows.sft_order(_splits()["sft"])],
        settings=settings,
    )
    return ResponseRegenerator(
        target.model,
        target.tokenizer,
        target.eos_token_ids,
        cache_file=cache_file,
        settings=settings,
        progress=say,
    )


def _stage_features(
    cfg: DraftTrainConfig,
    target: Target,
    cache_dir: Path,
    stage: str,
    tokens: int,
    say: Progress,
) -> tuple[Features, dict[str, float]]:
    """Cached features of one stage covering ``tokens`` tokens (rounded up to whole rows)."""
    seq_len = cfg.pretrain.seq_len if stage == "pretrain" else cfg.sft.seq_len
    packing = cfg.pretrain.packing
    n_rows = -(-tokens // seq_len)
    splits = _splits()
    regen = None
    if stage == "pretrain":
        recipe = corpus_fingerprint(cfg.pretrain.mix, 0)
        build = functools.partial(
            _rows.pretrain_rows,
            target.tokenizer,
            splits["pretrain"],
            dict(cfg.pretrain.mix),
            seq_len,
            packing=packing,
        )
    else:
        recipe = corpus_fingerprint({"sharegpt": 1.0}, 0) + "-sft"
        regen = _regenerator(cfg, target, cache_dir, say) if tokens else None
        if regen is not None:  # the replies' recipe: its cache file's key
            recipe += "-regen" + regen.cache_file.stem[:8]
        build = functools.partial(
            _rows.sft_rows, target.tokenizer, splits["sft"], seq_len,
            packing=packing, regenerator=regen,
        )  # fmt: skip
    folder = feature_dir(
        cache_dir,
        target=cfg.target.model,
        stage=stage,
        recipe=recipe if packing == "joined" else f"{recipe}-isolated",
        seq_len=seq_len,
    )
    manifest = {
        "target": cfg.target.model,
        "dtype": cfg.target.dtype,
        "stage": stage,
        "recipe": recipe,
        "seq_len": seq_len,
        "tokenizer": _tokenizer_id(target),
        "hidden": "last_hidden_state:float16",
        "packing": packing,
    }
    feats, stats = ensure_features(
        folder,
        n_rows=n_rows,
        rows_per_chunk=max(1, 4096 // seq_len),
        build_rows=build,
        target_model=target.model,
        manifest=manifest,
    )
    out = {
        f"features/{stage}_hits": stats.hits,
        f"features/{stage}_misses": stats.misses,
        f"features/{stage}_rebuilt": stats.rebuilt,
        f"wall_s/features_{stage}": stats.build_s,
    }
    if regen is not None and (regen.stats.generated or regen.stats.cached):  # chunks built
        r = regen.stats
        out |= {
            "wall_s/regenerate": r.seconds,
            "sft.regen_generated": r.generated,
            "sft.regen_cached": r.cached,
            "sft.regen_tokens": r.tokens,
            "sft.regen_skipped": r.skipped,
        }
        out[f"wall_s/features_{stage}"] = stats.build_s - r.seconds
    return feats, out


@functools.lru_cache(maxsize=2)
def _tokenizer_fp(name: str, tokenizer: object) -> str:
    return tokenizer_fingerprint(tokenizer)


def _tokenizer_id(target: Target) -> str:
    return _tokenizer_fp(target.name, target.tokenizer)


def _draft_vocab(ids: list[torch.Tensor], size: int, vocab: int) -> torch.Tensor | None:
    """The ``size`` most frequent target ids in the token rows ``ids`` (ties by id), or None =
    the full vocabulary (EAGLE-3-style truncation, arXiv 2503.01840 Sec. 3)."""
    if size == 0 or size >= vocab:
        return None
    counts = torch.zeros(vocab, dtype=torch.long)
    for rows in ids:
        if rows.numel():
            counts += torch.bincount(rows.flatten(), minlength=vocab)
    order = torch.argsort(-counts * vocab + torch.arange(vocab))  # count desc, id asc
    return order[:size].sort().values


def _vocab_rows(cfg: DraftTrainConfig, target: Target, pre: Features) -> torch.Tensor:
    """Pretraining token rows the draft vocabulary is counted over: the trial's own rows, or the
    first ``draft.vocab_tokens`` tokens of the same stream (tokenised only, no features)."""
    n_tokens = cfg.draft.vocab_tokens
    if n_tokens is None or not cfg.draft.vocab_size:
        return pre.input_ids
    seq_len = cfg.pretrain.seq_len
    rows = _rows.pretrain_rows(
        target.tokenizer, _splits()["pretrain"], dict(cfg.pretrain.mix), seq_len,
        -(-n_tokens // seq_len), packing=cfg.pretrain.packing,
    )  # fmt: skip
    return rows.input_ids


def _stage(cfg: DraftTrainConfig, stage: str) -> StageSettings:
    t = cfg.train
    lr, epochs = (cfg.pretrain.lr, 1) if stage == "pretrain" else (cfg.sft.lr, cfg.sft.epochs)
    return StageSettings(
        epochs=epochs,
        batch_size=t.batch_size,
        lr=lr,
        warmup_steps=t.warmup_steps,
        weight_decay=t.weight_decay,
        grad_clip=t.grad_clip,
        w_reg=t.w_reg,
        w_cls=t.w_cls,
        seed=cfg.seed,
        feature_noise=t.feature_noise,
    )


def _train(
    cfg: DraftTrainConfig,
    draft: DraftModel,
    feats: dict[str, Features],
    cache_dir: Path,
    out_dir: Path,
    say: Progress,
    m: dict[str, float],
) -> dict[str, StageLog]:
    """Both stages with checkpoints (resume on retry); pretraining by cosine or wsd-fork."""
    ckpt_dir = out_dir / "checkpoints"
    every = cfg.train.checkpoint_every
    logs: dict[str, StageLog] = {}
    for stage in ("pretrain", "sft"):
        t0 = time.perf_counter()
        s = _stage(cfg, stage)
        if stage == "pretrain" and cfg.pretrain.schedule == "wsd-fork" and feats[stage].tokens:
            out = run_wsd_fork_pretrain(
                draft,
                feats[stage],
                s,
                decay_frac=cfg.pretrain.decay_frac,
                trunk_dir=cache_dir / "trunks" / trunk_key(cfg),
                ckpt_dir=ckpt_dir,
                checkpoint_every=every,
                say=say,
            )
            m["pretrain.trunk_steps_reused"] = out.trunk_steps_reused
        else:
            out = run_stage(
                stage, draft, feats[stage], s, ckpt_dir=ckpt_dir, checkpoint_every=every, say=say
            )
        logs[stage] = out.log
        m[f"wall_s/{stage}"] = time.perf_counter() - t0
        m[f"{stage}.tokens_seen"] = out.log.tokens_seen
        m[f"{stage}.tokens_trained"] = out.tokens_trained
        m[f"{stage}.steps"] = len(out.log.loss)
        m[f"{stage}.resumed_from_step"] = out.resumed_from
        wall = m[f"wall_s/{stage}"]
        m[f"{stage}.tokens_per_s"] = out.tokens_trained / wall if out.tokens_trained else math.nan
        say(
            f"{stage}: {len(out.log.loss)} steps, {out.log.tokens_seen} tokens seen, "
            f"{out.tokens_trained} trained here"
        )
    return logs


def _train_on_workers(
    cfg: DraftTrainConfig,
    draft: DraftModel,
    feats: dict[str, Features],
    resources: Resources,
    out_dir: Path,
    say: Progress,
    m: dict[str, float],
) -> dict[str, StageLog]:
    """Both stages on ``cfg.train.workers`` Ray Train workers (see :mod:`workloads.distributed`);
    no checkpoints there: a retried trial trains again from the start."""
    share = distributed.WorkerResources.split(
        resources.num_cpus, resources.num_gpus, cfg.train.workers
    )
    t0 = time.perf_counter()
    done = distributed.train_stages(
        draft,
        [distributed.Stage(name, f, _stage(cfg, name)) for name, f in feats.items()],
        resources=share,
        storage=out_dir / "ray_train",
        deepspeed=cfg.train.deepspeed,
    )
    m["wall_s/train_workers"] = time.perf_counter() - t0
    for stage, r in done.items():
        seen = r.log.tokens_seen
        m[f"wall_s/{stage}"] = r.wall_s
        m[f"{stage}.tokens_seen"] = m[f"{stage}.tokens_trained"] = seen
        m[f"{stage}.steps"] = len(r.log.loss)
        m[f"{stage}.resumed_from_step"] = 0
        m[f"{stage}.tokens_per_s"] = seen / r.wall_s if seen and r.wall_s else math.nan
    say(
        f"trained on {cfg.train.workers} workers in {m['wall_s/train_workers']:.1f} s "
        f"(start-up included): "
        + ", ".join(f"{k} {len(r.log.loss)} steps" for k, r in done.items())
    )
    return {stage: r.log for stage, r in done.items()}


def run(
    cfg: DraftTrainConfig,
    *,
    cache_dir: Path,
    out_dir: Path,
    progress: Progress | None = None,
    resources: Resources | None = None,
) -> TrialResult:
    """Run one trial.

    Args:
        cfg: the trial config.
        cache_dir: shared cache (converted target, target features, greedy references).
        out_dir: this trial's artifact folder (draft weights, per-prompt results).
        progress: called with one-line progress messages.
        resources: the trial's Ray resources, shared by its training workers when
            ``cfg.train.workers > 1`` or ``cfg.train.deepspeed`` is set (default: 1 CPU).

    Returns:
        metrics: ``acceptance_length``, ``acceptance_length/<set>``, ``mismatches``,
        ``near_ties``, losses, wall seconds per phase (training on workers also
        ``wall_s/train_workers``, their start-up included), token counts, ``draft.params``,
        ``tokens_per_s/speculative`` and ``tokens_per_s/greedy``, per stage
        ``tokens_trained`` (this trial's own work; a wsd-fork trunk reused from the cache or a
        checkpoint resumed from is not counted), ``draft.ms_per_step``, ``target.ms_per_step``,
        ``speedup`` (net, from the step costs, see :mod:`workloads.step_cost`); series: per-step
        losses.

    Raises:
        ValueError: a budget larger than the data, a bad prompt-set directory.
    """
    say = progress or (lambda msg: log.info("%s", msg))
    t_start = time.perf_counter()
    result = TrialResult(artifact_paths=[out_dir / "per_prompt.json", out_dir / "draft"])
    m = result.metrics
    target = _target(cfg.target.model, cache_dir, cfg.target.dtype)
    say(f"target {cfg.target.model} ready")
    pre, pre_stats = _stage_features(cfg, target, cache_dir, "pretrain", cfg.pretrain.tokens, say)
    sft, sft_stats = _stage_features(cfg, target, cache_dir, "sft", cfg.sft.tokens, say)
    m.update(pre_stats | sft_stats)
    say(f"features ready: pretrain {pre.tokens} tokens, sft {sft.tokens} tokens")

    model = target.model
    arch = DraftArch.from_target(
        model.config,
        layers=cfg.draft.layers,
        output_norm=cfg.draft.output_norm,
        first_input_norm=cfg.draft.input_norm,
        rope_theta=cfg.draft.rope_theta,
    )
    vocab = _draft_vocab(
        [_vocab_rows(cfg, target, pre), sft.input_ids],
        cfg.draft.vocab_size,
        model.config.vocab_size,
    )
    torch.manual_seed(cfg.seed)  # right here: cache misses (target conversion) use the RNG too
    draft = DraftModel(
        arch,
        embed_weight=cast(torch.Tensor, model.get_input_embeddings().weight),
        lm_head_weight=cast(torch.Tensor, model.get_output_embeddings().weight),
        draft_to_target=vocab,
    )
    m["draft.params"] = draft.num_parameters()
    m["draft.vocab"] = draft.vocab_size

    stages = {"pretrain": pre, "sft": sft}
    if cfg.train.on_workers:
        logs = _train_on_workers(cfg, draft, stages, resources or Resources(), out_dir, say, m)
    else:
        logs = _train(cfg, draft, stages, cache_dir, out_dir, say, m)
    for stage, lg in logs.items():
        for k in ("loss", "loss_reg", "loss_cls", "top1"):
            series = getattr(lg, k)
            result.series[f"{stage}/{k}"] = series
            if series:
                tail = series[-max(1, len(series) // 10) :]
                m[f"{stage}/{k}_final"] = sum(tail) / len(tail)

    e = cfg.eval
    sets = load_prompt_sets(e.prompt_sets, n=e.num_prompts, heldout=_splits()["heldout"])
    t0 = time.perf_counter()
    ev = evaluate(
        model,
        target.tokenizer,
        draft,
        sets,
        shape=TreeShape(depth=e.depth, topk=e.topk, num_draft_tokens=e.num_draft_tokens),
        max_new_tokens=e.max_new_tokens,
        eos_ids=target.eos_token_ids,
        cache_dir=cache_dir,
        target_name=cfg.target.model,
    )
    m["wall_s/eval"] = time.perf_counter() - t0
    m["acceptance_length"] = ev.acceptance_length()
    for ps in sets:
        m[f"acceptance_length/{ps.name}"] = ev.acceptance_length(ps.name)
    generated = sum(int(r["tokens"]) for r in ev.per_prompt)  # type: ignore[call-overload]
    m.update(
        {
            "mismatches": ev.mismatches,
            "near_ties": ev.near_ties,
            "eval.tokens": generated,
            "eval.prompts": len(ev.per_prompt),
            "tokens_per_s/speculative": generated / ev.spec_s if ev.spec_s else float("nan"),
            "tokens_per_s/greedy": generated / ev.greedy_s if ev.greedy_s else float("nan"),
            "eval.draft_s_share": ev.draft_s / ev.spec_s if ev.spec_s else float("nan"),
        }
    )
    cost = measure_step_cost(model, draft, topk=e.topk, num_draft_tokens=e.num_draft_tokens)
    depth_used = min(e.depth, e.num_draft_tokens - 1)
    m.update(
        {
            "draft.ms_per_step": cost.draft_ms,
            "target.ms_per_step": cost.target_ms,
            "target.ms_per_verify": cost.verify_ms,
            "draft.cost_ratio": cost.draft_ms / cost.target_ms,
            "speedup": cost.speedup(m["acceptance_length"], depth_used),
        }
    )
    say(
        f"draft {cost.draft_ms:.2f} ms/step, target {cost.target_ms:.2f} ms/step, "
        f"net speedup {m['speedup']:.2f}x"
    )
    m["wall_s/total"] = time.perf_counter() - t_start
    out_dir.mkdir(parents=True, exist_ok=True)
    draft.save(out_dir / "draft")
    clear_checkpoints(out_dir / "checkpoints")
    (out_dir / "per_prompt.json").write_text(json.dumps(ev.per_prompt, indent=1))
    say(f"acceptance length {m['acceptance_length']:.3f}, mismatches {ev.mismatches}")
    return result
