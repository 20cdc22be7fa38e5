"""Workload ``draft_train``: pretrain a draft on T tokens, SFT it, measure acceptance length.

Config in (:class:`~workloads.draft_train.config.DraftTrainConfig`), metrics and artifacts out;
knows nothing of SQL, MLflow or Ray, so it runs the same in a test, a Ray task or a notebook.
Source: Scylla (arXiv 2505.07858) Sec. 4 (two-stage training, Thm 1.1 experiment).
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import resource
import time
from pathlib import Path
from typing import Literal

import torch

from workloads.config import Resources
from workloads.data import PromptSet, load_prompt_sets
from workloads.draft_train.config import DraftTrainConfig
from workloads.engine.acceptance import acceptance_metrics, pooled
from workloads.engine.step_cost import measure_step_cost
from workloads.models.draft import TRAINED_WITH, DraftArch, DraftModel
from workloads.models.target import Target, embedding_scale, resolve_device
from workloads.result import (
    CHECK_TOKENS,
    CHECK_Y,
    MAX_SERIES_POINTS,
    Progress,
    TrialResult,
    downsample,
)
from workloads.training import distributed
from workloads.training.checks import AcceptanceChecks, Measure
from workloads.training.evaluation import EvalResult, TreeShape, evaluate, prompt_ids
from workloads.training.features import FeatureSet
from workloads.training.loop import StageLog, StageSettings
from workloads.training.regenerate import RegenSettings
from workloads.training.stage_data import (
    ReplySource,
    StageData,
    draft_vocab,
    fusion_layers,
    splits,
    stage_data,
    target_spec,
)
from workloads.training.stages import clear_checkpoints, run_stage, run_wsd_fork_pretrain, trunk_key

log = logging.getLogger(__name__)


def _record_series(logs: dict[str, StageLog], result: TrialResult, out_dir: Path) -> None:
    """Per-step series of both stages: the full ones to ``series.json.gz`` (an artifact), at most
    :data:`MAX_SERIES_POINTS` averaged points each to the result (SQL and MLflow; step stride in
    ``<stage>/series_stride``), and each one's mean over its last tenth as ``<key>_final``; the
    acceptance checks as the series :data:`CHECK_TOKENS` and :data:`CHECK_Y` (check i at step
    i) and their count ``<stage>.acceptance_checks``."""
    full: dict[str, list[float]] = {}
    m = result.metrics
    for stage, lg in logs.items():
        for k in ("loss", "loss_reg", "loss_cls", "top1"):
            series = getattr(lg, k)
            full[f"{stage}/{k}"] = series
            result.series[f"{stage}/{k}"], stride = downsample(series, MAX_SERIES_POINTS)
            m[f"{stage}/series_stride"] = stride
            if series:
                tail = series[-max(1, len(series) // 10) :]
                m[f"{stage}/{k}_final"] = sum(tail) / len(tail)
        if lg.check_tokens:  # acceptance during training: one point per check, never averaged
            m[f"{stage}.acceptance_checks"] = len(lg.check_tokens)
            for name, values in ((CHECK_TOKENS, lg.check_tokens), (CHECK_Y, lg.check_acceptance)):
                full[f"{stage}/{name}"] = result.series[f"{stage}/{name}"] = list(values)
    out_dir.mkdir(parents=True, exist_ok=True)
    with gzip.open(out_dir / "series.json.gz", "wt") as f:
        json.dump(full, f)
    result.artifact_paths.append(out_dir / "series.json.gz")


def precision(cfg: DraftTrainConfig, device: torch.device) -> Literal["fp32", "bf16"]:
    """``train.precision`` resolved: ``auto`` is bf16 on CUDA, fp32 on the CPU."""
    p = cfg.train.precision
    if p == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    return p


def _stage(cfg: DraftTrainConfig, stage: str, device: torch.device) -> StageSettings:
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
        precision=precision(cfg, device),
        ttt_steps=t.ttt_steps,
        ttt_decay=t.ttt_decay,
    )


def _train(
    cfg: DraftTrainConfig,
    draft: DraftModel,
    feats: dict[str, FeatureSet],
    cache_dir: Path,
    out_dir: Path,
    say: Progress,
    m: dict[str, float],
    measure: Measure | None = None,
) -> dict[str, StageLog]:
    """Both stages with checkpoints (resume on retry); pretraining by cosine or wsd-fork;
    ``measure``: acceptance during training (``eval.during_training_every``)."""
    ckpt_dir = out_dir / "checkpoints"
    every = cfg.train.checkpoint_every
    logs: dict[str, StageLog] = {}
    for stage in ("pretrain", "sft"):
        t0 = time.perf_counter()
        s = _stage(cfg, stage, draft.embed_weight.device)
        checks = None
        if measure is not None:
            checks = AcceptanceChecks(cfg.eval.during_training_every, measure, say, stage)
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
                keep=cfg.train.keep_checkpoints,
            )
            m["pretrain.trunk_steps_reused"] = out.trunk_steps_reused
        else:
            out = run_stage(
                stage, draft, feats[stage], s, ckpt_dir=ckpt_dir, checkpoint_every=every, say=say,
                keep=cfg.train.keep_checkpoints, checks=checks,
            )  # fmt: skip
        logs[stage] = out.log
        checked = checks.wall_s if checks is not None else 0.0
        if checks is not None:
            m[f"wall_s/{stage}_checks"] = checked
            m["wall_s/checks"] = m.get("wall_s/checks", 0.0) + checked
        m[f"wall_s/{stage}"] = time.perf_counter() - t0 - checked
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
    feats: dict[str, FeatureSet],
    resources: Resources,
    out_dir: Path,
    say: Progress,
    m: dict[str, float],
) -> dict[str, StageLog]:
    """Both stages on ``cfg.train.workers`` Ray Train workers (see
    :mod:`workloads.training.distributed`); no checkpoints there: a retried trial trains again from
    the start."""
    share = distributed.WorkerResources.split(
        resources.num_cpus, resources.num_gpus, cfg.train.workers
    )
    t0 = time.perf_counter()
    done = distributed.train_stages(
        draft,
        [
            distributed.Stage(name, f, _stage(cfg, name, draft.embed_weight.device))
            for name, f in feats.items()
        ],
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
        metrics: ``acceptance_length`` (pooled over verify steps: emitted tokens / cycles
        over every prompt, SGLang's and vLLM's definition) with its 95% bootstrap CI over
        prompts ``acceptance_length_ci_low`` / ``_ci_high``, the mean of per-prompt means
        ``acceptance_length_prompt_mean`` (SpecForge's) with ``_ci_low`` / ``_ci_high``, and
        each of the six per prompt set with ``/<set>`` appended (``acceptance_length/<set>``,
        ...; see :mod:`workloads.engine.acceptance`), ``mismatches``,
        ``near_ties``, ``eval.tf32`` (1: the target's float32 matmuls ran in TF32, which widens
        the near-tie threshold), losses, wall seconds per phase (training on workers also
        ``wall_s/train_workers``, their start-up included), token counts, ``draft.params``,
        ``tokens_per_s/speculative`` and ``tokens_per_s/greedy``, per stage
        ``tokens_trained`` (this trial's own work; a wsd-fork trunk reused from the cache or a
        checkpoint resumed from is not counted), ``draft.ms_per_step``, ``target.ms_per_step``,
        ``speedup`` (net, from the step costs, see :mod:`workloads.engine.step_cost`),
        ``features/<stage>_online`` (1 when the stage's features were computed online),
        ``target.random_weights`` (1: acceptance is meaningless), ``memory.peak_rss_gb`` and,
        on CUDA, ``memory.peak_gpu_gb``; series: per-step losses, averaged down to at most
        :data:`~workloads.result.MAX_SERIES_POINTS` points (``<stage>/series_stride`` steps
        each), the full ones in the artifact ``series.json.gz``; acceptance during training
        as in :func:`_record_series`, its seconds ``wall_s/<stage>_checks`` (not in
        ``wall_s/<stage>`` or the tokens/s) and ``wall_s/checks``.

    Raises:
        ValueError: a budget larger than the data (the corpus, with both sizes), a bad
            prompt-set directory, ``device: cuda`` without a GPU, an eval prompt longer than
            the target's positions allow (``PromptTooLong``, right after the target loads).
    """
    say = progress or (lambda msg: log.info("%s", msg))
    t_start = time.perf_counter()
    result = TrialResult(artifact_paths=[out_dir / "per_prompt.json", out_dir / "draft"])
    m = result.metrics
    device = resolve_device(cfg.device)
    # TF32 for what autocast leaves in float32; the near-tie rule follows it (uses_tf32)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.cuda.reset_peak_memory_stats()
    spec = target_spec(cfg, cache_dir, device)
    target = spec.load()
    m["target.random_weights"] = float(target.random_weights)
    m.update(_hardware_metrics(device))
    say(
        f"target {cfg.target.model} ready on {target.input_device}"
        + (" (random weights: acceptance is meaningless)" if target.random_weights else "")
    )
    eval_sets = _eval_prompt_sets(cfg, target)  # a prompt too long fails before training
    pre = stage_data(cfg, target, spec, cache_dir, "pretrain", cfg.pretrain.tokens, say)
    replies = _vllm_replies(cfg, target, cache_dir, out_dir, say)  # sft.regen_engine: vllm
    sft = stage_data(cfg, target, spec, cache_dir, "sft", cfg.sft.tokens, say, replies)
    m.update(pre.metrics | sft.metrics)
    say(
        f"features ready: pretrain {pre.feats.tokens} tokens ({pre.mode}), "
        f"sft {sft.feats.tokens} tokens ({sft.mode})"
    )
    draft = _new_draft(cfg, target, cache_dir, (pre, sft), device, say)
    m["draft.params"] = draft.num_parameters()
    m["draft.vocab"] = draft.vocab_size

    stages: dict[str, FeatureSet] = {"pretrain": pre.feats, "sft": sft.feats}
    if cfg.train.on_workers:
        logs = _train_on_workers(cfg, draft, stages, resources or Resources(), out_dir, say, m)
    else:  # with acceptance checks during training when asked
        logs = _train(cfg, draft, stages, cache_dir, out_dir, say, m,
                      _measure_during_training(cfg, target, draft, eval_sets, cache_dir))
    _record_series(logs, result, out_dir)
    draft.set_compute_dtype(target.model.dtype)  # evaluated beside the target, in its dtype

    ev = _evaluate(cfg, target, draft, eval_sets, cache_dir, m)
    _measure_speedup(cfg, target, draft, m, say)
    m["wall_s/total"] = time.perf_counter() - t_start
    m["memory.peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    if device.type == "cuda":
        m["memory.peak_gpu_gb"] = torch.cuda.max_memory_allocated() / 2**30
    out_dir.mkdir(parents=True, exist_ok=True)
    draft.save(out_dir / "draft")
    (out_dir / "draft" / TRAINED_WITH).write_text(cfg.model_dump_json(indent=1))
    clear_checkpoints(out_dir / "checkpoints")
    (out_dir / "per_prompt.json").write_text(json.dumps(ev.per_prompt, indent=1))
    if (out_dir / "regen-server.log").exists():  # sft.regen_engine: vllm started a server
        result.artifact_paths.append(out_dir / "regen-server.log")
    say(f"acceptance length {m['acceptance_length']:.3f}, mismatches {ev.mismatches}")
    return result


def _vllm_replies(
    cfg: DraftTrainConfig, target: Target, cache_dir: Path, out_dir: Path, say: Progress
) -> ReplySource | None:
    """``sft.regen_engine: vllm``: the SFT replies from a vLLM server (its log an artifact of
    the trial, ``regen-server.log``); else None (this platform's AR loop)."""
    if cfg.sft.regen_engine != "vllm":
        return None
    from workloads.serving.replies import VllmReplies

    def source(settings: RegenSettings) -> VllmReplies:
        return VllmReplies(
            python=cfg.sft.regen_python, target=cfg.target, cache_dir=cache_dir,
            settings=settings, eos_ids=target.eos_token_ids, max_model_len=cfg.sft.seq_len,
            log_path=out_dir / "regen-server.log", say=say,
        )  # fmt: skip

    return source


def _hardware_metrics(device: torch.device) -> dict[str, float]:
    """What the trial runs on, for calibrating predicted seconds on the same hardware:
    ``hardware.id`` (:func:`~workloads.roofline.hardware.fingerprint_id` of the CPU model and
    torch threads, or the GPU), ``hardware.threads`` and ``hardware.gpus`` (visible GPUs)."""
    from workloads.roofline.hardware import fingerprint_id, hardware_fingerprint

    cuda = device.type == "cuda"
    gpu = torch.cuda.get_device_name(device) if cuda else None
    threads = torch.get_num_threads()
    fp = hardware_fingerprint(device=device.type, threads=threads, gpu_name=gpu)
    return {
        "hardware.id": fingerprint_id(fp),
        "hardware.threads": float(threads),
        "hardware.gpus": float(torch.cuda.device_count() if cuda else 0),
    }


def _new_draft(
    cfg: DraftTrainConfig,
    target: Target,
    cache_dir: Path,
    data: tuple[StageData, StageData],
    device: torch.device,
    say: Progress,
) -> DraftModel:
    """A fresh draft of ``cfg.draft``'s shape on the target's frozen embedding and head, on its
    input device, over the draft vocabulary of both stages' rows (``data``: pretrain, sft),
    computing in the trial's precision (seeded here: cache misses use the RNG too)."""
    pre, sft = data
    model = target.model
    arch = DraftArch.from_target(
        model.config,
        layers=cfg.draft.layers,
        output_norm=cfg.draft.output_norm,
        first_input_norm=cfg.draft.input_norm,
        rope_theta=cfg.draft.rope_theta,
        fusion_layers=fusion_layers(cfg, target),
        embed_scale=embedding_scale(model),
    )
    vocab = draft_vocab(cfg, target, cache_dir, pre, sft, say)
    torch.manual_seed(cfg.seed)  # right here: cache misses (target conversion) use the RNG too
    embed, head = target.frozen_weights()
    dev = target.input_device
    compute = torch.bfloat16 if precision(cfg, device) == "bf16" else torch.float32
    return DraftModel(
        arch,
        embed_weight=embed.to(dev),
        lm_head_weight=head.to(dev),
        draft_to_target=vocab,
        compute_dtype=compute,
    ).to(dev)


def _eval_prompt_sets(cfg: DraftTrainConfig, target: Target) -> list[PromptSet]:
    """The held-out prompt sets of ``cfg.eval``, each prompt checked to fit the target's
    positions with ``eval.max_new_tokens`` and the tree's depth (:func:`prompt_ids`).

    Raises:
        workloads.data.prompts.PromptTooLong: the first prompt that does not fit, naming its set
            and number; ``ValueError``: a bad prompt-set directory.
    """
    e = cfg.eval
    sets = load_prompt_sets(e.prompt_sets, n=e.num_prompts, heldout=splits()["heldout"])
    prompt_ids(
        target.model, target.tokenizer, sets, max_new_tokens=e.max_new_tokens, depth=e.depth,
        target_name=cfg.target.model,
    )  # fmt: skip
    return sets


def _evaluate(
    cfg: DraftTrainConfig,
    target: Target,
    draft: DraftModel,
    sets: list[PromptSet],
    cache_dir: Path,
    m: dict[str, float],
) -> EvalResult:
    """Decode the held-out prompt sets ``sets`` with the trained draft (``cfg.eval``'s tree),
    checked against the target's greedy output; the acceptance lengths, the lossless check's
    counts and the tokens per second to ``m``."""
    e = cfg.eval
    t0 = time.perf_counter()
    ev = evaluate(
        target.model,
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
    m.update(_acceptance(ev.per_prompt))
    for ps in sets:
        rows = [r for r in ev.per_prompt if r["set"] == ps.name]
        m.update(_acceptance(rows, suffix=f"/{ps.name}"))
    generated = sum(int(r["tokens"]) for r in ev.per_prompt)  # type: ignore[call-overload]
    m.update(
        {
            "mismatches": ev.mismatches,
            "near_ties": ev.near_ties,
            "eval.near_tie_threshold": ev.near_tie_threshold,
            "eval.tf32": float(ev.tf32),
            "eval.tokens": generated,
            "eval.prompts": len(ev.per_prompt),
            "tokens_per_s/speculative": generated / ev.spec_s if ev.spec_s else float("nan"),
            "tokens_per_s/greedy": generated / ev.greedy_s if ev.greedy_s else float("nan"),
            "eval.draft_s_share": ev.draft_s / ev.spec_s if ev.spec_s else float("nan"),
        }
    )
    return ev


def _measure_during_training(
    cfg: DraftTrainConfig,
    target: Target,
    draft: DraftModel,
    sets: list[PromptSet],
    cache_dir: Path,
) -> Measure | None:
    """The acceptance check of ``eval.during_training_every`` (None when 0): the pooled
    acceptance length of the draft as it stands on the first ``eval.during_training_prompts``
    prompts of each set, decoded beside the target in its dtype with ``cfg.eval``'s tree; the
    draft goes back to its training dtype and mode. A check that is not lossless raises."""
    e = cfg.eval
    if not e.during_training_every:
        return None
    subset = [PromptSet(ps.name, ps.prompts[: e.during_training_prompts]) for ps in sets]

    def measure() -> float:
        dtype = draft.embed_weight.dtype
        draft.set_compute_dtype(target.model.dtype)
        try:
            ev = evaluate(
                target.model, target.tokenizer, draft, subset,
                shape=TreeShape(depth=e.depth, topk=e.topk, num_draft_tokens=e.num_draft_tokens),
                max_new_tokens=e.max_new_tokens, eos_ids=target.eos_token_ids,
                cache_dir=cache_dir, target_name=cfg.target.model,
            )  # fmt: skip
        finally:
            draft.set_compute_dtype(dtype)
            draft.train()
        if ev.mismatches:
            raise RuntimeError(
                f"speculative output differs from the target's greedy output on "
                f"{ev.mismatches} prompt(s) during training: the decoder is not lossless"
            )
        rows = [r for r in ev.per_prompt if int(r["cycles"]) > 0]  # type: ignore[call-overload]
        accepted = [int(r["accepted"]) for r in rows]  # type: ignore[call-overload]
        return pooled(accepted, [int(r["cycles"]) for r in rows])  # type: ignore[call-overload]

    return measure


def _acceptance(rows: list[dict[str, object]], suffix: str = "") -> dict[str, float]:
    """Both acceptance definitions with their CIs over ``rows`` (per-prompt rows of
    :class:`EvalResult`; :func:`workloads.engine.acceptance.acceptance_metrics`)."""
    accepted = [int(r["accepted"]) for r in rows]  # type: ignore[call-overload]
    cycles = [int(r["cycles"]) for r in rows]  # type: ignore[call-overload]
    return acceptance_metrics(accepted, cycles, suffix=suffix)


def _measure_speedup(
    cfg: DraftTrainConfig,
    target: Target,
    draft: DraftModel,
    m: dict[str, float],
    say: Progress,
) -> None:
    """The draft's and the target's step costs (ms) and the net speedup they give at the
    measured ``m["acceptance_length"]`` (:mod:`workloads.engine.step_cost`), to ``m``."""
    e = cfg.eval
    cost = measure_step_cost(target.model, draft, topk=e.topk, num_draft_tokens=e.num_draft_tokens)
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
