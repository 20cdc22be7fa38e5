"""KV caches whose batch rows hold different numbers of valid slots, and attention masks (private).

Rows of a batch accept different numbers of tokens per cycle, so after a cycle row r keeps its
own slots. A :class:`RaggedCache` pairs a transformers ``DynamicCache`` ([B, H, S, d] per layer)
with a validity mask [B, S]; invalid slots (padding, rejected tree nodes) are masked out of
attention and dropped by :meth:`RaggedCache.compact`. Positions are passed explicitly
(``position_ids``), and keys are cached after RoPE, so a slot's index is not its position.

Shape legend: B rows, S cached slots, n new query positions, q = S + n key positions.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


def additive_mask(allowed_bnq: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[B, n, q] bool (True = may attend) -> [B, 1, n, q] additive float mask."""
    mask = torch.zeros(allowed_bnq.shape, dtype=dtype, device=allowed_bnq.device)
    mask.masked_fill_(~allowed_bnq, torch.finfo(dtype).min)
    return mask[:, None]


class RaggedCache:
    """A ``DynamicCache`` plus ``valid`` [B, S]: which cached slots each row may attend to."""

    def __init__(self, cache: DynamicCache, batch: int, device: torch.device) -> None:
        self.cache = cache
        self.valid = torch.zeros(batch, 0, dtype=torch.bool, device=device)

    @property
    def length(self) -> int:
        """S, cached slots (valid or not)."""
        return int(self.valid.shape[1])

    def allowed(self, new_bnq: torch.Tensor) -> torch.Tensor:
        """[B, n, q'] visibility among the not-yet-cached positions -> [B, n, S + q']."""
        b, n, _ = new_bnq.shape
        return torch.cat([self.valid[:, None, :].expand(b, n, self.length), new_bnq], dim=2)

    def append(self, valid_bn: torch.Tensor) -> None:
        """Record the validity of the n slots a forward has just appended."""
        self.valid = torch.cat([self.valid, valid_bn], dim=1)

    def crop(self, length: int) -> None:
        """Drop the cached slots beyond ``length`` (e.g. a draft tree's, never recorded)."""
        extra = int(self.cache.get_seq_length()) - length
        if extra > 0:
            self.cache.crop(-extra)
        self.valid = self.valid[:, :length]

    def compact(self) -> None:
        """Drop invalid slots: each row keeps its valid slots in order, left-aligned."""
        if bool(self.valid.all()):
            return
        counts = self.valid.sum(1)
        width = int(counts.max())
        order = torch.argsort((~self.valid).to(torch.int8), dim=1, stable=True)[:, :width]
        for layer in self.cache.layers:
            # transformers types cache.layers as a union incl. linear-attention layers (no keys)
            keys, values = layer.keys, layer.values  # type: ignore[union-attr]
            idx = order[:, None, :, None].expand(-1, keys.shape[1], -1, keys.shape[3])  # type: ignore[union-attr]
            layer.keys = keys.gather(2, idx)  # type: ignore[union-attr]
            layer.values = values.gather(2, idx)  # type: ignore[union-attr]
        self.valid = torch.arange(width, device=counts.device)[None] < counts[:, None]

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep only the batch rows ``rows`` ([B'] long)."""
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(0, rows)  # type: ignore[union-attr]
            layer.values = layer.values.index_select(0, rows)  # type: ignore[union-attr]
        self.valid = self.valid.index_select(0, rows)
