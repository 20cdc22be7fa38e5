"""The mixed token stream of a ``pretrain.corpus``: its sources' shards mixed by weight,
indexed once and cut into packed rows lazily.

Each source is tokenised into its own shards by :mod:`workloads.data.source_shards`. Under
``<cache_dir>/tokens/mix-<recipe>/`` per corpus (see :func:`corpus_recipe`) lies the mixed
stream's index, one entry per document in mixed order: ``src.bin`` (``uint16``, source number),
``off.bin`` (``int64``, the document's first token in its source's stream) and ``start.bin``
(``int64``, its first token in the mixed stream), with ``mix.json`` (entries committed, tokens,
per-source state).

Mixing is a weighted round robin by tokens: the next document comes from the source with the
fewest tokens emitted per unit of (normalised) weight, ties by source order, as
:func:`workloads.data.corpus.iter_pretrain_documents` does by characters. **The mixed stream
ends when any source is chosen and has no document left**, so the corpus size is the mixed
stream's size, not the sum of the sources. The greedy order is a merge of the sources' documents
sorted by ``(tokens emitted before the document / weight, source number)``, computed in windows
with numpy.

:class:`StreamRows` cuts the mixed stream into rows of ``L`` tokens (row ``r`` = tokens
``[r L, (r + 1) L)``) on demand from memory-mapped shards, as
:func:`~workloads.data.packing.pack_token_documents` would on the same documents. Each folder
has a file lock, so concurrent ranks and trials share one cache.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from filelock import FileLock

from workloads.data.packing import PACKINGS, PackedRows
from workloads.data.source_shards import (
    CACHE_VERSION,
    SHARD_TOKENS,
    WORK,
    SourceShards,
    WorkCounter,
    ensure_source,
    memmap,
    source_dir,
)
from workloads.data.sources import source_fingerprint
from workloads.draft_train.config import CorpusSource
from workloads.files import atomic_json

__all__ = [
    "SHARD_TOKENS",
    "WORK",
    "CorpusSize",
    "CorpusTooSmall",
    "StreamRows",
    "WorkCounter",
    "cached_corpus_size",
    "corpus_recipe",
    "corpus_rows",
    "corpus_tokens",
]


_MIX_WINDOW = 1 << 28  # mixed-stream tokens placed per merge window, at most
_FIRST_TARGET = 1 << 24  # mixed-stream tokens tokenised for first, then doubling up to the need


@dataclass(frozen=True)
class CorpusSize:
    """What the mixed stream holds, read up to a number of tokens."""

    tokens: int
    """tokens of the mixed stream, at most the ``need`` asked for"""
    complete: bool
    """the mixed stream ended (its size is ``tokens``), i.e. one source ran out"""
    per_source: tuple[int, ...]
    """tokens from each source in the indexed part of the mixed stream, in corpus order"""


class CorpusTooSmall(ValueError):
    """The budget asks for more tokens than the corpus's mixed stream holds (and not repeat)."""


# ---------------------------------------------------------------------------------------------
# The mixed stream


def _weights(corpus: Sequence[CorpusSource]) -> list[float]:
    total = sum(s.weight for s in corpus)
    return [s.weight / total for s in corpus]


def corpus_recipe(corpus: Sequence[CorpusSource], tokenizer_fp: str) -> str:
    """Short hash (16 hex chars) of a tokenised corpus: the tokenizer's fingerprint, each
    source's fingerprint and normalised weight, and the cache version (for feature cache keys).

    Raises:
        ValueError: see :func:`~workloads.data.sources.source_fingerprint`.
    """
    recipe = {
        "v": CACHE_VERSION,
        "tokenizer": tokenizer_fp,
        "sources": [
            [source_fingerprint(s), w] for s, w in zip(corpus, _weights(corpus), strict=True)
        ],
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


_MIX_FILES = (("src", np.uint16), ("off", np.int64), ("start", np.int64))


def _new_mix_state(n_sources: int) -> dict[str, Any]:
    return {
        "version": CACHE_VERSION,
        "n": 0,
        "tokens": 0,
        "next": [0] * n_sources,
        "emitted": [0] * n_sources,
        "complete": False,
        "ended_by": None,
    }


def _read_mix_state(folder: Path, n_sources: int) -> dict[str, Any]:
    """The committed state; raw index files longer than it (an interrupted write) are cut."""
    path = folder / "mix.json"
    state = _new_mix_state(n_sources)
    if path.exists():
        saved = json.loads(path.read_text())
        if saved.get("version") == CACHE_VERSION:
            state = saved
    for name, dtype in _MIX_FILES:
        f = folder / f"{name}.bin"
        size = state["n"] * np.dtype(dtype).itemsize
        if f.exists() and f.stat().st_size != size:
            os.truncate(f, size)
    return state


def _merge_window(
    state: dict[str, Any], sources: list[SourceShards], weights: list[float], cap: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Place the documents whose order is now known, with keys up to ``cap``; update ``state``.

    A document of source ``i`` with ``e`` tokens of ``i`` before it has the key
    ``(e / w_i, i)``; the greedy order is ascending keys. Source ``i``'s next uncached document
    (or, once ``i`` is complete, its end) has the key ``(tokens_i / w_i, i)``; every document
    below the smallest of these is known, and those with keys up to ``cap`` (a number of mixed
    tokens, since the weights sum to 1) are placed. When the bound is a complete source's end,
    the mixed stream ends there.

    Returns:
        ``src`` uint16 [m], ``off`` int64 [m] (first token in the source), ``start`` int64 [m]
        (first token in the mixed stream): the new entries in mixed order.
    """
    frontier = [(s.tokens / w, i) for i, (s, w) in enumerate(zip(sources, weights, strict=True))]
    bound = min(frontier)
    ended = sources[bound[1]].complete
    if (cap, len(sources)) < bound:
        bound, ended = (cap, len(sources)), False
    keys, srcs, offs, lens = [], [], [], []
    for i, (s, w) in enumerate(zip(sources, weights, strict=True)):
        lo = state["next"][i]
        t = min(s.tokens - 1, math.floor(bound[0] * w))
        hi = s.docs if t < 0 else min(s.docs, s.doc_at(t) + 3)
        ends = s.ends(lo, max(lo, hi))
        before = np.concatenate([[state["emitted"][i]], ends]).astype(np.int64)[:-1]
        key = before / w
        c = int(np.searchsorted(key, bound[0], side="left" if i >= bound[1] else "right"))
        keys.append(key[:c])
        srcs.append(np.full(c, i, dtype=np.uint16))
        offs.append(before[:c])
        lens.append(ends[:c] - before[:c])
        state["next"][i] = lo + c
        state["emitted"][i] = int(ends[c - 1]) if c else state["emitted"][i]
    order = np.lexsort((np.concatenate(srcs), np.concatenate(keys)))
    src = np.concatenate(srcs)[order]
    off = np.concatenate(offs)[order]
    length = np.concatenate(lens)[order]
    start = state["tokens"] + np.cumsum(length) - length
    state["n"] += int(src.size)
    state["tokens"] += int(length.sum())
    if ended:
        state["complete"], state["ended_by"] = True, bound[1]
    return src, off, start


@dataclass
class _Mixer:
    """Builds and reads the mixed stream of a corpus (see the module docstring)."""

    corpus: Sequence[CorpusSource]
    tokenizer_fp: str
    cache_dir: Path
    shard_tokens: int = SHARD_TOKENS

    @property
    def folder(self) -> Path:
        recipe = corpus_recipe(self.corpus, self.tokenizer_fp)
        return Path(self.cache_dir) / "tokens" / f"mix-{recipe}"

    def _sources(
        self,
        per_source_need: list[int],
        tokenizer: Any,
        num_proc: int,
        progress: Callable[[str], None] | None,
    ) -> list[SourceShards]:
        return [
            ensure_source(
                src,
                tokenizer,
                folder=source_dir(self.cache_dir, self.tokenizer_fp, src),
                tokenizer_fp=self.tokenizer_fp,
                need=n,
                num_proc=num_proc,
                shard_tokens=self.shard_tokens,
                progress=progress,
            )
            for src, n in zip(self.corpus, per_source_need, strict=True)
        ]

    def ensure(
        self,
        need: int,
        tokenizer: Any,
        *,
        num_proc: int,
        progress: Callable[[str], None] | None,
    ) -> tuple[dict[str, Any], list[SourceShards]]:
        """Index the mixed stream to at least ``need`` tokens, or to its end.

        Returns:
            the committed state (``n`` entries, ``tokens``, ``complete``, ``emitted`` per
            source, ``ended_by``) and each source's shards.
        """
        if len(self.corpus) > np.iinfo(np.uint16).max:
            raise ValueError(f"pretrain.corpus has {len(self.corpus)} sources; at most 65535")
        weights = _weights(self.corpus)
        folder = self.folder
        folder.mkdir(parents=True, exist_ok=True)
        with FileLock(str(folder / ".lock")):
            state = _read_mix_state(folder, len(self.corpus))
            sources = self._sources([0] * len(self.corpus), tokenizer, num_proc, progress)
            target = min(need, _FIRST_TARGET)
            while state["tokens"] < need and not state["complete"]:
                # 1. each source tokenised as far as the mix takes from it up to `target` tokens
                #    (doubling, so a source that ends the stream early stops the others early;
                #    each call goes on where the last one stopped)
                want = [math.floor(target * w) + 2 for w in weights]
                sources = self._sources(want, tokenizer, num_proc, progress)
                # 2. merge in windows of at most _MIX_WINDOW tokens (bounded memory)
                while state["tokens"] < target and not state["complete"]:
                    k = state["tokens"] + min(target - state["tokens"], _MIX_WINDOW)
                    n_before = state["n"]
                    arrays = _merge_window(state, sources, weights, float(k))
                    if state["n"] == n_before and not state["complete"]:
                        break  # a source needs more tokens (float rounding only)
                    for (name, _), arr in zip(_MIX_FILES, arrays, strict=True):
                        with (folder / f"{name}.bin").open("ab") as f:
                            arr.tofile(f)
                    atomic_json(folder / "mix.json", state)
                target = min(need, 2 * target) if state["tokens"] >= target else 2 * target
        return state, sources


# ---------------------------------------------------------------------------------------------
# Rows


class StreamRows:
    """A :class:`~workloads.data.packing.RowSource` over the mixed stream of token shards.

    Row ``r`` is the tokens ``[r L, (r + 1) L)`` of the mixed stream (with ``repeat``, of the
    stream repeated end to end: the first document follows the last one), computed on demand
    in O(L) from memory maps; nothing is held in RAM but the shard tables. ``loss_mask`` is all
    True; positions restart at every document start and at every row start (``isolated``) or
    run ``0..L-1`` (``joined``), exactly as :func:`~workloads.data.packing.pack_token_documents`
    packs the same documents. Pickles small (memory maps are reopened where it lands).
    """

    def __init__(
        self,
        *,
        folder: Path,
        state: dict[str, Any],
        sources: list[SourceShards],
        seq_len: int,
        n_rows: int,
        packing: str,
        repeat: bool,
    ) -> None:
        self._folder = folder
        self._n = int(state["n"])
        self._tokens = int(state["tokens"])
        self._period = self._tokens if repeat and state["complete"] else None
        self._sources = sources
        self._seq_len = seq_len
        self._rows = n_rows
        self._packing = packing
        self._index: dict[str, np.ndarray] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_index": {}}

    @property
    def rows(self) -> int:
        """R, rows available (the ``n_rows`` asked for)."""
        return self._rows

    @property
    def seq_len(self) -> int:
        """L, tokens per row."""
        return self._seq_len

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not self._index:
            for name, dtype in _MIX_FILES:
                self._index[name] = memmap(self._folder / f"{name}.bin", dtype, self._n)
        return self._index["src"], self._index["off"], self._index["start"]

    def _row(self, r: int, ids: np.ndarray, pos: np.ndarray) -> None:
        """Fill ``ids`` [L] and ``pos`` [L] (int64) with row ``r``."""
        src, off, start = self._arrays()
        L, M = self._seq_len, self._tokens
        x = r * L
        if self._period is not None:
            x %= self._period
        elif x + L > M:
            raise IndexError(f"row {r} ends at token {x + L:,}; the stream has {M:,}")
        j = int(np.searchsorted(start, x, side="right")) - 1
        filled = 0
        buf = np.empty(L, dtype=np.uint32)
        while filled < L:
            if j == self._n:  # only with repeat: wrap to the first document
                j, x = 0, 0
            end = int(start[j + 1]) if j + 1 < self._n else M
            take = min(end - x, L - filled)
            a = int(off[j]) + x - int(start[j])
            self._sources[int(src[j])].read(a, take, buf[filled : filled + take])
            pos[filled : filled + take] = np.arange(take)
            filled += take
            x += take
            j += 1
        ids[:] = buf
        if self._packing == "joined":
            pos[:] = np.arange(L)

    def packed(self, idx: torch.Tensor) -> PackedRows:
        """Rows ``idx`` [b] (long, any order) -> ``input_ids``, ``loss_mask``, ``position_ids``
        each [b, L] on the CPU.

        Raises:
            IndexError: an index outside ``[0, rows)``.
        """
        rows = [int(r) for r in idx.reshape(-1).tolist()]
        bad = [r for r in rows if not 0 <= r < self._rows]
        if bad:
            raise IndexError(f"rows {bad[:5]} are outside [0, {self._rows})")
        ids = np.empty((len(rows), self._seq_len), dtype=np.int64)
        pos = np.empty_like(ids)
        for k, r in enumerate(rows):
            self._row(r, ids[k], pos[k])
        ids_t = torch.from_numpy(ids)
        return PackedRows(ids_t, torch.ones_like(ids_t, dtype=torch.bool), torch.from_numpy(pos))


# ---------------------------------------------------------------------------------------------
# Public entry points


def _describe(corpus: Sequence[CorpusSource], state: dict[str, Any]) -> str:
    parts = [f"{s.source} {t:,}" for s, t in zip(corpus, state["emitted"], strict=True)]
    ended = state["ended_by"]
    why = f"; it ends where {corpus[ended].source!r} runs out" if ended is not None else ""
    return f"(tokens per source: {', '.join(parts)}{why})"


def corpus_tokens(
    corpus: Sequence[CorpusSource],
    tokenizer: Any,
    *,
    tokenizer_fp: str,
    cache_dir: Path,
    need: int,
    num_proc: int = 2,
    progress: Callable[[str], None] | None = None,
    shard_tokens: int = SHARD_TOKENS,
) -> CorpusSize:
    """How many tokens the corpus's mixed stream holds, read up to ``need`` tokens.

    Tokenises (and caches, for the trial to reuse) as far as needed: up to ``need`` tokens of
    the mixed stream, or all of it when it is smaller. The mixed stream ends when any source
    runs out (see the module docstring), so a small source with a large weight caps the corpus.

    Raises:
        ValueError: a source that names no file, a missing text field, or a tokenizer without
            EOS (see :func:`~workloads.data.sources.iter_source_documents`).
    """
    state, _ = _Mixer(corpus, tokenizer_fp, Path(cache_dir), shard_tokens).ensure(
        need, tokenizer, num_proc=num_proc, progress=progress
    )
    return CorpusSize(
        tokens=min(int(state["tokens"]), need),
        complete=bool(state["complete"]),
        per_source=tuple(int(t) for t in state["emitted"]),
    )


def cached_corpus_size(
    corpus: Sequence[CorpusSource], *, tokenizer_fp: str, cache_dir: Path, need: int
) -> CorpusSize | None:
    """What :func:`corpus_tokens` would say, read from the cache alone (nothing is written,
    no lock is taken): the mixed stream's committed index when it holds ``need`` tokens or has
    ended; None when the cache cannot tell (not indexed that far, or not at all).

    Raises:
        ValueError: see :func:`corpus_recipe`.
    """
    path = Path(cache_dir) / "tokens" / f"mix-{corpus_recipe(corpus, tokenizer_fp)}" / "mix.json"
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if state.get("version") != CACHE_VERSION:
        return None
    if int(state["tokens"]) < need and not state["complete"]:
        return None
    return CorpusSize(
        tokens=min(int(state["tokens"]), need),
        complete=bool(state["complete"]),
        per_source=tuple(int(t) for t in state["emitted"]),
    )


def corpus_rows(
    corpus: Sequence[CorpusSource],
    tokenizer: Any,
    *,
    tokenizer_fp: str,
    cache_dir: Path,
    seq_len: int,
    packing: str,
    n_rows: int,
    repeat: bool,
    num_proc: int = 2,
    progress: Callable[[str], None] | None = None,
    shard_tokens: int = SHARD_TOKENS,
) -> StreamRows:
    """``n_rows`` packed rows of ``seq_len`` tokens from the corpus's mixed stream.

    Tokenises what is not cached yet (``n_rows * seq_len`` tokens, or the whole corpus when it
    is smaller), then returns a lazy :class:`StreamRows`. The corpus's size is its mixed
    stream's, which ends when any source runs out.

    Args:
        corpus: the sources, with weights (shares of tokens).
        tokenizer: a Hugging Face tokenizer with an EOS token (picklable if not on Linux).
        tokenizer_fp: the tokenizer's fingerprint (part of every cache key).
        cache_dir: the cache root; shards go under ``<cache_dir>/tokens/``.
        seq_len: L, tokens per row.
        packing: ``isolated`` or ``joined`` (see :mod:`workloads.data.packing`).
        n_rows: R, rows wanted.
        repeat: wrap to the corpus's first document when the rows run past its end.
        num_proc: tokenising processes (the result does not depend on it).
        progress: called with one line per shard written.
        shard_tokens: tokens per shard file.

    Raises:
        ValueError: ``seq_len`` or ``n_rows`` < 1, an unknown packing, or see
            :func:`corpus_tokens`.
        CorpusTooSmall: ``n_rows * seq_len`` tokens exceed the corpus and not ``repeat`` (or
            the corpus is empty).
    """
    if seq_len < 1 or n_rows < 1:
        raise ValueError(f"seq_len={seq_len}, n_rows={n_rows}: both must be >= 1")
    if packing not in PACKINGS:
        raise ValueError(f"packing {packing!r} is not one of {list(PACKINGS)}")
    need = n_rows * seq_len
    mixer = _Mixer(corpus, tokenizer_fp, Path(cache_dir), shard_tokens)
    state, sources = mixer.ensure(need, tokenizer, num_proc=num_proc, progress=progress)
    have = int(state["tokens"])
    if have == 0:
        raise CorpusTooSmall(
            f"the corpus holds no tokens {_describe(corpus, state)}. Fix: name sources with "
            "non-empty texts in pretrain.corpus"
        )
    if have < need and not repeat:
        raise CorpusTooSmall(
            f"pretraining needs {need:,} tokens ({n_rows:,} rows of {seq_len}) but the corpus "
            f"holds {have:,} tokens {_describe(corpus, state)}. Fix: a smaller pretrain.tokens "
            f"(at most {have // seq_len * seq_len:,}), more or larger sources in "
            "pretrain.corpus, or pretrain.repeat: true"
        )
    return StreamRows(
        folder=mixer.folder,
        state=state,
        sources=sources,
        seq_len=seq_len,
        n_rows=n_rows,
        packing=packing,
        repeat=repeat,
    )
