"""Packing token documents into fixed-length rows: document-isolated (default) or joined.

A draft at inference sees one chat from position 0. Packed training rows keep that true with
``isolated`` packing: every document (a pretraining text with its EOS, or one rendered chat) is a
*segment* of its row whose positions restart at 0; the target's features are computed with a
block-diagonal causal mask (:func:`attention_allowed`), the draft trains under the same mask, and
no loss target crosses a segment boundary (:func:`same_segment`). A document that does not fit in
the rest of a row goes on at the start of the next row as a segment of its own (positions from 0
again): it is cut, never conditioned on another document. ``joined`` packing is the behaviour
before document isolation (kept for the ablation): documents are concatenated and each row is one
segment with positions ``0..L-1``.

Segments are recovered from the positions alone (a segment starts where ``position_ids == 0``),
so the feature cache stores one extra tensor per row and nothing else.

Shape legend: n rows, L sequence length, B batch, T positions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import torch

__all__ = [
    "PACKINGS",
    "InMemoryRows",
    "PackedRows",
    "Packing",
    "RowSource",
    "attention_allowed",
    "pack_token_documents",
    "same_segment",
    "segment_ids",
]

Packing = Literal["isolated", "joined"]
PACKINGS: tuple[str, ...] = ("isolated", "joined")


@dataclass(frozen=True)
class PackedRows:
    """``input_ids`` [n, L] long, ``loss_mask`` [n, L] bool, ``position_ids`` [n, L] long."""

    input_ids: torch.Tensor
    loss_mask: torch.Tensor
    position_ids: torch.Tensor


@runtime_checkable
class RowSource(Protocol):
    """Packed rows of one stage, read by index without holding them all: the training loop, the
    feature cache and online features take rows through this (in RAM for the builtin corpora,
    memory-mapped token shards for ``pretrain.corpus``, see :mod:`workloads.data.shards`).
    Row ``r`` is the same for every reader and every run (deterministic packing)."""

    @property
    def rows(self) -> int:
        """R, rows available."""
        ...

    @property
    def seq_len(self) -> int:
        """L, tokens per row."""
        ...

    def packed(self, idx: torch.Tensor) -> PackedRows:
        """The rows at indices ``idx`` [b] (long, any order), each [b, L], on the CPU."""
        ...


@dataclass(frozen=True)
class InMemoryRows:
    """A :class:`RowSource` over rows held in RAM (the builtin corpora, SFT chats)."""

    data: PackedRows

    @property
    def rows(self) -> int:
        """R, rows held."""
        return int(self.data.input_ids.shape[0])

    @property
    def seq_len(self) -> int:
        """L, tokens per row (0 when empty)."""
        return int(self.data.input_ids.shape[1]) if self.data.input_ids.ndim == 2 else 0

    def packed(self, idx: torch.Tensor) -> PackedRows:
        """Rows ``idx`` [b] -> each [b, L]."""
        d = self.data
        return PackedRows(d.input_ids[idx], d.loss_mask[idx], d.position_ids[idx])


def pack_token_documents(
    docs: Iterable[tuple[Sequence[int], Sequence[int]]],
    *,
    seq_len: int,
    n_rows: int,
    packing: Packing,
) -> PackedRows:
    """Concatenate ``(ids, loss_mask)`` documents and cut them into ``n_rows`` rows of ``seq_len``.

    Consumes only as many documents as needed; the tail of the last one is discarded.

    Args:
        docs: token ids and a 0/1 loss mask of the same length per document, in order.
        seq_len: L, tokens per row.
        n_rows: rows wanted.
        packing: ``isolated`` (positions restart at every document and row start) or
            ``joined`` (positions ``0..L-1`` in every row).

    Raises:
        ValueError: ``seq_len``/``n_rows`` < 1, an unknown packing, a document whose mask length
            differs from its ids, or documents that run out before ``n_rows * seq_len`` tokens.
    """
    if seq_len < 1 or n_rows < 1:
        raise ValueError(f"seq_len={seq_len}, n_rows={n_rows}: both must be >= 1.")
    if packing not in PACKINGS:
        raise ValueError(f"packing {packing!r} is not one of {list(PACKINGS)}")
    need = seq_len * n_rows
    ids: list[int] = []
    mask: list[int] = []
    doc: list[int] = []
    for i, (d_ids, d_mask) in enumerate(docs):
        if len(d_ids) != len(d_mask):
            raise ValueError(f"document {i}: {len(d_ids)} ids but {len(d_mask)} mask values")
        ids += d_ids
        mask += d_mask
        doc += [i] * len(d_ids)
        if len(ids) >= need:
            break
    if len(ids) < need:
        raise ValueError(
            f"the documents gave {len(ids)} tokens, fewer than the {need} asked for "
            f"({n_rows} rows of {seq_len})"
        )
    ids_nl = torch.tensor(ids[:need], dtype=torch.long).view(n_rows, seq_len)
    mask_nl = torch.tensor(mask[:need], dtype=torch.bool).view(n_rows, seq_len)
    cols = torch.arange(seq_len).expand(n_rows, seq_len)
    if packing == "joined":
        return PackedRows(ids_nl, mask_nl, cols.clone())
    doc_nl = torch.tensor(doc[:need], dtype=torch.long).view(n_rows, seq_len)
    starts = torch.ones_like(doc_nl, dtype=torch.bool)
    starts[:, 1:] = doc_nl[:, 1:] != doc_nl[:, :-1]
    first_col = torch.where(starts, cols, torch.zeros_like(cols)).cummax(-1).values
    return PackedRows(ids_nl, mask_nl, cols - first_col)


def segment_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """[..., T] -> [..., T] long: the index of each token's segment in its row (from 1)."""
    return (position_ids == 0).long().cumsum(-1)


def same_segment(position_ids: torch.Tensor, offset: int) -> torch.Tensor:
    """[B, T] -> [B, T - offset] bool: token t and token t + offset are in one segment."""
    seg = segment_ids(position_ids)
    return seg[:, : seg.shape[1] - offset] == seg[:, offset:]


def attention_allowed(position_ids: torch.Tensor) -> torch.Tensor | None:
    """[B, T] -> [B, 1, T, T] bool block-diagonal causal mask (True = may attend), or None when
    every row is one segment (plain causal attention does the same, on the fast path)."""
    if not bool((position_ids[:, 1:] == 0).any()):
        return None
    seg = segment_ids(position_ids)
    t = seg.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=seg.device).tril()
    return ((seg[:, :, None] == seg[:, None, :]) & causal)[:, None]
