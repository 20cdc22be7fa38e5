"""Stub target and draft with fixed logits, to drive the accept/reject paths of tree decoding.

The stub target's greedy next token depends only on the current token: ``next = f(tok)``.
The stub draft proposes ``g(tok)`` as top-1; where g equals f the proposal is accepted.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig

V = 16


def _lengths_config() -> LlamaConfig:
    return LlamaConfig(
        num_hidden_layers=1,
        hidden_size=8,
        num_attention_heads=1,
        num_key_value_heads=1,
        vocab_size=V,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )


def _table(next_of: dict[int, int]) -> torch.Tensor:
    """[V, V] logits: row tok has 10 at next_of[tok], decreasing small values elsewhere."""
    w = -torch.arange(V, dtype=torch.float32).repeat(V, 1) * 0.01
    for tok, nxt in next_of.items():
        w[tok, nxt] = 10.0
    return w


class StubTarget(nn.Module):
    """Hidden state = one-hot of the input token; LM head = the table of f."""

    def __init__(self, f: dict[int, int]) -> None:
        super().__init__()
        self.config = _lengths_config()
        self.dtype = torch.float32
        self.device = torch.device("cpu")
        self.lm_head = nn.Linear(V, V, bias=False)
        self.lm_head.weight.data = _table(f).T.contiguous()
        self.model = self._decoder
        self.embed = nn.Embedding(V, V)  # only where inputs go (placement); never called
        self.calls = 0

    def get_input_embeddings(self) -> nn.Module:
        return self.embed

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def _decoder(
        self, input_ids: torch.Tensor, cache: DynamicCache | None = None, **_: object
    ) -> SimpleNamespace:
        self.calls += 1
        b, t = input_ids.shape
        if cache is not None:
            cache.update(torch.zeros(b, 1, t, 1), torch.zeros(b, 1, t, 1), 0)
        return SimpleNamespace(last_hidden_state=nn.functional.one_hot(input_ids, V).float())


class StubDraft(nn.Module):
    """Output = one-hot of the input token; logits = the table of g."""

    def __init__(self, g: dict[int, int]) -> None:
        super().__init__()
        self.register_buffer("table", _table(g))
        self.register_buffer("draft_to_target", torch.arange(V))

    def new_cache(self) -> DynamicCache:
        return DynamicCache(config=_lengths_config())

    def forward(
        self,
        hidden: torch.Tensor,
        next_ids: torch.Tensor,
        position_ids: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
        cache: DynamicCache | None = None,
    ) -> torch.Tensor:
        b, t = next_ids.shape
        if cache is not None:
            cache.update(torch.zeros(b, 1, t, 1), torch.zeros(b, 1, t, 1), 0)
        return nn.functional.one_hot(next_ids, V).float()

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden @ self.table


class TableTarget(StubTarget):
    """Stub target whose next-token logits after token t are ``table[t]`` (any [V, V] table)."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__({})
        self.lm_head.weight.data = table.T.contiguous()


def markov_probs(table: torch.Tensor, temperature: float) -> torch.Tensor:
    """[V, V] next-token probabilities of a :class:`TableTarget` at ``temperature``."""
    return torch.softmax(table / temperature, -1)
