"""Packed training rows of the two stages (private): pretraining text and SFT chats."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch

from workloads.data import Conversation, iter_pretrain_documents, pack_documents, render_chat


def pretrain_rows(
    tokenizer: Any, convs: Sequence[Conversation], mix: dict[str, float], seq_len: int, n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """First ``n`` packed pretraining rows [n, L] (all tokens in the loss)."""
    docs = iter_pretrain_documents(mix=mix, seed=0, sharegpt_pretrain=convs)
    ids = pack_documents(tokenizer, docs, seq_len=seq_len, n_sequences=n)
    return ids, torch.ones_like(ids, dtype=torch.bool)


def sft_rows(
    tokenizer: Any, convs: Sequence[Conversation], seq_len: int, n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """First ``n`` packed SFT rows [n, L]: chats rendered with the chat template, joined end to
    end in a fixed shuffled order; the mask marks assistant tokens.

    Raises:
        ValueError: the SFT split has fewer tokens than ``n * seq_len``.
    """
    order = list(range(len(convs)))
    random.Random("sft:0").shuffle(order)
    need = n * seq_len
    ids: list[int] = []
    mask: list[int] = []
    for i in order:
        c_ids, c_mask = render_chat(tokenizer, convs[i], max_tokens=4 * seq_len)
        ids += c_ids
        mask += c_mask
        if len(ids) >= need:
            break
    if len(ids) < need:
        raise ValueError(f"the SFT split has {len(ids)} tokens, fewer than the {need} asked for")
    return (
        torch.tensor(ids[:need]).view(n, seq_len),
        torch.tensor(mask[:need], dtype=torch.bool).view(n, seq_len),
    )
