"""Typed configuration of a ``decode_bench`` trial (validated once, at the edge).

Field rules are validators here; the rules that need the machine, the run root or the whole
sweep are :mod:`workloads.decode_bench.checks`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from workloads.config import NEW, TargetConfig, _Frozen, prompt_sets_value


class DraftSourceConfig(_Frozen):
    """Which draft ``decode_bench`` decodes with."""

    source: Literal["fresh", "trial", "path", "oracle"] = "fresh"
    """fresh: an untrained draft built from ``layers``/``output_norm`` (seeded); trial: the draft
    saved by a finished draft_train trial (``sweep`` + ``trial_key``, under the run root);
    path: a draft folder saved by draft_train; oracle: proposes the target's own greedy
    continuation (precomputed), so acceptance is known and only the engine's cost is measured"""
    path: str | None = None
    """draft folder (``source: path``)"""
    sweep: str | None = None
    """draft_train sweep name (``source: trial``)"""
    trial_key: str | None = None
    """trial key in that sweep, or a unique prefix of >= 6 characters (``source: trial``)"""
    oracle_accept: float = Field(default=1.0, ge=0.0, le=1.0, json_schema_extra=NEW)
    """``source: oracle`` only: probability that each oracle proposal is the target's greedy
    token; otherwise it is replaced by a wrong token (seeded), so acceptance length is set by it
    (about (1 - a**(d+1)) / (1 - a) for a chain of depth d) instead of being 1 or k. At
    temperature 0 only: the oracle knows the greedy continuation, so once a sampled token leaves
    it (temperature > 0) its proposals are wrong and acceptance falls to about 1"""
    layers: int = Field(default=1, ge=1, le=64)
    """D of a fresh draft"""
    output_norm: bool = True
    """RMSNorm before the LM head of a fresh draft"""

    @model_validator(mode="after")
    def _check_source(self) -> DraftSourceConfig:
        if self.source == "path" and not self.path:
            raise ValueError("draft.source 'path' needs draft.path (a folder saved by draft_train)")
        if self.source == "trial" and not (self.sweep and self.trial_key):
            raise ValueError("draft.source 'trial' needs draft.sweep and draft.trial_key")
        if self.oracle_accept != 1.0 and self.source != "oracle":
            raise ValueError(
                f"draft.oracle_accept {self.oracle_accept} applies to draft.source 'oracle' "
                f"only (source is {self.source!r}). Fix: remove it or use source: oracle"
            )
        return self


class DecodeConfig(_Frozen):
    """Tree speculative decoding of one batch shape."""

    batch_size: int = Field(default=1, ge=1, le=1024)
    """b, sequences decoded together (prompts of different lengths)"""
    depth: int = Field(default=4, ge=1, le=64)
    """draft steps per cycle (tree depth)"""
    topk: int = Field(default=4, ge=1, le=64)
    """children per expanded node"""
    num_draft_tokens: Annotated[int, Field(ge=2, le=1024)] | Literal["auto"] = 8
    """tokens verified per sequence per cycle, the tree root included; auto = chosen every
    cycle from the live batch size by ``k_law`` (Scylla Table 5, "Opt. top_k")"""
    k_law: str = Field(default="roofline", json_schema_extra=NEW)
    """``num_draft_tokens: auto`` only. roofline: the roofline's k_opt(b) (Scylla Sec. 3.2) for
    the target's shape on ``hardware``; sweep:NAME: the Eq. 4 law k = A*sqrt(1 + B/b) - C fitted
    on the finished decode_bench sweep NAME in the results DB"""
    hardware: str = Field(default="auto", json_schema_extra=NEW)
    """hardware profile of ``k_law: roofline`` (``orchestrator roofline --help`` lists them);
    auto: local-cpu measured on a CPU, the GPU's datasheet profile by name on CUDA"""
    k_max: int = Field(default=64, ge=2, le=1024, json_schema_extra=NEW)
    """``num_draft_tokens: auto``: largest k it may pick"""
    temperature: float = Field(default=0.0, ge=0.0, le=10.0)
    """0 = greedy (lossless token for token); > 0 = tree speculative sampling"""
    max_new_tokens: int = Field(default=32, ge=1, le=4096)
    """tokens generated per sequence"""
    compile: Literal["none", "graphs", "compile"] = Field(default="none", json_schema_extra=NEW)
    """none: eager; graphs: the verify and draft steps captured as CUDA graphs per (b, k) shape
    (CUDA only; a shape that cannot be captured runs eagerly, said once); compile:
    ``torch.compile`` of the same steps (CPU or CUDA)"""
    attn_implementation: Literal["sdpa", "eager"] = Field(default="sdpa", json_schema_extra=NEW)
    """the target's attention kernel (transformers ``attn_implementation``). Tree verification
    needs an arbitrary mask over a preallocated cache: kernels without one (flash_attention_2)
    are not offered, and flex_attention aborted the process on a CPU (heap corruption) with
    our 4-D mask"""

    @model_validator(mode="after")
    def _check_auto(self) -> DecodeConfig:
        if not (self.k_law == "roofline" or re.fullmatch(r"sweep:[\w.\-]+", self.k_law)):
            raise ValueError(
                f"decode.k_law {self.k_law!r} is not 'roofline' or 'sweep:NAME'. Fix: e.g. "
                "k_law: roofline, or k_law: sweep:batch (a finished decode_bench sweep)"
            )
        return self


class BenchPromptsConfig(_Frozen):
    """Prompts of a decode benchmark."""

    prompt_sets: list[str] | Path = Field(default_factory=lambda: ["sharegpt"])
    """builtin sets (humaneval, sharegpt held-out), directories of {"turns": [...]} JSONL files
    (one set per file), or both mixed in one list; a relative directory is read from the
    working directory orchestrator runs in (not the spec's folder)"""
    num_prompts: int = Field(default=8, ge=1)
    """prompts in all, taken round-robin over the sets, decoded in batches of batch_size"""

    @field_validator("prompt_sets", mode="after")
    @classmethod
    def _prompt_sets(cls, value: list[str] | Path) -> list[str] | Path:
        return prompt_sets_value(value, "prompts.prompt_sets")


class BaselineConfig(_Frozen):
    """Baselines measured in the same run."""

    autoregressive: bool = True
    """the engine's own autoregressive loop at the same batch size"""
    hf_generate: bool = True
    """HF ``generate`` with the same dtype and threads (batch size 1 only): greedy, or sampling
    at ``decode.temperature`` > 0 as the engine does"""


class DecodeBenchConfig(_Frozen):
    """One ``decode_bench`` trial: throughput and acceptance of tree speculative decoding."""

    seed: int = 0
    """seed of a fresh draft and of sampling at temperature > 0"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto: CUDA when present, else CPU"""
    target: TargetConfig = TargetConfig(dtype="auto")
    draft: DraftSourceConfig = DraftSourceConfig()
    decode: DecodeConfig = DecodeConfig()
    prompts: BenchPromptsConfig = BenchPromptsConfig()
    baselines: BaselineConfig = BaselineConfig()
    warmup: int = Field(default=1, ge=0, le=100)
    """untimed warm-up batches before measuring"""
