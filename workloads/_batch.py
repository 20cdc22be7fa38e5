"""Pieces shared by the speculative and the autoregressive batch decoders (private).

Shape legend: B rows, L longest prompt, h hidden, V target vocabulary.
"""

from __future__ import annotations

import time

import torch
from transformers import PreTrainedModel

from workloads._kv import CACHE_KW, RaggedStaticCache, additive_mask


class Timer:
    """Accumulates wall seconds of forward passes (synchronising CUDA first)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()


def right_pad(rows: list[list[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged rows -> ids [B, L] (0-padded) and lengths [B]."""
    lengths = torch.tensor([len(r) for r in rows], device=device)
    ids = torch.zeros(len(rows), int(lengths.max()), dtype=torch.long, device=device)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, device=device)
    return ids, lengths


def pick(logits_bv: torch.Tensor, temperature: float, gen: torch.Generator | None) -> torch.Tensor:
    """Greedy (temperature 0) or sampled next token per row: [B, V] -> [B]."""
    if temperature == 0:
        return logits_bv.argmax(-1)
    probs = torch.softmax(logits_bv.float() / temperature, -1)
    return torch.multinomial(probs, 1, generator=gen)[:, 0]


def prefill(
    target: PreTrainedModel, prompts: list[list[int]], cache: RaggedStaticCache
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run the prompts through the target and commit them to ``cache`` (empty before).

    Returns:
        hidden [B, L, h], the last prompt position's logits [B, V] (float32), lengths [B].
    """
    dev = target.device
    ids, lengths = right_pad(prompts, dev)
    b, length = ids.shape
    key_ok = torch.arange(length, device=dev)[None] < lengths[:, None]
    causal = torch.ones(length, length, dtype=torch.bool, device=dev).tril()
    cache.stage(length)
    allowed = cache.allowed(causal[None] & key_ok[:, None, :])
    h = target.model(
        input_ids=ids,
        position_ids=torch.arange(length, device=dev).expand(b, -1),
        attention_mask=additive_mask(allowed, target.dtype),
        **{CACHE_KW: cache},
        use_cache=True,
    ).last_hidden_state
    cache.commit(None, lengths)  # padding slots stay beyond each row's length: overwritten next
    last = h.gather(1, (lengths - 1)[:, None, None].expand(b, 1, h.shape[2]))[:, 0]
    return h, target.lm_head(last).float(), lengths


def still_going(
    tokens: list[list[int]], rows: torch.Tensor, eos_ids: frozenset[int], max_new_tokens: int
) -> torch.Tensor | None:
    """Indices into ``rows`` of the rows that have not finished; None when all have."""
    keep = [
        i
        for i, r in enumerate(rows.tolist())
        if len(tokens[r]) < max_new_tokens and tokens[r][-1] not in eos_ids
    ]
    return torch.tensor(keep, device=rows.device) if keep else None
