"""What a ``draft_train`` sweep will take, told before it runs (no torch, nothing loaded).

The dry run and the submit print these lines: the pretraining and SFT tokens of the grid, and per
stage whether the target's features are cached on disk (and how much disk) or computed online;
:func:`workloads.draft_train.checks.check_feature_disk` refuses at submit a sweep whose cached
features would not fit on the cache's disk.
The feature mode rule (:mod:`workloads.training.feature_mode`) is the one the trial applies, so
the dry run and the trial decide the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from workloads.draft_train.config import DraftTrainConfig
from workloads.training.feature_mode import (
    FeatureMode,
    feature_gib,
    resolve_feature_mode,
)


def target_hidden_size(name: str) -> int | None:
    """Hidden size of ``target.model`` from its shape or ``config.json``, without loading it:
    a builtin name or shape, a local folder, or a hub id already in the local cache; else None."""
    from workloads.roofline.models import load_model_shape

    try:
        return load_model_shape(name).hidden
    except ValueError:
        pass
    if Path(name).expanduser().exists():
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(name, "config.json")
    except Exception:  # noqa: BLE001 - not a hub id, or no cache: unknown
        return None
    if isinstance(found, str):
        try:
            return load_model_shape(found).hidden
        except ValueError:
            return None
    return None


def _si(n: float) -> str:
    """A count with a K/M/B/T suffix at three significant digits (``131K``, ``1.5B``)."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"


def gib_text(g: float) -> str:
    return f"{g / 1024:.1f} TiB" if g >= 1024 else f"{g:.2f} GiB"


def describe_cost(configs: Sequence[DraftTrainConfig]) -> list[str]:
    """Lines for the dry run: tokens of the grid and each distinct stage's feature mode.

    Cached features are shared by every trial of every sweep with the same target, corpus and
    sequence length, and nested budgets share their prefix, so the disk a grid needs is that of
    its largest cached budget per stage, not the sum.
    """
    if not configs:
        return []
    pre = sum(c.pretrain.tokens for c in configs)
    sft = sum(c.sft.tokens * c.sft.epochs for c in configs)
    lines = [
        f"draft training: {len(configs)} trials, {_si(pre)} pretraining tokens and "
        f"{_si(sft)} SFT tokens (epochs counted) in all"
    ]
    stages: dict[tuple[str, str, int], dict[FeatureMode, list[int]]] = {}
    hidden_of: dict[str, int | None] = {}
    for c in configs:
        hidden = hidden_of.setdefault(c.target.model, target_hidden_size(c.target.model))
        copies = c.draft.feature_copies  # hidden fusion: one vector per fused layer + the last
        width = hidden * copies if hidden else None
        for stage, tokens in (("pretrain", c.pretrain.tokens), ("sft", c.sft.tokens)):
            if not tokens:
                continue
            mode = resolve_feature_mode(
                c.features.mode, tokens=tokens, hidden=width,
                max_cache_gb=c.features.max_cache_gb,
            )  # fmt: skip
            key = (c.target.model, stage, copies)
            stages.setdefault(key, {}).setdefault(mode, []).append(tokens)
    for (target, stage, copies), by_mode in sorted(stages.items()):
        base = hidden_of[target]
        hidden = base * copies if base else None
        parts = []
        if "cached" in by_mode:
            top = max(by_mode["cached"])
            size = gib_text(feature_gib(top, hidden)) if hidden else "size unknown"
            layers = f", {copies - 1} fused layers + the last" if copies > 1 else ""
            parts.append(
                f"cached on disk up to {_si(top)} tokens: {size} (hidden {hidden or '?'}"
                f"{layers}, float16, shared by nested budgets)"
            )
        if "online" in by_mode:
            n, top = len(set(by_mode["online"])), max(by_mode["online"])
            size = gib_text(feature_gib(top, hidden)) if hidden else "?"
            parts.append(
                f"online for {n} budget(s) up to {_si(top)} tokens (no disk; {size} if cached)"
            )
        lines.append(f"  {target} {stage} features: " + "; ".join(parts))
    modes = {c.features.mode for c in configs}
    if "auto" in modes:
        limits = sorted({c.features.max_cache_gb for c in configs})
        lines.append(f"  (features.mode auto: cached up to {', '.join(map(str, limits))} GiB)")
    return lines
