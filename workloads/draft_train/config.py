"""Typed configuration of a ``draft_train`` trial (validated once, at the edge).

A sweep YAML's ``base:`` block and every grid point are parsed into :class:`DraftTrainConfig`;
nothing downstream reads raw dicts. Field rules are validators here; the rules that need the
machine, the target or the whole sweep are :mod:`workloads.draft_train.checks`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from workloads.config import NEW, TargetConfig, _Frozen, before, prompt_sets_value

DEEPSPEED_OWNED = {
    "train_batch_size": "train.batch_size",
    "train_micro_batch_size_per_gpu": "train.batch_size and train.workers",
    "gradient_accumulation_steps": "train.batch_size (one step per global batch)",
    "gradient_clipping": "train.grad_clip",
    "optimizer": "AdamW (0.9, 0.95) with the stage's lr and train.weight_decay",
    "scheduler": "the stage's warmup + cosine schedule",
}
"""DeepSpeed keys the trial config sets itself -> the field that sets them"""

DEEPSPEED_UNSUPPORTED = ("fp16", "amp")
"""float16 mixed precision: the draft trains with float32 master weights, in bfloat16 autocast
(``train.precision``) or DeepSpeed's own ``bf16`` block"""


def check_deepspeed_config(ds: dict[str, Any]) -> None:
    """Refuse DeepSpeed keys the trial sets itself, mixed precision and ZeRO stage 3.

    Everything else (``zero_optimization`` options, ``communication_data_type``, ...) goes to
    DeepSpeed as given; DeepSpeed validates it when the workers start.

    Raises:
        ValueError: an owned or unsupported key, or a ZeRO stage outside 0-2, with a fix.
    """
    for key, owner in DEEPSPEED_OWNED.items():
        if key in ds:
            raise ValueError(
                f"train.deepspeed.{key} is set by {owner}; remove it from train.deepspeed"
            )
    for key in DEEPSPEED_UNSUPPORTED:
        if key in ds:
            raise ValueError(
                f"train.deepspeed.{key}: float16 mixed precision is not supported (the draft "
                "keeps float32 master weights); remove it, and use train.precision: bf16 or "
                "train.deepspeed.bf16: {enabled: true}"
            )
    zero = ds.get("zero_optimization", {})
    if not isinstance(zero, dict):
        raise ValueError("train.deepspeed.zero_optimization must be a mapping, e.g. {stage: 2}")
    stage = zero.get("stage", 0)
    if stage not in (0, 1, 2):
        raise ValueError(
            f"train.deepspeed.zero_optimization.stage {stage!r} is not supported; use 0, 1 or 2 "
            "(stage 3 partitions the weights, and the draft's are small: stages 1-2 shard its "
            "optimiser state and gradients)"
        )


CORPUS_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".parquet", ".txt")
"""local corpus files a ``pretrain.corpus`` source may name (directly or by a glob)"""

BUILTIN_SOURCES = ("sharegpt", "stdlib")
"""corpus sources shipped with the platform (see :mod:`workloads.data.corpus`)"""


class CorpusSource(_Frozen):
    """One source of the pretraining corpus: builtin, local files, or a Hugging Face dataset."""

    source: str
    """``sharegpt`` or ``stdlib`` (builtin); a local file, folder or glob of .jsonl, .jsonl.gz,
    .json, .parquet or .txt files; or ``hf:<dataset id>`` (streamed from the Hugging Face hub,
    the only case in which anything is downloaded)"""
    weight: float = Field(default=1.0, gt=0)
    """share of the corpus's tokens from this source (normalised over the sources)"""
    text_field: str = "text"
    """the field holding a document's text (jsonl, parquet, hf; ignored for .txt and builtins)"""
    subset: str | None = None
    """``hf:``: the dataset's configuration (subset) name"""
    split: str = "train"
    """``hf:``: the split to read"""

    @property
    def kind(self) -> Literal["builtin", "files", "hf"]:
        """Where the documents come from."""
        if self.source in BUILTIN_SOURCES:
            return "builtin"
        return "hf" if self.source.startswith("hf:") else "files"

    @model_validator(mode="after")
    def _check_source(self) -> CorpusSource:
        src = self.source
        if self.kind == "hf" and not src[3:].strip():
            raise ValueError("pretrain.corpus source 'hf:' needs a dataset id, e.g. hf:org/name")
        if self.kind == "files":
            is_glob = any(ch in src for ch in "*?[")
            if not is_glob and not Path(src).expanduser().is_dir():  # noqa: SIM102
                if not src.endswith(CORPUS_SUFFIXES):
                    raise ValueError(
                        f"pretrain.corpus source {src!r} is not a builtin "
                        f"({', '.join(BUILTIN_SOURCES)}), not 'hf:<id>' and not a file of a "
                        f"known kind ({', '.join(CORPUS_SUFFIXES)}); name one of those, a "
                        "folder or a glob"
                    )
        return self


DEFAULT_PRETRAIN_MIX = {"sharegpt": 0.8, "stdlib": 0.2}
"""share of characters per builtin source when no ``pretrain.corpus`` is named"""


class PretrainConfig(_Frozen):
    """Stage 1: draft pretraining on raw text."""

    tokens: int = Field(default=0, ge=0)
    """pretraining tokens seen, counted after packing (0 = SFT only)"""
    seq_len: int = Field(default=256, ge=16, le=8192)
    """tokens per packed sequence"""
    mix: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_PRETRAIN_MIX))
    """share of characters per source: sharegpt (pretrain split as plain text), stdlib (Python)"""
    lr: float = Field(default=1e-3, gt=0, le=1.0)
    """peak AdamW learning rate (cosine decay, linear warmup)"""
    schedule: Literal["cosine", "wsd-fork"] = Field(default="cosine", json_schema_extra=NEW)
    """cosine: each budget trained on its own (warmup, cosine decay to 10%); wsd-fork: budgets
    share one warmup-stable trunk (constant peak LR, corpus order) in the cache and each decays
    in a short branch of its own (linear to 10%)"""
    decay_frac: float = Field(default=0.2, gt=0, le=1, json_schema_extra=NEW)
    """wsd-fork: share of a budget's pretraining steps in its decay branch"""
    packing: Literal["isolated", "joined"] = Field(
        default="isolated", json_schema_extra=before("joined")
    )
    """how documents share a packed row, in both stages, the target features and the draft:
    isolated = each document attends only to itself, positions from 0, no loss target across a
    boundary (as at inference); joined = documents end to end, one causal row (before issue 13)"""
    corpus: list[CorpusSource] | None = Field(default=None, json_schema_extra=NEW)
    """the pretraining corpus at scale: sources with token weights, tokenised once into a
    token-shard cache (see :mod:`workloads.data.shards`); None = the builtin ``mix`` (about
    10M tokens). A budget larger than the corpus is refused at submit unless ``repeat``"""
    repeat: bool = Field(default=False, json_schema_extra=NEW)
    """``corpus``: start over from its first token when the budget runs past its end (epochs);
    off = refuse a budget larger than the corpus"""

    @model_validator(mode="after")
    def _check_mix(self) -> PretrainConfig:
        unknown = set(self.mix) - {"sharegpt", "stdlib"}
        if unknown:
            raise ValueError(
                f"pretrain.mix has unknown sources {sorted(unknown)}; use sharegpt, stdlib"
            )
        if any(v < 0 for v in self.mix.values()) or sum(self.mix.values()) <= 0:
            raise ValueError("pretrain.mix shares must be >= 0 with a positive sum")
        if self.corpus is not None and not self.corpus:
            raise ValueError("pretrain.corpus is empty; name at least one source, or remove it")
        if self.corpus is not None and self.mix != DEFAULT_PRETRAIN_MIX:
            raise ValueError(
                "pretrain.mix applies to the builtin corpus only and pretrain.corpus replaces it; "
                "give the shares as pretrain.corpus weights and remove pretrain.mix"
            )
        if self.repeat and self.corpus is None:
            raise ValueError(
                "pretrain.repeat needs pretrain.corpus (the builtin mix never repeats)"
            )
        return self


class SFTConfig(_Frozen):
    """Stage 2: supervised fine-tuning on ShareGPT with the target's chat template."""

    tokens: int = Field(default=16384, ge=0)
    """distinct chat tokens used (loss on assistant tokens only), counted after packing"""
    epochs: int = Field(default=2, ge=1, le=100)
    """passes over the SFT tokens (the paper: 2)"""
    seq_len: int = Field(default=512, ge=16, le=8192)
    """tokens per packed sequence"""
    lr: float = Field(default=1e-3, gt=0, le=1.0)
    """peak AdamW learning rate (cosine decay, linear warmup)"""
    responses: Literal["dataset", "target"] = Field(
        default="target", json_schema_extra=before("dataset")
    )
    """assistant replies: dataset = ShareGPT's own (ChatGPT's); target = the first user turn of
    each chat answered by the target itself (regenerated once, cached for every trial)"""
    regen_temperature: float = Field(default=0.0, ge=0, le=10, json_schema_extra=NEW)
    """responses 'target': 0 = greedy replies; > 0 = sampled at this temperature (seeded)"""
    regen_max_new_tokens: int = Field(default=256, ge=1, le=8192, json_schema_extra=NEW)
    """responses 'target': tokens per regenerated reply at most, capped at half of seq_len;
    chats whose prompt does not fit in the rest of a row are skipped"""
    regen_engine: Literal["engine", "vllm"] = Field(default="engine", json_schema_extra=NEW)
    """responses 'target': what generates the replies: engine = this platform's batched AR loop
    (no start-up; the faster below ~7K reply tokens on a 2-core CPU); vllm = a vLLM server
    without speculation from the serving environment (``make serve-env``; ~2.5 min start-up,
    then 3.2x the AR loop there; docs/serving.md)"""
    regen_python: str = Field(default="auto", min_length=1, json_schema_extra=NEW)
    """regen_engine 'vllm': the serving environment's Python (auto: ``.venv-vllm``)"""

    @model_validator(mode="after")
    def _regen_engine_needs_target_replies(self) -> SFTConfig:
        if self.regen_engine != "engine" and self.responses != "target":
            raise ValueError(
                f"regen_engine {self.regen_engine!r} generates the target's replies, but "
                f"responses is {self.responses!r} (nothing is regenerated; the trial key would "
                "change for nothing). Fix: responses: target, or leave regen_engine out"
            )
        return self

    @property
    def regen_reply_tokens(self) -> int:
        """Tokens per regenerated reply at most: ``regen_max_new_tokens``, at most seq_len/2."""
        return min(self.regen_max_new_tokens, self.seq_len // 2)


class DraftConfig(_Frozen):
    """The draft architecture (EAGLE/Scylla family)."""

    layers: int = Field(default=1, ge=1, le=64)
    """D, LLaMA decoder layers"""
    output_norm: bool = True
    """RMSNorm before the LM head (Scylla) or not (EAGLE-1)"""
    input_norm: bool = Field(default=True, json_schema_extra=NEW)
    """RMSNorm on the first decoder layer's input (HF LLaMA); EAGLE-1/2's code has none"""
    rope_theta: float | None = Field(default=None, gt=0, json_schema_extra=NEW)
    """RoPE base of the draft; None = the target's (EAGLE-1's code hard-codes 10000)"""
    vocab_size: int = Field(default=8192, ge=0)
    """draft LM head over the N most frequent target tokens of the training data; 0 = full"""
    vocab_tokens: int | None = Field(default=None, ge=0, json_schema_extra=NEW)
    """pretraining tokens the draft vocabulary is counted over (with the SFT rows); None = the
    trial's own budget. wsd-fork needs a fixed value (e.g. the largest budget): its trunk is
    shared by every budget, so its vocabulary must not depend on the budget"""
    fusion: Literal["none", "eagle3"] = Field(default="none", json_schema_extra=NEW)
    """none: the draft reads the target's last-layer hidden state (Scylla, EAGLE-1/2); eagle3:
    it reads the hidden states of several target layers (``fusion_layers``) through a linear
    fusion layer, EAGLE-3's low/mid/high features (arXiv 2503.01840 Sec. 3)"""
    fusion_layers: tuple[int, ...] | None = Field(default=None, json_schema_extra=NEW)
    """``fusion: eagle3``: the target layers read, each the input of that decoder layer (0 = the
    embeddings; vLLM's ``eagle_aux_hidden_state_layer_ids``); None = vLLM's and SpecForge's
    default (2, L // 2, L - 3) for a target of L layers"""

    @model_validator(mode="after")
    def _check_fusion(self) -> DraftConfig:
        layers = self.fusion_layers
        if layers is None:
            return self
        if self.fusion == "none":
            raise ValueError(
                f"draft.fusion_layers {list(layers)} are read only with draft.fusion: eagle3. "
                "Fix: add draft.fusion: eagle3, or remove draft.fusion_layers"
            )
        if not layers or len(set(layers)) != len(layers) or min(layers) < 0:
            raise ValueError(
                f"draft.fusion_layers {list(layers)} must be distinct target layer indices >= 0. "
                "Fix: e.g. [2, 15, 27] for a 30-layer target, or remove it for EAGLE-3's default"
            )
        if list(layers) != sorted(layers):  # the layers are read in order: one spelling, one key
            return self.model_copy(update={"fusion_layers": tuple(sorted(layers))})
        return self

    @property
    def feature_copies(self) -> int:
        """Hidden-state vectors per token the draft's features hold: 1 (the last layer), plus
        one per fused layer (``fusion: eagle3``; the default choice has 3)."""
        if self.fusion == "none":
            return 1
        return 1 + (len(self.fusion_layers) if self.fusion_layers is not None else 3)


class TrainConfig(_Frozen):
    """Optimisation, shared by both stages."""

    batch_size: int = Field(default=4, ge=1)
    """sequences per optimiser step"""
    warmup_steps: int = Field(default=10, ge=0)
    """linear warmup steps per stage"""
    weight_decay: float = Field(default=0.0, ge=0)
    grad_clip: float = Field(default=0.5, gt=0)
    """max global gradient norm (EAGLE: 0.5)"""
    w_reg: float = Field(default=1.0, ge=0)
    """weight of SmoothL1(predicted hidden, target hidden) (EAGLE: 1.0)"""
    w_cls: float = Field(default=0.1, ge=0)
    """weight of cross-entropy against the target's next-token distribution (EAGLE: 0.1)"""
    feature_noise: float = Field(default=0.2, ge=0, le=10, json_schema_extra=before(0.0))
    """EAGLE's uniform noise on the draft's input hidden states in training, (U - 0.5) *
    feature_noise * 512 / seq_len per element (EAGLE eagle/train/main.py AddUniformNoise,
    train_config std 0.2); 0 = off; never applied at evaluation"""
    checkpoint_every: int = Field(default=100, ge=0, json_schema_extra=NEW)
    """optimiser steps between checkpoints in the trial folder; a retried trial resumes from
    the newest (0 = only at the end of each stage)"""
    workers: int = Field(default=1, ge=1, le=1024, json_schema_extra=NEW)
    """data-parallel training workers (Ray Train, DDP: gloo on CPU, NCCL on GPU), each taking
    resources.num_cpus / workers CPUs and num_gpus / workers GPUs; the global batch stays
    batch_size rows; 1 = train in the trial's own process. On workers there are no
    checkpoints (a retried trial trains again) and no wsd-fork schedule"""
    precision: Literal["auto", "fp32", "bf16"] = Field(default="auto", json_schema_extra=NEW)
    """fp32: everything in float32; bf16: float32 master weights and optimiser, the forward in
    bfloat16 autocast, the frozen embedding and LM head in bfloat16; auto: bf16 on CUDA (TF32
    on), fp32 on the CPU"""
    keep_checkpoints: int = Field(default=2, ge=1, le=1000, json_schema_extra=NEW)
    """newest checkpoints kept in the trial folder (older ones are deleted as new ones land)"""
    deepspeed: dict[str, Any] | None = Field(default=None, json_schema_extra=NEW)
    """DeepSpeed config for the workers instead of DDP, e.g. {zero_optimization: {stage: 2}}
    (ZeRO stage 0-2; batch sizes, clipping, optimiser and schedule come from this block); for
    GPU clusters: a sweep needs resources.num_gpus; None = DDP"""
    ttt_steps: int = Field(default=1, ge=1, le=16, json_schema_extra=NEW)
    """training-time test (EAGLE-3, arXiv 2503.01840; HASS, arXiv 2408.15766): the draft is
    unrolled this many steps per training row, each step fed its own previous outputs as the
    decoder feeds them, its loss weighted ttt_decay^step; 1 = the draft fed target features
    only (EAGLE-1/Scylla training)"""
    ttt_decay: float = Field(default=0.8, gt=0, le=1, json_schema_extra=NEW)
    """weight of unrolled step k's loss is ttt_decay^k (SpecForge and EAGLE-3: 0.8)"""

    @property
    def on_workers(self) -> bool:
        """Whether training runs on Ray Train workers (more than one, or DeepSpeed)."""
        return self.workers > 1 or self.deepspeed is not None

    @model_validator(mode="after")
    def _check_deepspeed(self) -> TrainConfig:
        if self.deepspeed is not None:
            check_deepspeed_config(self.deepspeed)
        return self


class EvalConfig(_Frozen):
    """Acceptance-length evaluation with tree speculative decoding at temperature 0."""

    prompt_sets: list[str] | Path = Field(default_factory=lambda: ["humaneval", "sharegpt"])
    """builtin sets (humaneval, sharegpt held-out), directories of {"turns": [...]} JSONL files
    (one set per file), or both mixed in one list; a relative directory is read from the
    working directory orchestrator runs in (not the spec's folder)"""
    num_prompts: int = Field(default=8, ge=1)
    """prompts per set"""
    max_new_tokens: int = Field(default=48, ge=1, le=4096)
    """tokens generated per prompt"""
    depth: int = Field(default=3, ge=1, le=32)
    """draft steps per cycle (tree depth)"""
    topk: int = Field(default=4, ge=1, le=64)
    """children per expanded node"""
    num_draft_tokens: int = Field(default=8, ge=2, le=1024)
    """tokens verified per cycle, the tree root included (SGLang speculative_num_draft_tokens)"""
    during_training_every: int = Field(default=0, ge=0, json_schema_extra=NEW)
    """acceptance during training: training tokens between acceptance checks in each stage (a
    check whenever a stage's tokens seen pass a multiple of it, and at each stage's end), on the
    first ``during_training_prompts`` prompts of each set with this tree; 0 = only the final
    evaluation"""
    during_training_prompts: int = Field(default=2, ge=1, json_schema_extra=NEW)
    """prompts per set at each check during training (at most ``num_prompts``)"""

    @model_validator(mode="after")
    def _check_during_training(self) -> EvalConfig:
        if self.during_training_every and self.during_training_prompts > self.num_prompts:
            raise ValueError(
                f"eval.during_training_prompts {self.during_training_prompts} is more than the "
                f"{self.num_prompts} prompts per set evaluated (eval.num_prompts). Fix: "
                f"eval.during_training_prompts: {self.num_prompts} or fewer"
            )
        return self

    @field_validator("prompt_sets", mode="after")
    @classmethod
    def _prompt_sets(cls, value: list[str] | Path) -> list[str] | Path:
        return prompt_sets_value(value, "eval.prompt_sets")


class FeaturesConfig(_Frozen):
    """Where the draft's inputs, the target's hidden states, come from."""

    mode: Literal["auto", "cached", "online"] = "auto"
    """cached: computed once into the shared cache (fp16 [rows, seq_len, hidden], 2 bytes per
    element) and read lazily; online: computed by the target inside each training step, nothing
    on disk (SpecForge's and speculators' online mode); auto: cached while a stage's tokens x
    hidden x 2 bytes stay under ``max_cache_gb``, online above"""
    max_cache_gb: float = Field(default=20.0, gt=0)
    """auto: the largest feature set (GiB, per stage) cached on disk"""


class DraftTrainConfig(_Frozen):
    """One ``draft_train`` trial: pretrain on T tokens, SFT, evaluate acceptance length."""

    seed: int = 0
    """seed of the draft initialisation and data order"""
    device: Literal["auto", "cpu", "cuda"] = Field(default="auto", json_schema_extra=NEW)
    """where the target, the features, the draft's training and evaluation run; auto: CUDA when
    present, else CPU. With train.workers > 1 the trial keeps one GPU for features and evaluation"""
    features: FeaturesConfig = Field(default=FeaturesConfig(), json_schema_extra=NEW)
    target: TargetConfig = TargetConfig()
    pretrain: PretrainConfig = PretrainConfig()
    sft: SFTConfig = SFTConfig()
    draft: DraftConfig = DraftConfig()
    train: TrainConfig = TrainConfig()
    eval: EvalConfig = EvalConfig()

    @model_validator(mode="after")
    def _check_wsd_vocab(self) -> DraftTrainConfig:
        if (
            self.pretrain.schedule == "wsd-fork"
            and self.draft.vocab_size
            and self.draft.vocab_tokens is None
        ):
            raise ValueError(
                "pretrain.schedule 'wsd-fork' shares one trunk across budgets, so the draft "
                "vocabulary must not depend on the budget: set draft.vocab_tokens (e.g. the "
                "largest budget) or draft.vocab_size: 0"
            )
        return self

    @model_validator(mode="after")
    def _check_ttt(self) -> DraftTrainConfig:
        k = self.train.ttt_steps
        if k == 1:
            return self
        if self.train.on_workers:
            raise ValueError(
                f"train.ttt_steps {k} runs the draft {k} times per step, which data-parallel "
                "workers do not take (one forward per backward). Fix: train.workers: 1 without "
                "train.deepspeed, or train.ttt_steps: 1"
            )
        used = [c.seq_len for c in (self.pretrain, self.sft) if c.tokens]  # stages with rows
        shortest = min(used or [self.pretrain.seq_len, self.sft.seq_len])
        if k + 2 > shortest:
            raise ValueError(
                f"train.ttt_steps {k} needs training rows of at least {k + 2} tokens (the "
                f"unrolled chain and its target), but a row has {shortest}. Fix: "
                f"train.ttt_steps: {max(1, shortest - 2)} or longer pretrain.seq_len/sft.seq_len"
            )
        return self

    @model_validator(mode="after")
    def _check_during_training(self) -> DraftTrainConfig:
        every = self.eval.during_training_every
        if every and (self.train.on_workers or self.pretrain.schedule == "wsd-fork"):
            raise ValueError(
                f"eval.during_training_every {every} checks the draft between steps in the "
                "trial's own process; training workers and a shared wsd-fork trunk train "
                "elsewhere. Fix: eval.during_training_every: 0, or train.workers: 1 without "
                "train.deepspeed and pretrain.schedule: cosine"
            )
        return self

    @model_validator(mode="after")
    def _check_wsd_workers(self) -> DraftTrainConfig:
        if self.pretrain.schedule == "wsd-fork" and self.train.on_workers:
            raise ValueError(
                "pretrain.schedule 'wsd-fork' extends its shared trunk in the trial's own "
                "process, not on training workers: use train.workers: 1 without "
                "train.deepspeed, or pretrain.schedule: cosine"
            )
        return self
