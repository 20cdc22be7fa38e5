"""A token-shard cache for ``pretrain.corpus``: tokenised once, mixed deterministically, read
lazily.

Layout under ``<cache_dir>/tokens/``:

* ``<tokenizer_fp>-<source_fp>/`` per source (see
  :func:`~workloads.data.sources.source_fingerprint`):
  ``shard-NNNNN.bin`` flat ``uint32`` token ids, each document followed by the EOS token;
  ``shard-NNNNN.idx`` ``int64`` [docs in shard]: each document's end offset in its shard, in
  tokens; ``manifest.json`` with one entry per shard (rewritten atomically after each shard) and
  ``complete: true`` once the source is exhausted. A source is tokenised in parallel by
  ``num_proc`` processes over batches of documents, results taken in order (so the shards hold
  the same token stream whatever ``num_proc``), only as far as a caller needs, and a later call
  for more tokens resumes after the last document cached (Megatron-LM's ``.bin``/``.idx``
  indexed dataset, simplified).
* ``mix-<recipe>/`` per corpus (see :func:`corpus_recipe`): the mixed stream's index, one entry
  per document in mixed order: ``src.bin`` (``uint16``, source number), ``off.bin`` (``int64``,
  the document's first token in its source's stream) and ``start.bin`` (``int64``, its first
  token in the mixed stream), with ``mix.json`` (entries committed, tokens, per-source state).

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

import bisect
import hashlib
import itertools
import json
import logging
import math
import multiprocessing
import os
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from filelock import FileLock

from workloads.config import CorpusSource
from workloads.data.corpus import Document
from workloads.data.packing import PACKINGS, PackedRows
from workloads.data.sources import iter_source_documents, source_fingerprint

__all__ = [
    "SHARD_TOKENS",
    "WORK",
    "CorpusSize",
    "CorpusTooSmall",
    "StreamRows",
    "WorkCounter",
    "corpus_recipe",
    "corpus_rows",
    "corpus_tokens",
]

log = logging.getLogger(__name__)

SHARD_TOKENS = 1 << 24
"""tokens per shard file (64 MiB of uint32); the last shard of a call may be shorter"""

_VERSION = 1
_BATCH_CHARS = 1 << 20  # characters per tokenisation task, at most
_MIN_BATCH_CHARS = 1 << 12
_MIX_WINDOW = 1 << 28  # mixed-stream tokens placed per merge window, at most
_FIRST_TARGET = 1 << 24  # mixed-stream tokens tokenised for first, then doubling up to the need
_MAX_OPEN = 64  # memory maps kept open per source


@dataclass
class WorkCounter:
    """Work done by this process's cache builds (mutated in place; tests read it)."""

    documents: int = 0
    """documents tokenised"""
    tokens: int = 0
    """tokens produced (EOS included)"""
    shards: int = 0
    """shard files written"""
    read: int = 0
    """documents read from sources (tokenised or skipped on the way to a resume point)"""


WORK = WorkCounter()
"""the process-wide :class:`WorkCounter`"""


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
# Small file helpers


def _atomic_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` atomically (temporary file, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def _atomic_array(path: Path, arr: np.ndarray) -> None:
    """Write the raw bytes of ``arr`` to ``path`` atomically."""
    tmp = path.with_name(path.name + ".tmp")
    arr.tofile(tmp)
    os.replace(tmp, path)


def _memmap(path: Path, dtype: Any, count: int) -> np.ndarray:
    """The first ``count`` items of a raw array file, memory-mapped read-only."""
    if count == 0:
        return np.empty(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))


# ---------------------------------------------------------------------------------------------
# Tokenisation (in worker processes or inline)

_WORKER: dict[str, Any] = {}


def _init_worker(tokenizer: Any) -> None:
    _WORKER["tokenizer"] = tokenizer


def _encode_in_worker(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    return _encode(_WORKER["tokenizer"], texts)


def _encode(tokenizer: Any, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of ``texts``, each followed by EOS.

    Returns:
        ``uint32`` [tokens] the ids end to end, ``int64`` [docs] each text's length in tokens.
    """
    eos = tokenizer.eos_token_id
    ids = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
    lengths = np.array([len(x) + 1 for x in ids], dtype=np.int64)
    if not ids:
        return np.empty(0, dtype=np.uint32), lengths
    flat = np.concatenate([np.asarray([*x, eos], dtype=np.uint32) for x in ids])
    return flat, lengths


def _batches(texts: Iterable[str], max_chars: int) -> Iterator[list[str]]:
    """Group texts into lists of about ``max_chars`` characters (at least one text each)."""
    batch: list[str] = []
    chars = 0
    for text in texts:
        batch.append(text)
        chars += len(text)
        if chars >= max_chars:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def _tokenized(
    batches: Iterator[list[str]], tokenizer: Any, num_proc: int, enough: Callable[[], bool]
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Encode batches in order, by ``num_proc`` processes (inline for 1), until ``enough()``.

    At most ``2 * num_proc`` batches are in flight; once ``enough()`` is true no batch is
    submitted, and those in flight are still yielded (their work is kept).
    """
    if num_proc <= 1:
        while not enough():  # checked before a batch is taken, so none is taken and dropped
            batch = next(batches, None)
            if batch is None:
                return
            yield _encode(tokenizer, batch)
        return
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with ProcessPoolExecutor(
        num_proc, mp_context=ctx, initializer=_init_worker, initargs=(tokenizer,)
    ) as pool:
        pending: deque[Future[tuple[np.ndarray, np.ndarray]]] = deque()
        ran_out = False
        while True:
            while not ran_out and len(pending) < 2 * num_proc and not enough():
                try:
                    pending.append(pool.submit(_encode_in_worker, next(batches)))
                except StopIteration:
                    ran_out = True
            if not pending:
                return
            yield pending.popleft().result()


# ---------------------------------------------------------------------------------------------
# One source's shards


@dataclass
class _SourceShards:
    """Read access to one source's cached shards (a snapshot of its manifest).

    Memory maps are opened on demand (at most ``_MAX_OPEN`` kept) and never pickled.
    """

    folder: Path
    shards: list[dict[str, Any]]
    complete: bool
    # [S + 1] the first token and the first document of each shard, and the totals
    _tok0: list[int] = field(init=False, repr=False)
    _doc0: list[int] = field(init=False, repr=False)
    _maps: OrderedDict[str, np.ndarray] = field(init=False, repr=False, default_factory=OrderedDict)

    def __post_init__(self) -> None:
        self._tok0 = [0, *itertools.accumulate(s["tokens"] for s in self.shards)]
        self._doc0 = [0, *itertools.accumulate(s["docs"] for s in self.shards)]

    def __getstate__(self) -> dict[str, Any]:
        return {"folder": self.folder, "shards": self.shards, "complete": self.complete}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.folder, self.shards = state["folder"], state["shards"]
        self.complete = state["complete"]
        self._maps = OrderedDict()
        self.__post_init__()

    @property
    def tokens(self) -> int:
        """Tokens cached."""
        return self._tok0[-1]

    @property
    def docs(self) -> int:
        """Documents cached."""
        return self._doc0[-1]

    def _map(self, s: int, ext: str) -> np.ndarray:
        key = f"{s}{ext}"
        arr = self._maps.pop(key, None)
        if arr is None:
            info = self.shards[s]
            path = self.folder / f"{info['name']}{ext}"
            if ext == ".bin":
                arr = _memmap(path, np.uint32, info["tokens"])
            else:
                arr = _memmap(path, np.int64, info["docs"])
        self._maps[key] = arr
        while len(self._maps) > _MAX_OPEN:
            self._maps.popitem(last=False)
        return arr

    def doc_at(self, t: int) -> int:
        """Index of the document holding source token ``t`` (0 <= t < tokens)."""
        s = bisect.bisect_right(self._tok0, t) - 1
        local = self._map(s, ".idx")
        return self._doc0[s] + int(np.searchsorted(local, t - self._tok0[s], side="right"))

    def ends(self, lo: int, hi: int) -> np.ndarray:
        """``int64`` [hi - lo]: end offsets of documents ``lo..hi-1`` in the source's stream."""
        out = np.empty(hi - lo, dtype=np.int64)
        k = lo
        while k < hi:
            s = bisect.bisect_right(self._doc0, k) - 1
            upto = min(hi, self._doc0[s + 1])
            local = self._map(s, ".idx")[k - self._doc0[s] : upto - self._doc0[s]]
            out[k - lo : upto - lo] = local + self._tok0[s]
            k = upto
        return out

    def read(self, off: int, n: int, out: np.ndarray) -> None:
        """Copy source tokens ``[off, off + n)`` into ``out`` [n]."""
        done = 0
        while done < n:
            s = bisect.bisect_right(self._tok0, off + done) - 1
            a = off + done - self._tok0[s]
            take = min(n - done, self._tok0[s + 1] - (off + done))
            out[done : done + take] = self._map(s, ".bin")[a : a + take]
            done += take


def _source_dir(cache_dir: Path, tokenizer_fp: str, src: CorpusSource) -> Path:
    return Path(cache_dir) / "tokens" / f"{tokenizer_fp}-{source_fingerprint(src)}"


def _read_manifest(folder: Path, src: CorpusSource, tokenizer_fp: str) -> dict[str, Any]:
    path = folder / "manifest.json"
    if path.exists():
        man: dict[str, Any] = json.loads(path.read_text())
        if man.get("version") == _VERSION:
            return man
    return {
        "version": _VERSION,
        "source": src.source,
        "text_field": src.text_field,
        "tokenizer_fp": tokenizer_fp,
        "shards": [],
        "docs": 0,
        "tokens": 0,
        "complete": False,
    }


@dataclass
class _ShardWriter:
    """Buffers tokenised documents and writes them out as shards, updating the manifest."""

    folder: Path
    man: dict[str, Any]
    progress: Callable[[str], None] | None
    t0: float = field(default_factory=time.perf_counter)
    t_tokens: int = 0
    parts: list[np.ndarray] = field(default_factory=list)
    lens: list[np.ndarray] = field(default_factory=list)
    buffered: int = 0

    def add(self, tokens: np.ndarray, lengths: np.ndarray) -> None:
        self.parts.append(tokens)
        self.lens.append(lengths)
        self.buffered += int(tokens.size)
        self.t_tokens += int(tokens.size)
        WORK.documents += int(lengths.size)
        WORK.tokens += int(tokens.size)

    def flush(self) -> None:
        """Write the buffer as the next shard (nothing if empty) and append it to the manifest."""
        if not self.buffered:
            return
        man = self.man
        name = f"shard-{len(man['shards']):05d}"
        lengths = np.concatenate(self.lens)
        _atomic_array(self.folder / f"{name}.bin", np.concatenate(self.parts))
        _atomic_array(self.folder / f"{name}.idx", np.cumsum(lengths))
        man["shards"].append({"name": name, "docs": int(lengths.size), "tokens": self.buffered})
        man["docs"] += int(lengths.size)
        man["tokens"] += self.buffered
        _atomic_json(self.folder / "manifest.json", man)
        WORK.shards += 1
        self.parts, self.lens, self.buffered = [], [], 0
        rate = self.t_tokens / max(time.perf_counter() - self.t0, 1e-9)
        msg = (
            f"tokenised {man['source']}: {name}, {man['tokens']:,} tokens so far "
            f"({rate:,.0f} tokens/s)"
        )
        log.info(msg)
        if self.progress is not None:
            self.progress(msg)


_READERS: OrderedDict[str, tuple[int, Iterator[str]]] = OrderedDict()
"""source folder -> (documents read, the text iterator there): a later call in this process
continues the same pass over the source instead of reading it again from its start"""
_MAX_READERS = 8


def _reader(src: CorpusSource, folder: Path, start: int) -> Iterator[str]:
    """The texts of ``src`` from document ``start`` on."""
    held = _READERS.pop(str(folder), None)
    if held is not None and held[0] == start:
        return held[1]
    return itertools.islice(_counted(iter_source_documents(src)), start, None)


def _counted(docs: Iterator[Document]) -> Iterator[str]:
    for doc in docs:
        WORK.read += 1
        yield doc.text


def _keep_reader(folder: Path, position: int, texts: Iterator[str]) -> None:
    _READERS[str(folder)] = (position, texts)
    while len(_READERS) > _MAX_READERS:
        _READERS.popitem(last=False)


def _ensure_source(
    src: CorpusSource,
    tokenizer: Any,
    *,
    folder: Path,
    tokenizer_fp: str,
    need: int,
    num_proc: int,
    shard_tokens: int,
    progress: Callable[[str], None] | None,
) -> _SourceShards:
    """Tokenise ``src`` until its cache holds at least ``need`` tokens or the source ends.

    Resumes after the last cached document: with the reader this process left there (see
    :data:`_READERS`), else by reading the documents before it again (not tokenising them).
    Holds the folder's file lock while it works.

    Raises:
        ValueError: the tokenizer has no EOS token, or see
            :func:`~workloads.data.sources.iter_source_documents`.
    """
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / ".lock")):
        man = _read_manifest(folder, src, tokenizer_fp)
        if not man["complete"] and man["tokens"] < need:
            if tokenizer.eos_token_id is None:
                raise ValueError("the tokenizer has no eos_token_id. Fix: set tokenizer.eos_token")
            writer = _ShardWriter(folder, man, progress)
            texts = _reader(src, folder, man["docs"])
            max_chars = min(_BATCH_CHARS, max(_MIN_BATCH_CHARS, 4 * (need - man["tokens"])))
            batches = _batches(texts, max_chars // max(2 * num_proc, 1))

            def done() -> bool:
                return man["tokens"] + writer.buffered >= need

            for tokens, lengths in _tokenized(batches, tokenizer, num_proc, done):
                writer.add(tokens, lengths)
                if writer.buffered >= shard_tokens:
                    writer.flush()
            enough = done()
            writer.flush()
            if enough:
                _keep_reader(folder, man["docs"], texts)
            else:
                man["complete"] = True
                _atomic_json(folder / "manifest.json", man)
        return _SourceShards(folder, list(man["shards"]), bool(man["complete"]))


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
        "v": _VERSION,
        "tokenizer": tokenizer_fp,
        "sources": [
            [source_fingerprint(s), w] for s, w in zip(corpus, _weights(corpus), strict=True)
        ],
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


_MIX_FILES = (("src", np.uint16), ("off", np.int64), ("start", np.int64))


def _new_mix_state(n_sources: int) -> dict[str, Any]:
    return {
        "version": _VERSION,
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
        if saved.get("version") == _VERSION:
            state = saved
    for name, dtype in _MIX_FILES:
        f = folder / f"{name}.bin"
        size = state["n"] * np.dtype(dtype).itemsize
        if f.exists() and f.stat().st_size != size:
            os.truncate(f, size)
    return state


def _merge_window(
    state: dict[str, Any], sources: list[_SourceShards], weights: list[float], cap: float
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
    ) -> list[_SourceShards]:
        return [
            _ensure_source(
                src,
                tokenizer,
                folder=_source_dir(self.cache_dir, self.tokenizer_fp, src),
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
    ) -> tuple[dict[str, Any], list[_SourceShards]]:
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
                    _atomic_json(folder / "mix.json", state)
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
        sources: list[_SourceShards],
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
                self._index[name] = _memmap(self._folder / f"{name}.bin", dtype, self._n)
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
