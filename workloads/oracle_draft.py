"""Oracle draft: proposes a known continuation (e.g. the target's own greedy output).

With an oracle the acceptance is known in advance, so tests can drive the accept path on the
real target, and benchmarks can measure the decoding engine's own cost. It follows the
:class:`~workloads.draft_model.DraftModel` interface used by :mod:`workloads.tree_decode`.

Shape legend: B batch, T positions, S sequence slots, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig


class OracleDraft(nn.Module):
    """Draft whose top-1 proposal at position p is ``sequence[p + 1]`` (other tokens ~0 prob).

    Args:
        sequence: prompt + continuation the oracle knows, target token ids.
        vocab_size: V of the target.
        wrong_at: indices i of ``sequence`` whose token is proposed wrongly (forces rejections).
    """

    table_sv: torch.Tensor
    draft_to_target: torch.Tensor

    def __init__(
        self, sequence: list[int], vocab_size: int, wrong_at: frozenset[int] = frozenset()
    ) -> None:
        super().__init__()
        slots = len(sequence) + 2
        table = torch.zeros(slots, vocab_size)
        for p in range(slots - 1):
            tok = sequence[min(p, len(sequence) - 1)]
            table[p, (tok + 1) % vocab_size if p in wrong_at else tok] = 20.0
        self.register_buffer("table_sv", table)
        self.register_buffer("draft_to_target", torch.arange(vocab_size))
        self._config = LlamaConfig(
            num_hidden_layers=1,
            hidden_size=8,
            num_attention_heads=1,
            num_key_value_heads=1,
            vocab_size=1,
            bos_token_id=None,
            eos_token_id=None,
            pad_token_id=None,
        )

    @property
    def vocab_size(self) -> int:
        """V."""
        return int(self.draft_to_target.shape[0])

    def new_cache(self) -> DynamicCache:
        """A 1-layer cache that only tracks lengths."""
        return DynamicCache(config=self._config)

    def forward(
        self,
        hidden: torch.Tensor,
        next_ids: torch.Tensor,
        position_ids: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
        cache: DynamicCache | None = None,
    ) -> torch.Tensor:
        """[B, T, *] -> [B, T, S]: one-hot of the slot whose token the oracle proposes next."""
        b, t = next_ids.shape
        if cache is not None:
            cache.update(torch.zeros(b, 1, t, 1), torch.zeros(b, 1, t, 1), 0)
        slot = (position_ids + 2).clamp_max(self.table_sv.shape[0] - 1)
        return nn.functional.one_hot(slot, self.table_sv.shape[0]).float()

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., S] -> [..., V]."""
        return hidden @ self.table_sv
