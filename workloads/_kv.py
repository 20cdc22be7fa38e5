"""KV-cache and attention-mask helpers for tree decoding (private).

Shape legend: n new query positions, S cached + new key positions.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


def cache_len(cache: DynamicCache) -> int:
    """Number of cached positions."""
    return int(cache.get_seq_length())


def crop_to(cache: DynamicCache, length: int) -> None:
    """Drop cached positions beyond ``length``."""
    extra = cache_len(cache) - length
    if extra > 0:
        cache.crop(-extra)


def keep_positions(cache: DynamicCache, keep: torch.Tensor) -> None:
    """Keep only the cached positions ``keep`` ([S'] long, ascending), in that order."""
    for layer in cache.layers:
        # transformers types cache.layers as a union incl. linear-attention layers (no keys)
        layer.keys = layer.keys.index_select(-2, keep)  # type: ignore[union-attr]
        layer.values = layer.values.index_select(-2, keep)  # type: ignore[union-attr]


def prefix_and_tree_mask(
    prefix_len: int, allowed_nq: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """Additive attention mask [1, 1, n, prefix_len + q]: every query sees the whole prefix
    and the new positions where ``allowed_nq`` [n, q] is True."""
    n, q = allowed_nq.shape
    mask = torch.zeros(1, 1, n, prefix_len + q, dtype=dtype)
    mask[0, 0, :, prefix_len:].masked_fill_(~allowed_nq, torch.finfo(dtype).min)
    return mask


def causal_mask(prefix_len: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """Mask [1, 1, n, prefix_len + n] for n new tokens appended causally after a cached prefix."""
    return prefix_and_tree_mask(prefix_len, torch.ones(n, n, dtype=torch.bool).tril(), dtype)
