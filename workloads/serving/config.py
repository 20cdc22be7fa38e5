"""The ``serve_bench`` trial config: a draft served by vLLM beside a server without one."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from workloads.config import TargetConfig, _Frozen
from workloads.decode_bench.config import BenchPromptsConfig


class ServedDraftConfig(_Frozen):
    """Which trained draft the server loads."""

    source: Literal["sweep", "trial", "path"] = "sweep"
    """sweep: the draft of the finished draft_train trial of ``sweep`` trained on
    ``pretrain.tokens`` with this trial's seed (read from its ``trained_with.json``); trial:
    ``sweep`` + ``trial_key``; path: a draft folder saved by draft_train"""
    sweep: str | None = "tokens"
    """draft_train sweep under the run root (``source: sweep`` or ``trial``)"""
    trial_key: str | None = None
    """trial key or unique prefix of >= 6 characters, or best (``source: trial``)"""
    path: str | None = None
    """draft folder (``source: path``)"""

    @model_validator(mode="after")
    def _check_source(self) -> ServedDraftConfig:
        if self.source == "path" and not self.path:
            raise ValueError("draft.source 'path' needs draft.path (a folder saved by draft_train)")
        if self.source in ("sweep", "trial") and not self.sweep:
            raise ValueError(
                f"draft.source {self.source!r} needs draft.sweep (a draft_train sweep)"
            )
        if self.source == "trial" and not self.trial_key:
            raise ValueError("draft.source 'trial' needs draft.trial_key (a key, prefix or best)")
        return self


class ServedPretrainConfig(_Frozen):
    """The pretraining budget of the draft served (``draft.source: sweep``)."""

    tokens: int | None = Field(default=None, ge=0)
    """pretraining tokens the draft was trained on (its draft_train ``pretrain.tokens``); the
    law axis of a serving sweep. None: only with draft.source trial or path"""


class ServeConfig(_Frozen):
    """The serving engine and how it is driven."""

    engine: Literal["vllm"] = "vllm"
    """vllm (SGLang's CPU build does not install here: docs/serving.md)"""
    python: str = "auto"
    """interpreter of the serving environment; auto: .venv-vllm/bin/python (make serve-env);
    on a GPU node, the Python of an environment with vllm and the plugin"""
    num_speculative_tokens: int = Field(default=3, ge=1, le=16)
    """K, draft tokens per verification step (vLLM's EAGLE drafts a chain of K)"""
    schedule: list[tuple[int, int, int]] | None = None
    """vLLM's ``num_speculative_tokens_per_batch_size``: ``[[range_start, range_end, K], ...]``,
    inclusive batch-size ranges from 1, K >= 0 (what ``orchestrator plan`` writes to
    ``vllm_speculative_config.json``); the speculating server then drafts K by its running
    batch size, and ``num_speculative_tokens`` must be the largest K. None: K at every b"""
    batch_sizes: list[int] = Field(default_factory=lambda: [1, 4, 16])
    """concurrency levels b the benchmark client drives, each at least 2b requests"""
    max_new_tokens: int = Field(default=48, ge=1, le=4096)
    """tokens generated per request (greedy pass: up to EOS; benchmark: exactly, EOS ignored)"""
    port: int = Field(default=0, ge=0, le=65535)
    """127.0.0.1 port of the server; 0 picks a free one"""
    kv_cache_gb: float = Field(default=2.0, gt=0, le=1024)
    """KV cache of a CPU server (VLLM_CPU_KVCACHE_SPACE), GiB"""
    max_model_len: int = Field(default=2048, ge=64)
    """context length the server allows (prompt + new tokens)"""
    enforce_eager: bool = False
    """skip vLLM's torch.compile warm-up: a faster start, a slower step"""
    ready_timeout_s: float = Field(default=900.0, gt=0)
    """seconds to wait for a server to answer /health before the trial fails"""
    baseline: bool = True
    """also start a server without speculation and measure it (speedup, greedy agreement)"""
    compare_engine: bool = True
    """also measure this platform's engine on the same prompts with a chain of K (agreement)"""

    @field_validator("batch_sizes", mode="after")
    @classmethod
    def _batch_sizes(cls, value: list[int]) -> list[int]:
        if not value or any(b < 1 or b > 1024 for b in value):
            raise ValueError("serve.batch_sizes must be a non-empty list of integers in [1, 1024]")
        return sorted(set(value))

    @model_validator(mode="after")
    def _check_schedule(self) -> ServeConfig:
        if self.schedule is None:
            return self
        ranges = sorted(self.schedule)
        ks = [k for _, _, k in ranges]
        ok = bool(ranges) and ranges[0][0] == 1 and min(ks) >= 0
        ok = ok and all(lo <= hi for lo, hi, _ in ranges)
        ok = ok and all(a[1] < b[0] for a, b in zip(ranges, ranges[1:], strict=False))
        if not ok:
            raise ValueError(
                f"serve.schedule {self.schedule}: vLLM takes [[range_start, range_end, K], ...] "
                "with inclusive, non-overlapping ranges starting at 1 and K >= 0. Fix: copy "
                "num_speculative_tokens_per_batch_size from a plan's vllm_speculative_config.json"
            )
        if max(ks) != self.num_speculative_tokens:
            raise ValueError(
                f"serve.schedule's largest K is {max(ks)}, serve.num_speculative_tokens "
                f"{self.num_speculative_tokens}: vLLM sizes its buffers for the latter. Fix: "
                f"serve.num_speculative_tokens: {max(ks)}"
            )
        return self

    def k_at(self, b: int) -> int:
        """K the speculating server drafts at batch size ``b`` (vLLM's lookup: a gap carries the
        previous range's K, the tail the last's)."""
        if self.schedule is None:
            return self.num_speculative_tokens
        k = 0
        for lo, _, k_range in sorted(self.schedule):
            if lo > b:
                break
            k = k_range
        return k


class ServeBenchConfig(_Frozen):
    """One ``serve_bench`` trial: a draft served in vLLM, against the same server without it."""

    seed: int = 0
    """seed of the draft served (``draft.source: sweep``) and of the servers"""
    target: TargetConfig = TargetConfig()
    """the target, served by vLLM and by this platform's engine in ``target.dtype``"""
    draft: ServedDraftConfig = ServedDraftConfig()
    pretrain: ServedPretrainConfig = ServedPretrainConfig()
    serve: ServeConfig = ServeConfig()
    prompts: BenchPromptsConfig = BenchPromptsConfig(prompt_sets=["humaneval", "sharegpt"])

    @model_validator(mode="after")
    def _check_budget(self) -> ServeBenchConfig:
        if self.target.dtype not in ("float32", "bfloat16"):
            raise ValueError(
                f"target.dtype {self.target.dtype!r}: serve_bench serves (and compares) in "
                "float32 or bfloat16. Fix: target.dtype: float32 (greedy outputs comparable "
                "token for token) or bfloat16"
            )
        return self
