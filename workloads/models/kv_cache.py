"""Preallocated KV caches whose batch rows hold different numbers of tokens (private).

Rows of a batch accept different numbers of tokens per cycle, so row r holds its own number of
committed slots, ``lengths[r]``. A :class:`RaggedStaticCache` keeps per layer one key and one
value buffer [B, H, S, d], allocated once per batch (at the first write of each layer, on that
layer's device, so a target spread over GPUs works), and writes every forward in place:

- ``stage(n)``: the next forward writes its n new slots of row r at ``lengths[r] + staged +
  0..n-1`` (a forward of a tree stages after the slots the tree has already staged);
- the attention mask from :meth:`allowed` lets row r see its committed slots ``< lengths[r]``
  and, among the staged ones, what the caller allows (the tree mask); nothing else;
- ``commit(src, n_acc)`` keeps, in order, the staged slots ``src`` (offsets in the staged region,
  e.g. the accepted path of a tree): only those entries are moved, to ``lengths[r] + 0..``;
  ``discard()`` drops what was staged (a draft tree).

Positions are passed explicitly (``position_ids``) and keys are cached after RoPE, so a slot's
index need not be its position. Rows leaving the batch are packed to the front of the same
buffers (:meth:`select_rows`), so storage never moves while a batch decodes.

It serves transformers' decoder layers as their ``cache``: they call :meth:`update` only, since
the engine always passes explicit positions and a 4-D mask (transformers returns a 4-D mask
as-is). Source: the static cache of gpt-fast / transformers ``StaticCache``, with EAGLE's
accepted-slot copy (EAGLE ``ea_model``: only the accepted tokens' KV entries are moved).

Shape legend: B rows, H kv heads, S capacity (slots per row), d head dim, n new positions,
q staged slots (this forward's n included), W = max(lengths) + q key slots attended.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Sequence
from typing import Any

import torch
from transformers import LlamaModel


def _cache_kw() -> str:
    """The keyword transformers' decoder forwards take the KV cache by: ``cache`` from 5.2x on
    (``past_key_values`` a deprecated alias until 5.40), ``past_key_values`` before (5.17)."""
    names = inspect.signature(LlamaModel.forward).parameters
    return "cache" if "cache" in names else "past_key_values"


CACHE_KW = _cache_kw()
"""pass a cache as ``**{CACHE_KW: cache}`` to run on the transformers of either era"""


def additive_mask(allowed_bnq: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[B, n, q] bool (True = may attend) -> [B, 1, n, q] additive float mask."""
    mask = torch.zeros(allowed_bnq.shape, dtype=dtype, device=allowed_bnq.device)
    mask.masked_fill_(~allowed_bnq, torch.finfo(dtype).min)
    return mask[:, None]


def layer_masks(config: Any, mask: torch.Tensor, query_bn: torch.Tensor) -> Any:
    """The target's attention mask per layer type: ``mask`` [B, 1, n, W] (additive float or
    bool, over W key slots) as is for a model without sliding-window layers, else
    ``{"full_attention": mask, "sliding_attention": mask within the window}`` (the mapping
    transformers' Gemma-3/Qwen2-style decoders take). ``query_bn`` [B, n] places each query on
    the key axis: a query at q sees key j in a sliding layer iff ``q - j < sliding_window``
    (transformers' ``sliding_window_overlay``). Over a :class:`RaggedStaticCache` pass the
    positions: a committed slot's index is its position, and a staged slot's is at least its
    position, so the window is exact for every key a tree shorter than the window allows."""
    types = tuple(getattr(config, "layer_types", None) or ())
    window = getattr(config, "sliding_window", None)
    if "sliding_attention" not in types or not window:
        return mask
    slots = torch.arange(mask.shape[-1], device=mask.device)
    far = query_bn.to(mask.device)[:, None, :, None] - slots >= window  # [B, 1, n, W]
    if mask.dtype == torch.bool:
        sliding = mask & ~far
    else:
        sliding = mask.masked_fill(far, torch.finfo(mask.dtype).min)
    return {kind: sliding if kind == "sliding_attention" else mask for kind in set(types)}


_SERIAL = itertools.count()


class CacheFull(RuntimeError):
    """A forward would write past the preallocated capacity (a bug in the capacity estimate)."""


class RaggedStaticCache:
    """Per-layer preallocated keys/values [B, H, S, d] plus ``lengths`` [B] committed slots.

    Args:
        batch: B rows.
        capacity: S slots per row: prompt + generated tokens + the largest staged region.
        device: where ``lengths`` and the index tensors live (the first layer's device).
        fixed_width: attend over all S slots every forward (static shapes for CUDA graphs and
            ``torch.compile``) instead of the W that are in use.
    """

    def __init__(
        self, batch: int, capacity: int, device: torch.device, *, fixed_width: bool = False
    ) -> None:
        self.capacity = capacity
        self.fixed_width = fixed_width
        self.serial = next(_SERIAL)  # never reused (an id() may be): captured graphs key on it
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}
        self.lengths = torch.zeros(batch, dtype=torch.long, device=device)
        self.rows = batch  # live rows: the first ``rows`` of each buffer
        self.max_rows = batch
        self.host_lengths = [0] * batch  # ``lengths`` on the host: no sync to read them
        self.staged = 0
        self._max_len = 0  # max(lengths), kept on the host
        self._write = torch.zeros(batch, 0, dtype=torch.long, device=device)
        self._write_bufs: dict[int, torch.Tensor] = {}
        self.allocations = 0  # buffers allocated (once per layer per batch)

    @property
    def width(self) -> int:
        """W, key slots the attention of the next forward sees."""
        return self.capacity if self.fixed_width else self._max_len + self.staged

    def stage(self, n: int) -> None:
        """The next forward writes n slots per row, after those staged so far."""
        if self._max_len + self.staged + n > self.capacity:
            raise CacheFull(
                f"KV cache of {self.capacity} slots per row cannot take {n} more after "
                f"{self._max_len} committed and {self.staged} staged"
            )
        offs = torch.arange(self.staged, self.staged + n, device=self.lengths.device)
        write = self.lengths[:, None] + offs
        if self.fixed_width:  # a replayed graph reads the index at a fixed address per (B, n)
            if n not in self._write_bufs:
                self._write_bufs[n] = torch.zeros(
                    self.max_rows, n, dtype=torch.long, device=self.lengths.device
                )
            buf = self._write_bufs[n]
            self._write = buf[: self.rows]
            self._write.copy_(write)
        else:
            self._write = write
        self.staged += n

    def allowed(self, staged_bnq: torch.Tensor) -> torch.Tensor:
        """[B, n, q] visibility of the staged slots -> [B, n, W] (committed slots all visible)."""
        b, n, q = staged_bnq.shape
        slots = torch.arange(self.width, device=self.lengths.device)
        out = (slots[None, None] < self.lengths[:, None, None]).expand(b, n, -1).clone()
        idx = self.lengths[:, None, None] + torch.arange(q, device=out.device)
        return out.scatter_(2, idx.expand(b, n, q), staged_bnq)

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        *_: Any,
        **__: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write this forward's [B, H, n, d] keys and values in place; return [B, H, W, d] views."""
        if layer_idx not in self.keys:
            size = (self.max_rows, key_states.shape[1], self.capacity, key_states.shape[3])
            dt, dev = key_states.dtype, key_states.device
            self.keys[layer_idx] = torch.zeros(size, dtype=dt, device=dev)
            self.values[layer_idx] = torch.zeros(size, dtype=dt, device=dev)
            self.allocations += 2
        keys, values = self.keys[layer_idx][: self.rows], self.values[layer_idx][: self.rows]
        b, h, n, d = key_states.shape
        idx = self._write.to(keys.device)[:, None, :, None].expand(b, h, n, d)
        keys.scatter_(2, idx, key_states)
        values.scatter_(2, idx, value_states)
        w = self.width
        return keys[:, :, :w], values[:, :, :w]

    def commit(
        self,
        src_ba: torch.Tensor | None,
        n_acc: torch.Tensor,
        n_host: Sequence[int] | None = None,
        *,
        moved: bool = True,
    ) -> None:
        """Keep n_acc[r] staged slots of row r: offsets ``src[r, :n_acc[r]]`` (ascending) in the
        staged region, or the first n_acc[r] when ``src`` is None (no entry moves then).

        Args:
            n_host: the same counts on the host (the caller read them already); without them
                the cache reads ``n_acc`` itself (one host sync).
            moved: False when ``src`` is known to be ``0, 1, ...`` in every row (a chain):
                nothing to move.
        """
        if src_ba is not None and src_ba.shape[1] and moved:
            base = self.lengths[:, None]
            dst = base + torch.arange(src_ba.shape[1], device=base.device)
            for layer, keys in self.keys.items():
                for buf in (keys, self.values[layer]):
                    live = buf[: self.rows]
                    b, h, _, d = live.shape
                    dev = live.device
                    gather = (base + src_ba).to(dev)[:, None, :, None].expand(b, h, -1, d)
                    put = dst.to(dev)[:, None, :, None].expand(b, h, -1, d)
                    live.scatter_(2, put, live.gather(2, gather))
        self.lengths += n_acc
        counts = list(n_acc.tolist() if n_host is None else n_host)
        self.host_lengths = [a + n for a, n in zip(self.host_lengths, counts, strict=True)]
        self._max_len = max(self.host_lengths, default=0)
        self.staged = 0

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """max(lengths): older transformers (5.17) ask it for ``cache_position``; the engine
        always passes positions and a 4-D mask, so the value only has to be an int."""
        return self._max_len

    def discard(self) -> None:
        """Drop everything staged since the last commit."""
        self.staged = 0

    def select_rows(self, rows: torch.Tensor, host_rows: Sequence[int] | None = None) -> None:
        """Keep only the live rows ``rows`` ([B'] long, ascending), packed to the front in place.
        ``host_rows``: the same indices on the host (else read from ``rows``: a sync)."""
        for store in (self.keys, self.values):
            for buf in store.values():
                live = buf[: self.rows]
                buf[: len(rows)] = live.index_select(0, rows.to(buf.device))
        self.lengths = self.lengths.index_select(0, rows)
        picked = rows.tolist() if host_rows is None else host_rows
        self.host_lengths = [self.host_lengths[r] for r in picked]
        self.rows = len(picked)
        self._max_len = max(self.host_lengths, default=0)
        self.staged = 0

    def reset(self, batch: int) -> None:
        """Empty the cache for a new batch of ``batch`` rows (<= the rows it was made for),
        keeping its buffers (a captured step keeps reading and writing them)."""
        if batch > self.max_rows:
            raise ValueError(f"a cache made for {self.max_rows} rows cannot take {batch}")
        self.lengths = torch.zeros(batch, dtype=torch.long, device=self.lengths.device)
        self.host_lengths = [0] * batch
        self.rows, self.staged, self._max_len = batch, 0, 0
