"""Cached or online target features for a stage: the rule the dry run and the trial share.

``features.mode: auto`` caches a stage while its tokens x hidden x 2 bytes (float16) stay under
``features.max_cache_gb``, and goes online above (issue 15; SpecForge and vLLM speculators offer
the same two modes). No torch here: the submit's dry run imports it.
"""

from __future__ import annotations

from typing import Literal

FEATURE_BYTES = 2
"""bytes per cached hidden-state element (float16)"""

FeatureMode = Literal["cached", "online"]


def feature_gib(tokens: int, hidden: int) -> float:
    """GiB of cached features for ``tokens`` tokens at hidden size ``hidden`` (float16)."""
    return tokens * hidden * FEATURE_BYTES / 2**30


def resolve_feature_mode(
    mode: str, *, tokens: int, hidden: int | None, max_cache_gb: float
) -> FeatureMode:
    """``cached`` or ``online`` for one stage of ``tokens`` tokens.

    ``auto`` caches while :func:`feature_gib` is at most ``max_cache_gb``; an unknown hidden
    size (a hub target not downloaded yet) counts as cached until the trial knows it.
    """
    if mode in ("cached", "online"):
        return mode  # type: ignore[return-value]
    if hidden is None:
        return "cached"
    return "cached" if feature_gib(tokens, hidden) <= max_cache_gb else "online"
