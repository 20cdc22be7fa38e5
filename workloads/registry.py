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
from typing import Any, Literal

from pydantic import BaseModel

from workloads.config import (
    ConfigError,
    DecodeBenchConfig,
    DecodeConfig,
    DraftTrainConfig,
    Resources,
)
from workloads.result import Progress, TrialResult
from workloads.sleep import SleepConfig
from workloads.sleep import run as run_sleep

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


Preflight = Callable[[Sequence[Any], Path], None]
"""``(distinct trial configs, run root)``; raises :class:`ConfigError` (or ``ValueError``)"""

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


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def check_targets(configs: Sequence[Any], _run_root: Path) -> None:
    """Every ``target.model`` resolves: a builtin, a local folder or file, or a hub id that the
    hub knows (not downloaded; skipped offline).

    Raises:
        ConfigError: naming the target and the fix.
    """
    from workloads.models.target_source import HF_ENDPOINT, check_random_target, check_target_source

    offline = _truthy("HF_HUB_OFFLINE") or _truthy("TRANSFORMERS_OFFLINE")
    endpoint = os.environ.get("HF_ENDPOINT") or HF_ENDPOINT
    for name in sorted({c.target.model for c in configs if c.target.weights == "pretrained"}):
        try:
            check_target_source(name, offline=offline, endpoint=endpoint)
        except ValueError as exc:
            raise ConfigError(str(exc), ("target", "model")) from exc
    for name in sorted({c.target.model for c in configs if c.target.weights == "random"}):
        try:
            check_random_target(name)
        except ValueError as exc:
            raise ConfigError(str(exc), ("target", "model")) from exc


def check_chat_templates(configs: Sequence[DraftTrainConfig], _run_root: Path) -> None:
    """SFT renders chats with the target's chat template (and ``sft.responses: target`` asks the
    target for its replies through it): a target without one is refused.

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


def check_devices(configs: Sequence[DraftTrainConfig], _run_root: Path) -> None:
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


def check_corpora(configs: Sequence[DraftTrainConfig], run_root: Path) -> None:
    """Each pretraining budget fits its corpus (see :mod:`workloads.training.corpus_check`: exact up
    to 20M tokens, an upper bound above; the run root's cache keeps what was tokenised).

    Raises:
        ConfigError: blaming ``pretrain.tokens``, with both sizes and the fix.
    """
    from workloads.training.corpus_check import check_budget, check_sources

    biggest: dict[str, DraftTrainConfig] = {}
    for c in configs:  # the largest budget per corpus: smaller ones are its prefixes
        key = c.pretrain.model_dump_json(exclude={"tokens", "lr", "schedule", "decay_frac"})
        key += c.target.model_dump_json()
        if key not in biggest or c.pretrain.tokens > biggest[key].pretrain.tokens:
            biggest[key] = c
    for c in biggest.values():
        try:
            check_sources(c.pretrain.corpus or [])
        except ValueError as exc:
            raise ConfigError(str(exc), ("pretrain", "corpus")) from exc
        try:
            check_budget(c, run_root / "cache")
        except ValueError as exc:
            raise ConfigError(str(exc), ("pretrain", "tokens")) from exc


def check_decode(configs: Sequence[DecodeBenchConfig], run_root: Path) -> None:
    """The draft each config names, its device and prompt sets (no model is loaded).

    Raises:
        ValueError: as :func:`workloads.decode_bench.preflight`.
    """
    from workloads.decode_bench import preflight

    for cfg in {c.draft.model_dump_json(): c for c in configs}.values():
        preflight(cfg, run_root)


def check_tree_vocab(configs: Sequence[DraftTrainConfig], _run_root: Path) -> None:
    """``eval.topk`` fits the draft vocabulary: each tree node takes its ``topk`` most likely
    draft tokens, so a truncated vocabulary (``draft.vocab_size``) smaller than ``topk`` would
    fail the evaluation after the whole training.

    Raises:
        ConfigError: blaming ``eval.topk`` (and ``draft.vocab_size``), with both values.
    """
    for c in configs:
        n, topk = c.draft.vocab_size, c.eval.topk
        if 0 < n < topk:
            raise ConfigError(
                f"eval.topk {topk} is larger than the draft vocabulary (draft.vocab_size {n}): "
                f"each tree node takes its {topk} most likely draft tokens, so every trial "
                f"would fail at evaluation, after training. Fix: eval.topk <= {n}, or "
                f"draft.vocab_size >= {topk} (0 = the target's whole vocabulary)",
                ("eval", "topk"),
                ("draft", "vocab_size"),
            )


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


def check_decode_tree(configs: Sequence[DecodeBenchConfig], run_root: Path) -> None:
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


def check_decode_kernels(configs: Sequence[DecodeBenchConfig], _run_root: Path) -> None:
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


def check_k_laws(configs: Sequence[DecodeBenchConfig], run_root: Path) -> None:
    """The k law of ``num_draft_tokens: auto`` (:func:`workloads.engine.k_law.check_k_law`: hardware
    profile, the fitted sweep of ``sweep:NAME``); and ``decode.k_law``, ``hardware`` or
    ``k_max`` set in a sweep where no trial uses ``auto`` (they would change nothing, so the
    spec likely means something else). A sweep mixing fixed k and ``auto`` may set them.

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


def _run_sleep(cfg: SleepConfig, ctx: TrialContext) -> TrialResult:
    return run_sleep(cfg, out_dir=ctx.out_dir, progress=ctx.progress)


_ACCEPTANCE = (("acceptance_length", ".3f"), ("mismatches", "d"))

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
                check_chat_templates,
                check_corpora,
            ),
            progress=_ACCEPTANCE,
            status_columns=("acceptance_length",),
            report="law",
            describe=_describe_draft_train,
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
            ),
            progress=(("tokens_per_s", ".2f"), ("speedup", ".2f"), *_ACCEPTANCE),
            status_columns=("tokens_per_s", "ar_tokens_per_s", "speedup", "acceptance_length"),
            report="throughput",
            example="sweeps/batch.yaml",
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
