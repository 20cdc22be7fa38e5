"""Packed training rows of the two stages (private): pretraining text and SFT chats."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

from workloads.data import (
    Conversation,
    PackedRows,
    Packing,
    iter_pretrain_documents,
    pack_pretrain_rows,
    pack_token_documents,
    render_chat,
)
from workloads.training.regenerate import ResponseRegenerator


def pretrain_rows(
    tokenizer: Any,
    convs: Sequence[Conversation],
    mix: dict[str, float],
    seq_len: int,
    n: int,
    *,
    packing: Packing,
) -> PackedRows:
    """First ``n`` packed pretraining rows [n, L] (all tokens in the loss)."""
    docs = iter_pretrain_documents(mix=mix, seed=0, sharegpt_pretrain=convs)
    return pack_pretrain_rows(tokenizer, docs, seq_len=seq_len, n_sequences=n, packing=packing)


def sft_order(convs: Sequence[Conversation]) -> list[Conversation]:
    """The SFT conversations in their fixed shuffled order."""
    order = list(range(len(convs)))
    random.Random("sft:0").shuffle(order)
    return [convs[i] for i in order]


def sft_rows(
    tokenizer: Any,
    convs: Sequence[Conversation],
    seq_len: int,
    n: int,
    *,
    packing: Packing,
    regenerator: ResponseRegenerator | None = None,
) -> PackedRows:
    """First ``n`` packed SFT rows [n, L]: chats in :func:`sft_order`, each rendered with the
    chat template (or, with a ``regenerator``, the first user turn and the target's own reply);
    the mask marks assistant tokens.

    Raises:
        ValueError: the SFT split has fewer tokens than ``n * seq_len``.
    """
    ordered = sft_order(convs)
    chats: Iterator[tuple[list[int], list[int]]]
    if regenerator is not None:
        chats = regenerator.chats(ordered, need_tokens=n * seq_len)
    else:
        chats = (render_chat(tokenizer, c, max_tokens=4 * seq_len) for c in ordered)
    try:
        return pack_token_documents(chats, seq_len=seq_len, n_rows=n, packing=packing)
    except ValueError as exc:
        raise ValueError(f"the SFT split is too small: {exc}") from None
