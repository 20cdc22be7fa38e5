"""The submit-time checks more than one workload shares: the target resolves, and every prompt a
trial decodes fits the target's positions. Each raises :class:`~workloads.config.ConfigError`
naming the field at fault and a fix (the spec names its file:line).

Heavy modules are imported inside the checks, once a spec is valid.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.config import ConfigError
from workloads.decode_bench.config import DecodeBenchConfig


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def check_targets(configs: Sequence[Any], _run_root: Path, **_: object) -> None:
    """Every ``target.model`` resolves: a builtin, a local folder or file, or a hub id that the
    hub knows (not downloaded; skipped offline); a builtin that overflows float16 is not asked
    for in float16.

    Raises:
        ConfigError: naming the target and the fix.
    """
    from workloads.models import target_source as ts

    offline = _truthy("HF_HUB_OFFLINE") or _truthy("TRANSFORMERS_OFFLINE")
    endpoint = os.environ.get("HF_ENDPOINT") or ts.HF_ENDPOINT
    for name in sorted({c.target.model for c in configs if c.target.weights == "pretrained"}):
        try:
            ts.check_target_source(name, offline=offline, endpoint=endpoint)
        except ValueError as exc:
            raise ConfigError(str(exc), ("target", "model")) from exc
    for name in sorted({c.target.model for c in configs if c.target.weights == "random"}):
        try:
            ts.check_random_target(name)
        except ValueError as exc:
            raise ConfigError(str(exc), ("target", "model")) from exc
    for name in sorted({c.target.model for c in configs if c.target.dtype == "float16"}):
        known = ts.builtin_target(name)
        if known is not None and not known.float16:
            raise ConfigError(
                f"target.model {name!r} overflows float16 (its logits are not finite, measured). "
                "Fix: target.dtype: bfloat16 (float16's range is too small for it)",
                ("target", "dtype"),
            )


@dataclass(frozen=True)
class PromptJob:
    """The prompts of one config to check against its target's positions."""

    model: str
    weights: str
    spec: list[str] | Path
    num_prompts: int
    round_robin: bool
    """``decode_bench``: the first ``num_prompts`` round-robin over the sets; else each set's"""
    max_new_tokens: int
    depth: int
    section: str
    """``eval`` or ``prompts``: the config block of ``prompt_sets``"""
    new_tokens_field: str


def check_prompt_jobs(jobs: Sequence[PromptJob], cache_dir: Path) -> None:
    """Each job's prompts fit its target's ``max_position_embeddings`` (see
    :func:`workloads.draft_train.checks.check_eval_prompts`); a prompt whose UTF-8 bytes (and the
    template's) already fit is not tokenised, and a target whose size or tokenizer is not on this
    machine is left to the trial."""
    from workloads.data.chat import TEMPLATE_BYTES, TURN_BYTES, chat_prompt_ids
    from workloads.data.prompts import check_prompt_room, load_prompt_sets, round_robin
    from workloads.models.target_source import target_max_positions

    tokenizers: dict[tuple[str, str], Any] = {}
    for job in {repr(j): j for j in jobs}.values():
        limit = target_max_positions(job.model, weights=job.weights)
        if limit is None:
            continue
        field = (job.section, "prompt_sets")
        try:
            sets = load_prompt_sets(job.spec, n=job.num_prompts)
        except ValueError as exc:
            raise ConfigError(str(exc), field) from exc
        named = [(s.name, i, text) for s in sets for i, text in enumerate(s.prompts)]
        if job.round_robin:
            order = round_robin(sets, job.num_prompts)
            named = [next(n for n in named if n[2] == text) for text in order]
        room = limit - job.max_new_tokens - job.depth
        for name, i, text in named:
            if len(text.encode()) + TEMPLATE_BYTES + TURN_BYTES <= room:
                continue  # a token covers at least one byte
            key = (job.model, job.weights)
            if key not in tokenizers:
                tokenizers[key] = _prompt_tokenizer(job.model, job.weights, cache_dir)
            if tokenizers[key] is None:
                break
            try:
                check_prompt_room(
                    len(chat_prompt_ids(tokenizers[key], text)),
                    where=f"{job.section}.prompt_sets {name!r} prompt {i + 1}",
                    max_new_tokens=job.max_new_tokens, depth=job.depth, max_positions=limit,
                    field=job.new_tokens_field, target=job.model,
                )  # fmt: skip
            except ValueError as exc:
                raise ConfigError(str(exc), field) from exc


def _prompt_tokenizer(model: str, weights: str, cache_dir: Path) -> Any | None:
    """The target's tokenizer, nothing written or downloaded; None when not on this machine."""
    from workloads.models.target import target_tokenizer

    return target_tokenizer(model, weights, cache_dir)


def check_bench_prompts(
    configs: Sequence[DecodeBenchConfig],
    run_root: Path,
    *,
    cache_dir: Path | None = None,
    **_: object,
) -> None:
    """Every benchmark prompt fits the target, as ``draft_train``'s evaluation prompts (the
    prompts ``decode_bench`` takes: ``prompts.num_prompts`` round-robin over the sets).

    Raises:
        ConfigError: blaming ``prompts.prompt_sets``.
    """
    jobs = []
    for c in configs:
        d = c.decode
        depth = d.depth if d.num_draft_tokens == "auto" else min(d.depth, d.num_draft_tokens - 1)
        jobs.append(
            PromptJob(
                c.target.model,
                c.target.weights,
                c.prompts.prompt_sets,
                c.prompts.num_prompts,
                True,
                d.max_new_tokens,
                depth,
                "prompts",
                "decode.max_new_tokens",
            )  # fmt: skip
        )
    check_prompt_jobs(jobs, cache_dir or run_root / "cache")
