"""The workload registry: every workload a sweep may name, each declared once.

A :class:`Workload` descriptor says all the orchestrator needs to know of a workload: its trial
config model, how to run one trial, what to check before a sweep starts, which metrics its
progress line and ``status`` table show, and which report its sweep gets. The orchestrator reads
these fields and never compares a workload's name, so adding a workload is its own module plus
one entry in :data:`WORKLOADS` (see docs/workloads.md, "Adding a workload").

This module stays light (pydantic only): heavy modules (torch, transformers) are imported inside
the ``run`` and ``preflight`` functions, on the worker or once a spec is valid.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from workloads.config import (
    ConfigError,
    DecodeBenchConfig,
    DecodeConfig,
    DraftTrainConfig,
    Resources,
)
from workloads.result import Progress, TrialResult
from workloads.serving.config import ServeBenchConfig
from workloads.sleep import SleepConfig
from workloads.sleep import run as run_sleep
from workloads.trial_cost import DRAFT_TRAIN_COST, CostModel

Report = Literal["law", "throughput", "table"]
"""what a sweep of the workload gets after its trials:

- ``law``: acceptance length against the grid's law axis (pretraining tokens, draft depth, ...),
  fitted with CIs and R², or main effects for a sweep of variants;
- ``throughput``: the peak throughput per batch size, fitted against batch size, with the
  roofline;
- ``table``: the trial table only (a workload that measures no law)."""


@dataclass(frozen=True)
class TrialContext:
    """Where one trial runs: its shared cache, its own output folder, the run root (to find
    other sweeps' trials), a progress callback and the spec's Ray resources."""

    cache_dir: Path
    out_dir: Path
    """exists when ``run`` is called"""
    run_root: Path
    progress: Progress
    resources: Resources

    @classmethod
    def local(cls, out_dir: Path, *, cache_dir: Path | None = None) -> TrialContext:
        """A context for running a trial by hand (a test, a notebook): ``out_dir`` created,
        the cache beside it unless given, progress printed, default resources."""
        out_dir.mkdir(parents=True, exist_ok=True)
        return cls(
            cache_dir=cache_dir or out_dir.parent / "cache",
            out_dir=out_dir,
            run_root=out_dir.parent,
            progress=print,
            resources=Resources(),
        )


class Preflight(Protocol):
    """A check at submit: ``(distinct trial configs, run root, *, cache_dir, dry_run)``; raises
    :class:`ConfigError` (or ``ValueError``) naming the field at fault.

    ``cache_dir`` is the cache the trials will use (``--cache-dir``; None: ``<run root>/cache``),
    where a check may read what is cached and leave what the trials reuse (the corpus check's
    token shards) once the sweep is accepted; with ``dry_run`` a check writes nothing at all.
    Checks that need neither take ``**_``.
    """

    def __call__(
        self,
        configs: Sequence[Any],
        run_root: Path,
        /,
        *,
        cache_dir: Path | None = None,
        dry_run: bool = False,
    ) -> None: ...


Describe = Callable[[Sequence[Any]], list[str]]
"""``(distinct trial configs) -> lines``: what the sweep will cost, printed by ``--dry-run``"""


@dataclass(frozen=True)
class Workload:
    """One workload as the orchestrator sees it.

    Attributes:
        name: the spec's ``workload:`` value.
        config_model: the pydantic model of one trial's config.
        run: ``(config, context) -> TrialResult``; raises on a trial error (recorded as failed).
        preflight: checks run at submit over the distinct configs, before anything is written.
        progress: ``(metric, format)`` pairs of the console line of a completed trial; a metric
            a trial does not report, or reports as NaN (undefined), is shown as ``n/a``.
        status_columns: metrics of the ``orchestrator status`` table.
        report: which report the sweep gets (:data:`Report`).
        summary: one line for ``--help`` and the docs.
        example: a shipped sweep of the workload, named by spec errors as an example.
        describe: what the sweep will cost (tokens, disk, ...), for ``--dry-run``; no lines
            when None.
        cost: how its trials' stages cost before they run (``submit --dry-run``, the submit
            banner, adaptive designs; :mod:`workloads.trial_cost`); None: their cost is unknown.
        law_axes: the config fields (dotted) over which the workload's metric follows a
            log-linear law, the axes a spec's ``design:`` may vary (none: no adaptive design).
        law_metrics: the metrics such a law may be of, the first a design's default (a metric
            ``m`` also allows its per-set ``m/<set>``).
    """

    name: str
    config_model: type[BaseModel]
    run: Callable[[Any, TrialContext], TrialResult]
    summary: str
    preflight: tuple[Preflight, ...] = ()
    progress: tuple[tuple[str, str], ...] = ()
    status_columns: tuple[str, ...] = ()
    report: Report = "table"
    example: str = "sweeps/tokens.yaml"
    describe: Describe | None = None
    law_axes: tuple[str, ...] = ()
    law_metrics: tuple[str, ...] = ()
    cost: CostModel | None = None


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


@dataclass(frozen=True)
class _PromptJob:
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


def _check_prompt_jobs(jobs: Sequence[_PromptJob], cache_dir: Path) -> None:
    """Each job's prompts fit its target's ``max_position_embeddings`` (see
    :func:`check_eval_prompts`); a prompt whose UTF-8 bytes (and the template's) already fit
    is not tokenised, and a target whose size or tokenizer is not on this machine is left to
    the trial."""
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
        _PromptJob(
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
    _check_prompt_jobs(jobs, cache_dir or run_root / "cache")


def check_bench_prompts(
    configs: Sequence[DecodeBenchConfig],
    run_root: Path,
    *,
    cache_dir: Path | None = None,
    **_: object,
) -> None:
    """Every benchmark prompt fits the target, as :func:`check_eval_prompts` (the prompts
    ``decode_bench`` takes: ``prompts.num_prompts`` round-robin over the sets).

    Raises:
        ConfigError: blaming ``prompts.prompt_sets``.
    """
    jobs = []
    for c in configs:
        d = c.decode
        depth = d.depth if d.num_draft_tokens == "auto" else min(d.depth, d.num_draft_tokens - 1)
        jobs.append(
            _PromptJob(
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
    _check_prompt_jobs(jobs, cache_dir or run_root / "cache")


def check_feature_disks(
    configs: Sequence[DraftTrainConfig],
    run_root: Path,
    *,
    cache_dir: Path | None = None,
    **_: object,
) -> None:
    """The cached features fit the free disk of the cache
    (:func:`workloads.cost.check_feature_disk`).

    Raises:
        ConfigError: blaming ``features.mode``, with both sizes and the fix.
    """
    from workloads.cost import check_feature_disk

    check_feature_disk(configs, cache_dir or run_root / "cache")


def check_decode(configs: Sequence[DecodeBenchConfig], run_root: Path, **_: object) -> None:
    """The draft each config names, its device and prompt sets (no model is loaded).

    Raises:
        ValueError: as :func:`workloads.decode_bench.preflight`.
    """
    from workloads.decode_bench import preflight

    for cfg in {c.draft.model_dump_json(): c for c in configs}.values():
        preflight(cfg, run_root)


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


def draft_vocab_size(folder: Path) -> int | None:
    """N, the vocabulary of the draft saved in ``folder`` (``draft_to_target`` [N] in its
    ``draft.safetensors``), read from the file's header alone; None when it cannot be read."""
    try:
        with (folder / "draft.safetensors").open("rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size)) if 0 < size < 100_000_000 else {}
    except (OSError, ValueError):
        return None
    shape = header.get("draft_to_target", {}).get("shape") if isinstance(header, dict) else None
    return int(shape[0]) if isinstance(shape, list) and len(shape) == 1 else None


def check_decode_tree(configs: Sequence[DecodeBenchConfig], run_root: Path, **_: object) -> None:
    """``decode.topk`` fits the vocabulary of a saved draft (``source: trial`` or ``path``),
    read from its ``draft.safetensors`` header (fresh and oracle drafts use the target's).

    Raises:
        ConfigError: blaming ``decode.topk``, naming the draft folder and both sizes.
    """
    from workloads.decode_bench import find_trial_draft

    for c in configs:
        src = c.draft
        if src.source == "path":
            folder = Path(str(src.path)).expanduser()
        elif src.source == "trial":
            try:
                folder = find_trial_draft(run_root, str(src.sweep), str(src.trial_key))
            except ValueError:
                continue  # refused by check_decode with its own message
        else:
            continue
        n = draft_vocab_size(folder)
        if n is not None and n < c.decode.topk:
            raise ConfigError(
                f"decode.topk {c.decode.topk} is larger than the vocabulary of the draft in "
                f"{folder} ({n} tokens): each tree node takes its topk most likely draft "
                f"tokens. Fix: decode.topk <= {n}, or a draft trained with a larger "
                "draft.vocab_size",
                ("decode", "topk"),
            )


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def check_decode_kernels(
    configs: Sequence[DecodeBenchConfig], _run_root: Path, **_: object
) -> None:
    """``decode.compile: graphs`` needs a CUDA GPU (CUDA graphs): refused with ``device: cpu``,
    or ``auto`` on a machine whose torch sees none; ``compile`` (torch.compile) runs anywhere.

    Raises:
        ConfigError: blaming ``decode.compile``, with a fix.
    """
    graphs = [c for c in configs if c.decode.compile == "graphs"]
    on_cpu = [c for c in graphs if c.device == "cpu"]
    if not on_cpu and any(c.device == "auto" for c in graphs) and not _cuda_available():
        on_cpu = [c for c in graphs if c.device == "auto"]
    if on_cpu:
        where = (
            "device is cpu"
            if on_cpu[0].device == "cpu"
            else "device is auto and torch sees no CUDA GPU on this machine"
        )
        raise ConfigError(
            f"decode.compile 'graphs' captures CUDA graphs and needs a CUDA GPU, but {where}. "
            "Fix: decode.compile: compile (torch.compile, CPU or CUDA) or none, or submit "
            "from a machine with a GPU (device: auto or cuda)",
            ("decode", "compile"),
            ("device",),
        )


_K_LAW_FIELDS = ("k_law", "hardware", "k_max")
"""fields of ``decode`` that only ``num_draft_tokens: auto`` reads"""


def check_k_laws(configs: Sequence[DecodeBenchConfig], run_root: Path, **_: object) -> None:
    """The k law of ``num_draft_tokens: auto`` (:func:`workloads.engine.k_law.check_k_law`: hardware
    profile, the fitted sweep of ``sweep:NAME``); and ``decode.k_law``, ``hardware`` or
    ``k_max`` set in a sweep where no trial uses ``auto`` is refused. A sweep mixing fixed k
    and ``auto`` may set them.

    Raises:
        ConfigError: blaming the field, with a fix.
    """
    from workloads.engine.k_law import check_k_law

    auto = [c for c in configs if c.decode.num_draft_tokens == "auto"]
    if not auto:
        defaults = DecodeConfig()
        for name in _K_LAW_FIELDS:
            values = {getattr(c.decode, name) for c in configs} - {getattr(defaults, name)}
            if values:
                raise ConfigError(
                    f"decode.{name} {sorted(values, key=str)[0]!r} only applies to "
                    "decode.num_draft_tokens: auto, and no trial of this sweep uses auto. "
                    f"Fix: remove decode.{name}, or add auto to decode.num_draft_tokens",
                    ("decode", name),
                    ("decode", "num_draft_tokens"),
                )
        return
    for c in {c.decode.model_dump_json() + c.target.dtype: c for c in auto}.values():
        check_k_law(c.decode, run_root, dtype=c.target.dtype)


def _describe_draft_train(configs: Sequence[DraftTrainConfig]) -> list[str]:
    from workloads.cost import describe_cost

    return describe_cost(configs)


def _run_draft_train(cfg: DraftTrainConfig, ctx: TrialContext) -> TrialResult:
    from workloads import draft_train

    return draft_train.run(
        cfg,
        cache_dir=ctx.cache_dir,
        out_dir=ctx.out_dir,
        progress=ctx.progress,
        resources=ctx.resources,
    )


def _run_decode_bench(cfg: DecodeBenchConfig, ctx: TrialContext) -> TrialResult:
    from workloads import decode_bench

    return decode_bench.run(
        cfg,
        cache_dir=ctx.cache_dir,
        out_dir=ctx.out_dir,
        run_root=ctx.run_root,
        progress=ctx.progress,
    )


def _run_serve_bench(cfg: ServeBenchConfig, ctx: TrialContext) -> TrialResult:
    from workloads.serving import bench

    return bench.run(
        cfg, cache_dir=ctx.cache_dir, out_dir=ctx.out_dir, run_root=ctx.run_root,
        progress=ctx.progress,
    )  # fmt: skip


def check_serving(configs: Sequence[ServeBenchConfig], run_root: Path, **_: object) -> None:
    """The serving environment imports vLLM and the plugin, each draft can be found, a fixed
    ``serve.port`` is free, and vLLM can load the target (:mod:`workloads.serving.checks`).

    Raises:
        ConfigError: blaming the field at fault, with the fix.
    """
    from workloads.serving.checks import check_configs

    check_configs(configs, run_root)


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


def check_serve_prompts(
    configs: Sequence[ServeBenchConfig],
    run_root: Path,
    *,
    cache_dir: Path | None = None,
    **_: object,
) -> None:
    """Every prompt a serving trial sends fits the target, as :func:`check_bench_prompts` (the
    same prompts: this platform's engine decodes them too).

    Raises:
        ConfigError: blaming ``prompts.prompt_sets``.
    """
    from workloads.serving.bench import engine_config

    check_bench_prompts([engine_config(c, None) for c in configs], run_root, cache_dir=cache_dir)


def _run_sleep(cfg: SleepConfig, ctx: TrialContext) -> TrialResult:
    return run_sleep(cfg, out_dir=ctx.out_dir, progress=ctx.progress)


_ACCEPTANCE = (("acceptance_length", ".3f"), ("mismatches", "d"), ("near_ties", "d"))
"""a trial's console line: acceptance, and the greedy divergences beside those excused"""

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            name="draft_train",
            config_model=DraftTrainConfig,
            run=_run_draft_train,
            summary="pretrain and SFT a draft, then measure its acceptance length",
            preflight=(
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
            ),
            progress=_ACCEPTANCE,
            status_columns=(
                "acceptance_length", "acceptance_length_prompt_mean", "mismatches", "near_ties",
            ),  # fmt: skip
            report="law",
            describe=_describe_draft_train,
            law_axes=("pretrain.tokens", "draft.layers"),  # Scylla Thm 1.1 and Thm 1.2
            law_metrics=("acceptance_length", "acceptance_length_prompt_mean"),
            cost=DRAFT_TRAIN_COST,
        ),
        Workload(
            name="decode_bench",
            config_model=DecodeBenchConfig,
            run=_run_decode_bench,
            summary="throughput and acceptance of speculative decoding against AR decoding",
            preflight=(
                check_targets,
                check_decode,
                check_decode_tree,
                check_decode_kernels,
                check_k_laws,
                check_bench_prompts,
            ),
            progress=(("tokens_per_s", ".2f"), ("speedup", ".2f"), *_ACCEPTANCE),
            status_columns=(
                "tokens_per_s", "ar_tokens_per_s", "speedup", "acceptance_length", "mismatches",
                "near_ties",
            ),  # fmt: skip
            report="throughput",
            example="sweeps/batch.yaml",
        ),
        Workload(
            name="serve_bench",
            config_model=ServeBenchConfig,
            run=_run_serve_bench,
            summary="a trained draft served by a real vLLM server against one without it",
            preflight=(check_targets, check_serving, check_serve_prompts),
            progress=(
                ("acceptance_length", ".3f"),
                ("engine.acceptance_length", ".3f"),
                ("speedup", ".2f"),
                ("mismatches", "d"),
                ("near_ties", "d"),
            ),
            status_columns=(
                "acceptance_length",
                "engine.acceptance_length",
                "tokens_per_s",
                "speedup",
                "mismatches",
                "near_ties",
            ),  # fmt: skip
            report="law",
            example="sweeps/serve-tokens.yaml",
            law_axes=("pretrain.tokens",),  # the token law on vLLM's acceptance
            law_metrics=("acceptance_length", "engine.acceptance_length"),
        ),
        Workload(
            name="sleep",
            config_model=SleepConfig,
            run=_run_sleep,
            summary="a diagnostic that sleeps and optionally fails (tests the orchestration)",
            progress=(("sleep.seconds", ".2f"), ("sleep.attempt", "d")),
            status_columns=("sleep.seconds", "sleep.attempt"),
            report="table",
            example="sweeps/sleep.yaml",
            law_axes=("law_x",),  # a synthetic law, for testing adaptive designs
            law_metrics=("sleep.law_y",),
        ),
    )
}
"""every workload a spec may name, by name"""


def get_workload(name: str) -> Workload:
    """The registered workload ``name``.

    Raises:
        KeyError: no such workload (a spec naming one is refused at load with the choices).
    """
    return WORKLOADS[name]
