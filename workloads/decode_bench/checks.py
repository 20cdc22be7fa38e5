"""The checks of a ``decode_bench`` sweep at submit, before anything is written (no model is
loaded): the draft each config names, the device, the prompt sets, ``decode.topk`` against a
saved draft's vocabulary, CUDA graphs without a GPU, the k law of ``num_draft_tokens: auto``.
Each raises :class:`~workloads.config.ConfigError` (or ``ValueError``) naming the field at
fault and a fix.

The field rules of one config are validators on
:class:`~workloads.decode_bench.config.DecodeBenchConfig`; these need the machine, the run root
or the whole sweep.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from workloads.checks import check_bench_prompts, check_targets
from workloads.config import ConfigError
from workloads.decode_bench.config import DecodeBenchConfig, DecodeConfig
from workloads.measure.drafts import check_draft_folder, find_trial_draft
from workloads.protocol import Preflight


def preflight(cfg: DecodeBenchConfig, run_root: Path) -> None:
    """Check before a sweep starts what would make every trial fail: the draft it names, the
    device, the prompt sets (no model is loaded).

    Raises:
        ValueError: as :func:`find_trial_draft`; a ``draft.path`` that is not a draft folder;
            an unknown prompt set or a missing prompt directory.
        workloads.config.ConfigError: ``device: cuda`` without a GPU (naming ``("device",)``);
            a draft trained on another builtin target (naming ``("target", "model")``).
    """
    from workloads.data.prompts import check_prompt_spec
    from workloads.models.draft import check_trained_target
    from workloads.models.target import resolve_device

    src = cfg.draft
    folder = None
    if src.source == "trial":
        sweep = cast(str, src.sweep)
        try:
            folder = find_trial_draft(run_root, sweep, cast(str, src.trial_key))
        except ValueError as exc:  # the spec line to blame: the sweep, or the key within it
            ran = (run_root / sweep / "trials").is_dir()
            raise ConfigError(str(exc), ("draft", "trial_key" if ran else "sweep")) from exc
    elif src.source == "path":
        folder = Path(cast(str, src.path)).expanduser()
        check_draft_folder(folder)
    if folder is not None:
        check_trained_target(folder, cfg.target.model)
    try:
        resolve_device(cfg.device)
    except ValueError as exc:  # the spec's ``device:`` line is to blame
        raise ConfigError(str(exc), ("device",)) from exc
    check_prompt_spec(cfg.prompts.prompt_sets, field="prompts.prompt_sets")


def check_decode(configs: Sequence[DecodeBenchConfig], run_root: Path, **_: object) -> None:
    """The draft each config names, its device and prompt sets (no model is loaded).

    Raises:
        ValueError: as :func:`preflight`.
    """
    for cfg in {c.draft.model_dump_json(): c for c in configs}.values():
        preflight(cfg, run_root)


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


CHECKS: tuple[Preflight, ...] = (
    check_targets,
    check_decode,
    check_decode_tree,
    check_decode_kernels,
    check_k_laws,
    check_bench_prompts,
)
"""the checks of a ``decode_bench`` sweep at submit, in the order they run"""
