"""The work of each stage of a ``draft_train`` trial, for predicting its seconds before it runs.

A workload's :class:`~workloads.protocol.CostModel` (its ``Workload.cost``) says, for one
trial config, what each stage computes (:class:`~workloads.protocol.StageWork`: units of work,
their seconds at utilisation 1 on a hardware profile from :mod:`workloads.roofline.train_cost`,
and which cache shares them), and, for a finished trial, what its stages did by its metrics (the
regressor the orchestrator calibrates measured stage seconds against). No torch is imported,
nothing is written.

Stages of ``draft_train`` (each the trial metric ``wall_s/<stage>``): ``features_pretrain``,
``features_sft`` (the target's hidden states when cached; online ones are computed inside the
training steps and counted there), ``regenerate`` (SFT replies by the target), ``pretrain``,
``sft`` (draft training; wsd-fork pretrains only the trunk beyond what the cache holds plus its
own decay) and ``eval`` (tree speculative decoding of the held-out prompts and the target's
greedy reference for the lossless check).

Shared work (cached features, regenerated replies, wsd-fork trunks, greedy references; nested
budgets share their prefix): a :class:`StageWork` with a ``shared`` key costs only the units
beyond what is cached (``cached``: read from the cache folder; a sweep's earlier trials add
theirs). Trials running at once split feature chunks and reply batches (``split``: one lock
each, ``workloads.training.feature_cache``, ``workloads.training.regenerate``) and wait for a
wsd-fork trunk or a prompt's greedy reference that another trial builds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from workloads.draft_train.config import DraftTrainConfig
from workloads.names import is_prompt_dir
from workloads.protocol import CostContext, CostModel, CostUnknown, StageWork
from workloads.roofline.costs import step_time, target_step
from workloads.roofline.hardware import HardwareProfile
from workloads.roofline.models import ModelShape, load_model_shape
from workloads.roofline.train_cost import (
    EVAL_PROMPT_TOKENS,
    REGEN_BATCH,
    ar_decode_s,
    draft_train_flops,
    regen_chat_s,
    regen_chats,
    target_forward_flops,
    tree_cycle,
)
from workloads.training.feature_mode import resolve_feature_mode

DRAFT_TRAIN_STAGES = (
    "features_pretrain", "features_sft", "regenerate", "pretrain", "sft", "checks", "eval",
)  # fmt: skip
"""the stages of a ``draft_train`` trial, in the order they run; each records ``wall_s/<stage>``
(``checks``: the acceptance checks during training, ``eval.during_training_every``)"""

CHUNK_TOKENS = 4096
"""tokens per feature-cache chunk (``workloads.training.stage_data.CHUNK_TOKENS``)"""


def _shape(cfg: DraftTrainConfig) -> ModelShape:
    """The target's shape: a builtin name or shape, a local folder, or a hub id whose config
    is in the local Hugging Face cache."""
    try:
        return load_model_shape(cfg.target.model)
    except ValueError:
        pass
    found: object = None
    if not Path(cfg.target.model).expanduser().exists():
        try:
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(cfg.target.model, "config.json")
        except Exception:  # noqa: BLE001 - not a hub id, or no cache: unknown
            found = None
    if isinstance(found, str):
        try:
            return load_model_shape(found)
        except ValueError:
            pass
    raise CostUnknown(
        f"the shape of target {cfg.target.model!r} is not known here (not a builtin shape, no "
        "config.json on this machine)"
    )


def _draft_vocab(cfg: DraftTrainConfig, shape: ModelShape) -> int:
    v = cfg.draft.vocab_size
    return shape.vocab if v == 0 or v >= shape.vocab else v


def _target_key(cfg: DraftTrainConfig) -> str:
    """The target's name in the cache's folder names (as ``workloads.cost._cached_gib``)."""
    t = cfg.target
    key = t.model if t.weights == "pretrained" else f"{t.model}@random-seed{cfg.seed}"
    return key + ("" if t.dtype in ("float32", "auto") else f"-{t.dtype}")


def _fusion_mark(cfg: DraftTrainConfig) -> str:
    """The feature folders' mark of the fused layers (``-F2.15.27``; stage_data's), "" without
    fusion; the default layers of a target whose shape is unknown here give ``-F?``."""
    from workloads.models.fusion import folder_mark, resolve_layers

    if cfg.draft.fusion == "none":
        return ""
    try:
        n = _shape(cfg).layers
    except CostUnknown:
        n = None
    try:
        return folder_mark(resolve_layers("eagle3", cfg.draft.fusion_layers, n))
    except ValueError:
        return "-F?"


def _feature_rows(tokens: int, seq_len: int, cached: bool) -> int:
    """Rows a stage's features cover: whole rows, and whole chunks when cached (stage_data)."""
    rows = -(-tokens // seq_len)
    per_chunk = max(1, CHUNK_TOKENS // seq_len)
    return -(-rows // per_chunk) * per_chunk if cached else rows


def cached_feature_tokens(cache_dir: Path | None, cfg: DraftTrainConfig, stage: str) -> int:
    """Tokens of the stage's features cached without a gap from the first, in the largest
    matching folder (target, dtype, stage, sequence length, packing; for SFT, regenerated
    replies or not) under ``cache_dir``; 0 when none. Without the corpus recipe (it needs the
    tokenizer) the largest folder is taken."""
    if cache_dir is None:
        return 0
    from workloads.training.feature_cache import feature_dir

    seq_len = cfg.pretrain.seq_len if stage == "pretrain" else cfg.sft.seq_len
    parent = feature_dir(
        cache_dir, target=_target_key(cfg), stage=stage, recipe="x", seq_len=seq_len
    ).parent
    regen = None  # the reply recipe's marks in SFT feature folders (None: any)
    if (
        stage == "sft"
        and cfg.sft.responses == "target"
        and list((cache_dir / "regenerated").glob("*.recipe.json"))
    ):
        regen = {"-regen" + f.stem[:8] for f in _regen_files(cache_dir, cfg)}
    mark = _fusion_mark(cfg)
    best = 0
    for folder in parent.glob(f"{stage}-*-L{seq_len}"):
        head = folder.name.removesuffix(f"-L{seq_len}")
        if ("-F" in head) != bool(mark) or (mark and not head.endswith(mark)):
            continue  # features of other fused layers (or of none)
        isolated = head.removesuffix(mark).endswith("-isolated")
        if isolated != (cfg.pretrain.packing == "isolated"):
            continue
        if stage == "sft" and ("-regen" in folder.name) != (cfg.sft.responses == "target"):
            continue
        if stage == "sft" and regen is not None and not any(r in folder.name for r in regen):
            continue  # features of another reply recipe
        try:
            data = json.loads((folder / "manifest.json").read_text())
            best = max(best, int(data.get("token_range", [0, 0])[1]))
        except (OSError, ValueError, TypeError, IndexError):
            continue
    return best


def regen_recipe(cfg: DraftTrainConfig) -> dict[str, object]:
    """The recipe of the trial's regenerated replies as their cache writes it beside the file
    (``workloads.training.regenerate.recipe_of``; equal by test)."""
    cap = cfg.sft.regen_reply_tokens
    return {
        "target": _target_key(cfg), "dtype": cfg.target.dtype, "max_new_tokens": cap,
        "temperature": cfg.sft.regen_temperature, "max_prompt_tokens": cfg.sft.seq_len - cap,
        "batch_size": REGEN_BATCH, "seed": 0, "engine": cfg.sft.regen_engine,
    }  # fmt: skip


def _regen_files(cache_dir: Path, cfg: DraftTrainConfig) -> list[Path]:
    """The cache files of the trial's reply recipe (by ``<key>.recipe.json``); every file when
    the cache has no recipe files."""
    folder = cache_dir / "regenerated"
    recipes = list(folder.glob("*.recipe.json"))
    if not recipes:
        return list(folder.glob("*.jsonl"))
    want, found = regen_recipe(cfg), []
    for path in recipes:
        try:
            if json.loads(path.read_text()) == want:
                found.append(path.with_name(path.name.removesuffix(".recipe.json") + ".jsonl"))
        except (OSError, ValueError):
            continue
    return found


def cached_regen_chats(cache_dir: Path | None, cfg: DraftTrainConfig) -> int:
    """Chats of the trial's reply recipe already regenerated under ``cache_dir``
    (:func:`_regen_files`); 0 when none."""
    if cache_dir is None:
        return 0
    best = 0
    for path in _regen_files(cache_dir, cfg):
        try:
            with path.open("rb") as f:
                best = max(best, sum(1 for _ in f))
        except OSError:
            continue
    return best


def cached_trunk_steps(cache_dir: Path | None, cfg: DraftTrainConfig, branch: int) -> int:
    """The newest wsd-fork trunk checkpoint at or before step ``branch`` under ``cache_dir``
    (``trunks/<trunk_key>/trunk-step-NNNNNNN``); 0 when none."""
    if cache_dir is None:
        return 0
    from workloads.training.stages import trunk_key

    steps = []
    for folder in (cache_dir / "trunks" / trunk_key(cfg)).glob("trunk-step-*"):
        try:
            steps.append(int(folder.name.rsplit("-", 1)[1]))
        except ValueError:
            continue
    return max((s for s in steps if s <= branch), default=0)


def _greedy_files(cache_dir: Path | None) -> int:
    if cache_dir is None or not (cache_dir / "greedy").is_dir():
        return 0
    return sum(1 for _ in (cache_dir / "greedy").glob("*.json"))


def _eval_prompts(cfg: DraftTrainConfig) -> int:
    """Prompts the evaluation decodes: ``num_prompts`` per set; a directory holds one set per
    ``*.jsonl`` file (at least one counted)."""
    sets = cfg.eval.prompt_sets
    entries = [str(sets)] if isinstance(sets, Path) else list(sets)
    n_sets = 0
    for entry in entries:
        folder = Path(entry).expanduser()
        if (isinstance(sets, Path) or is_prompt_dir(entry)) and folder.is_dir():
            n_sets += max(1, len(list(folder.glob("*.jsonl"))))
        else:
            n_sets += 1
    return n_sets * cfg.eval.num_prompts


def _checks(cfg: DraftTrainConfig, trained: int) -> int:
    """Acceptance checks of a stage that sees ``trained`` tokens: one per multiple of
    ``eval.during_training_every`` passed and one at the end (about ceil(trained / every))."""
    every = cfg.eval.during_training_every
    return -(-trained // every) if every and trained else 0


def _train_flops(cfg: DraftTrainConfig, shape: ModelShape, stage: str, tokens: float) -> float:
    seq_len = cfg.pretrain.seq_len if stage == "pretrain" else cfg.sft.seq_len
    return draft_train_flops(
        shape,
        layers=cfg.draft.layers,
        vocab=_draft_vocab(cfg, shape),
        tokens=tokens,
        seq_len=seq_len,
        ttt_steps=cfg.train.ttt_steps,
    )


def _is_online(cfg: DraftTrainConfig, shape: ModelShape, stage: str) -> bool:
    tokens = cfg.pretrain.tokens if stage == "pretrain" else cfg.sft.tokens
    seq_len = cfg.pretrain.seq_len if stage == "pretrain" else cfg.sft.seq_len
    f = cfg.features
    mode = resolve_feature_mode(
        f.mode,
        tokens=-(-tokens // seq_len) * seq_len,
        hidden=shape.hidden * cfg.draft.feature_copies,
        max_cache_gb=f.max_cache_gb,
    )
    return mode == "online"


def _eval_ideal(cfg: DraftTrainConfig, shape: ModelShape, hw: HardwareProfile, tau: float) -> float:
    """Roofline seconds of one prompt's speculative decoding: its prefill, then
    max_new_tokens / tau tree cycles over the mean prefix."""
    e = cfg.eval
    s = EVAL_PROMPT_TOKENS + e.max_new_tokens // 2
    cycle = tree_cycle(
        shape,
        layers=cfg.draft.layers,
        vocab=_draft_vocab(cfg, shape),
        depth=min(e.depth, e.num_draft_tokens - 1),
        topk=e.topk,
        num_draft_tokens=e.num_draft_tokens,
        s=s,
        tau=tau,
        bytes_per_element=hw.bytes_per_element,
    )
    bpe = hw.bytes_per_element
    prefill = step_time(target_step(shape, 1, EVAL_PROMPT_TOKENS, 0, bytes_per_element=bpe), hw)
    return prefill + math.ceil(e.max_new_tokens / tau) * step_time(cycle, hw)


def _greedy_ideal(cfg: DraftTrainConfig, shape: ModelShape, hw: HardwareProfile) -> float:
    """Roofline seconds of one prompt's greedy reference (batch 1)."""
    return ar_decode_s(
        shape, hw, b=1, prompt=EVAL_PROMPT_TOKENS, new_tokens=cfg.eval.max_new_tokens
    )


def plan_draft_train(cfg: DraftTrainConfig, ctx: CostContext) -> tuple[StageWork, ...]:
    """The work of every stage of one ``draft_train`` trial on ``ctx.hw``.

    Raises:
        CostUnknown: the target's shape is not known on this machine.
    """
    shape = _shape(cfg)
    hw, peak = ctx.hw, ctx.hw.peak_flops
    works: list[StageWork] = []
    tkey = f"{_target_key(cfg)}:{cfg.target.dtype}"
    spread = min(float(cfg.train.workers), max(1.0, ctx.devices)) if cfg.train.on_workers else 1.0
    checks = 0
    for stage, tokens, seq_len, epochs in (
        ("pretrain", cfg.pretrain.tokens, cfg.pretrain.seq_len, 1),
        ("sft", cfg.sft.tokens, cfg.sft.seq_len, cfg.sft.epochs),
    ):
        online = _is_online(cfg, shape, stage)
        rows = _feature_rows(tokens, seq_len, cached=not online)
        if not online and tokens:
            ftok = rows * seq_len
            works.append(
                StageWork(
                    stage=f"features_{stage}",
                    units=ftok,
                    unit="tokens",
                    ideal_s=target_forward_flops(shape, ftok, seq_len) / peak,
                    kind="train",
                    shared=f"features:{tkey}:{stage}:L{seq_len}:{cfg.pretrain.packing}"
                    + _fusion_mark(cfg)
                    + (f":regen-{cfg.sft.responses}" if stage == "sft" else ""),
                    cached=cached_feature_tokens(ctx.cache_dir, cfg, stage),
                    split=True,
                    note="target forward into the feature cache (nested budgets share it)",
                )  # fmt: skip
            )
        trained = -(-tokens // seq_len) * seq_len * epochs
        works += _training_works(cfg, ctx, shape, stage, trained, online, spread)
        checks += _checks(cfg, trained)
    if cfg.sft.responses == "target" and cfg.sft.tokens:
        cap = cfg.sft.regen_reply_tokens
        chats = math.ceil(regen_chats(cfg.sft.tokens, cap) / REGEN_BATCH) * REGEN_BATCH
        works.append(
            StageWork(
                stage="regenerate",
                units=chats,
                unit="chats",
                ideal_s=chats * regen_chat_s(shape, hw, reply_cap=cap),
                kind="decode",
                shared=f"regen:{tkey}:{cap}:{cfg.sft.regen_temperature}:{cfg.sft.seq_len}"
                f":{cfg.sft.regen_engine}",
                cached=cached_regen_chats(ctx.cache_dir, cfg),
                split=True,
                lookahead=REGEN_BATCH,
                note=f"target decoding, {cap}-token replies in whole batches of {REGEN_BATCH}"
                + (
                    "; through a vLLM server whose start-up (~2.5 min on a 2-core CPU) is "
                    "counted only once calibrated on trials that ran it"
                    if cfg.sft.regen_engine == "vllm"
                    else ""
                ),
            )  # fmt: skip
        )
    prompts = _eval_prompts(cfg)
    if checks:
        per = prompts // cfg.eval.num_prompts * cfg.eval.during_training_prompts
        works.append(
            StageWork(
                stage="checks", units=checks * per, unit="prompts",
                ideal_s=checks * per * _eval_ideal(cfg, shape, hw, ctx.tau), kind="decode",
                note=f"{checks} acceptance checks during training, {per} prompts each",
            )  # fmt: skip
        )
    works.append(
        StageWork(
            stage="eval",
            units=prompts,
            unit="prompts",
            ideal_s=prompts * _eval_ideal(cfg, shape, hw, ctx.tau),
            kind="decode",
            note=f"tree decoding at acceptance length {ctx.tau:.3g}",
        )  # fmt: skip
    )
    e = cfg.eval
    on_disk = _greedy_files(ctx.cache_dir)
    works.append(
        StageWork(
            stage="eval",
            units=prompts,
            unit="prompts",
            ideal_s=prompts * _greedy_ideal(cfg, shape, hw),
            kind="decode",
            shared=f"greedy:{tkey}:{e.prompt_sets}:{e.num_prompts}:{e.max_new_tokens}",
            cached=prompts if on_disk >= prompts else 0,
            note="the target's greedy reference"
            + (f" ({on_disk} references on disk: assumed cached)" if on_disk >= prompts else ""),
        )  # fmt: skip
    )
    return tuple(works)


def _training_works(
    cfg: DraftTrainConfig,
    ctx: CostContext,
    shape: ModelShape,
    stage: str,
    trained: int,
    online: bool,
    spread: float,
) -> list[StageWork]:
    """A training stage's work: the draft's forward and backward (and the target's forward when
    its features are online), over ``spread`` devices; wsd-fork pretraining as a shared trunk
    and a private decay."""
    seq_len = cfg.pretrain.seq_len if stage == "pretrain" else cfg.sft.seq_len
    per_token = _train_flops(cfg, shape, stage, 1) + (
        target_forward_flops(shape, 1, seq_len) if online else 0.0
    )
    peak = ctx.hw.peak_flops * spread
    note = "draft forward and backward" + (" and online target features" if online else "")
    if stage == "pretrain" and cfg.pretrain.schedule == "wsd-fork" and trained:
        rows = trained // seq_len
        total = -(-rows // cfg.train.batch_size)
        decay = min(total, max(1, round(cfg.pretrain.decay_frac * total)))
        branch = total - decay
        trunk = min(rows, branch * cfg.train.batch_size) * seq_len
        reused = cached_trunk_steps(ctx.cache_dir, cfg, branch)
        from workloads.training.stages import trunk_key

        return [
            StageWork(
                stage=stage, units=trunk, unit="tokens", ideal_s=trunk * per_token / peak,
                kind="train", shared=f"trunk:{trunk_key(cfg)}",
                cached=min(trunk, reused * cfg.train.batch_size * seq_len),
                note=f"wsd-fork trunk to step {branch} ({note})",
            ),
            StageWork(
                stage=stage, units=trained - trunk, unit="tokens",
                ideal_s=(trained - trunk) * per_token / peak, kind="train",
                note=f"wsd-fork decay of {decay} steps",
            ),
        ]  # fmt: skip
    return [
        StageWork(
            stage=stage,
            units=trained,
            unit="tokens",
            ideal_s=trained * per_token / peak,
            kind="train",
            note=note,
        )  # fmt: skip
    ]


def done_draft_train(
    cfg: DraftTrainConfig, m: Mapping[str, float], hw: HardwareProfile
) -> dict[str, float]:
    """What a finished ``draft_train`` trial's stages did, by its metrics, in seconds at
    utilisation 1 on ``hw``: features built (``features/<stage>_misses`` chunks), tokens trained
    (``<stage>.tokens_trained``; a reused wsd-fork trunk is not counted), chats regenerated
    (``sft.regen_generated``), the evaluation's cycles (``eval.tokens`` / acceptance length)
    and the share of its greedy references computed here (the evaluation's seconds beyond its
    speculative decoding, over the references' recorded seconds).

    Raises:
        CostUnknown: the target's shape is not known on this machine.
    """
    shape = _shape(cfg)
    peak = hw.peak_flops
    out: dict[str, float] = {}
    for stage, tokens, seq_len in (
        ("pretrain", cfg.pretrain.tokens, cfg.pretrain.seq_len),
        ("sft", cfg.sft.tokens, cfg.sft.seq_len),
    ):
        misses = m.get(f"features/{stage}_misses")
        if misses is not None and math.isfinite(misses):
            per_chunk = max(1, CHUNK_TOKENS // seq_len)
            built = min(misses * per_chunk, _feature_rows(tokens, seq_len, True)) * seq_len
            out[f"features_{stage}"] = target_forward_flops(shape, built, seq_len) / peak
        trained = m.get(f"{stage}.tokens_trained")
        if trained is not None and math.isfinite(trained):
            online = m.get(f"features/{stage}_online", 0.0) == 1.0
            per_token = _train_flops(cfg, shape, stage, 1) + (
                target_forward_flops(shape, 1, seq_len) if online else 0.0
            )
            out[stage] = trained * per_token / peak
    generated = m.get("sft.regen_generated")
    if generated is not None and math.isfinite(generated):
        out["regenerate"] = generated * regen_chat_s(
            shape, hw, reply_cap=cfg.sft.regen_reply_tokens
        )
    ev = _eval_done(cfg, shape, hw, m)
    if ev is not None:
        out["eval"] = ev
    n = sum(m.get(f"{stage}.acceptance_checks", 0.0) for stage in ("pretrain", "sft"))
    tau = m.get("acceptance_length")
    if n and tau is not None and math.isfinite(tau):  # checks: like the evaluation, fewer prompts
        per = _eval_prompts(cfg) // cfg.eval.num_prompts * cfg.eval.during_training_prompts
        out["checks"] = n * per * _eval_ideal(cfg, shape, hw, max(1.0, tau))
    return out


def _eval_done(
    cfg: DraftTrainConfig, shape: ModelShape, hw: HardwareProfile, m: Mapping[str, float]
) -> float | None:
    tokens, tau = m.get("eval.tokens"), m.get("acceptance_length")
    prompts = m.get("eval.prompts")
    if not all(v is not None and math.isfinite(v) and v > 0 for v in (tokens, tau, prompts)):
        return None
    assert tokens is not None and tau is not None and prompts is not None
    per_prompt_tokens = tokens / prompts
    spec = (
        prompts
        * _eval_ideal(cfg, shape, hw, max(1.0, tau))
        * (per_prompt_tokens / cfg.eval.max_new_tokens)
    )
    greedy = prompts * _greedy_ideal(cfg, shape, hw)
    wall, spec_rate, greedy_rate = (
        m.get("wall_s/eval"),
        m.get("tokens_per_s/speculative"),
        m.get("tokens_per_s/greedy"),
    )
    share = 0.0
    if all(v is not None and math.isfinite(v) and v > 0 for v in (wall, spec_rate, greedy_rate)):
        assert wall is not None and spec_rate is not None and greedy_rate is not None
        share = min(1.0, max(0.0, (wall - tokens / spec_rate) / (tokens / greedy_rate)))
    return spec + share * greedy


def _tau_group(cfg: DraftTrainConfig) -> str:
    """Trials with the same target, draft and tree see comparable acceptance lengths on the
    same prompt sets (:func:`_prompt_set_names`)."""
    e = cfg.eval
    return json.dumps(
        [cfg.target.model, cfg.draft.layers, cfg.draft.vocab_size, e.depth, e.topk,
         e.num_draft_tokens]
    )  # fmt: skip


def _prompt_set_names(cfg: DraftTrainConfig) -> tuple[str, ...]:
    """The names the evaluation gives its prompt sets (the suffixes of its per-set metrics
    ``acceptance_length/<name>``), as ``workloads.data.prompts.prompt_set_sources`` names them
    without importing it (torch): a builtin by its name, a directory's ``*.jsonl`` files by
    their stems sorted, ``<directory>/<stem>`` where the stem is taken; () for a directory not
    on this machine."""
    sets = cfg.eval.prompt_sets
    entries = [str(sets)] if isinstance(sets, Path) else list(sets)
    builtins = {e for e in entries if not isinstance(sets, Path) and not is_prompt_dir(e)}
    names: list[str] = []
    for entry in entries:
        if entry in builtins:
            names.append(entry)
            continue
        folder = Path(entry).expanduser()
        files = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
        if not files:
            return ()
        for f in files:
            name = f.stem
            if name in builtins or name in names:
                name = f"{folder.resolve().name}/{f.stem}"
            names.append(name)
    return tuple(names)


DRAFT_TRAIN_COST = CostModel(
    stages=DRAFT_TRAIN_STAGES,
    plan=plan_draft_train,
    done=done_draft_train,
    dtype=lambda cfg: cfg.target.dtype,
    tau_group=_tau_group,
    tau_sets=_prompt_set_names,
)
"""the cost model of ``draft_train`` trials"""
