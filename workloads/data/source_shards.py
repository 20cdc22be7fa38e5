"""One corpus source tokenised into token shards, once, as far as a caller needs.

Layout of ``<cache_dir>/tokens/<tokenizer_fp>-<source_fp>/`` (see
:func:`~workloads.data.sources.source_fingerprint`): ``shard-NNNNN.bin`` flat ``uint32`` token
ids, each document followed by the EOS token; ``shard-NNNNN.idx`` ``int64`` [docs in shard]:
each document's end offset in its shard, in tokens; ``manifest.json`` with one entry per shard
(rewritten atomically after each shard) and ``complete: true`` once the source is exhausted.

A source is tokenised in parallel by ``num_proc`` processes over batches of documents, results
taken in order (so the shards hold the same token stream whatever ``num_proc``), only as far as
a caller needs, and a later call for more tokens resumes after the last document cached
(Megatron-LM's ``.bin``/``.idx`` indexed dataset, simplified). :class:`SourceShards` reads them
back through memory maps. The mixed stream of a corpus over its sources' shards is
:mod:`workloads.data.shards`. Each folder has a file lock, so concurrent ranks and trials share
one cache.
"""

from __future__ import annotations

import bisect
import itertools
import json
import logging
import multiprocessing
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from workloads.data.corpus import Document
from workloads.data.sources import iter_source_documents, source_fingerprint
from workloads.draft_train.config import CorpusSource
from workloads.files import atomic_json, atomic_write

__all__ = [
    "CACHE_VERSION",
    "SHARD_TOKENS",
    "WORK",
    "SourceShards",
    "WorkCounter",
    "ensure_source",
    "memmap",
    "source_dir",
]

log = logging.getLogger(__name__)

SHARD_TOKENS = 1 << 24
"""tokens per shard file (64 MiB of uint32); the last shard of a call may be shorter"""

CACHE_VERSION = 1
"""version of the shard manifests and the mixed-stream index (part of every cache key)"""

_BATCH_CHARS = 1 << 20  # characters per tokenisation task, at most
_MIN_BATCH_CHARS = 1 << 12
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


# ---------------------------------------------------------------------------------------------
# Small file helpers


def memmap(path: Path, dtype: Any, count: int) -> np.ndarray:
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
class SourceShards:
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
                arr = memmap(path, np.uint32, info["tokens"])
            else:
                arr = memmap(path, np.int64, info["docs"])
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


def source_dir(cache_dir: Path, tokenizer_fp: str, src: CorpusSource) -> Path:
    return Path(cache_dir) / "tokens" / f"{tokenizer_fp}-{source_fingerprint(src)}"


def _read_manifest(folder: Path, src: CorpusSource, tokenizer_fp: str) -> dict[str, Any]:
    path = folder / "manifest.json"
    if path.exists():
        man: dict[str, Any] = json.loads(path.read_text())
        if man.get("version") == CACHE_VERSION:
            return man
    return {
        "version": CACHE_VERSION,
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
        atomic_write(self.folder / f"{name}.bin", np.concatenate(self.parts).tobytes())
        atomic_write(self.folder / f"{name}.idx", np.cumsum(lengths).tobytes())
        man["shards"].append({"name": name, "docs": int(lengths.size), "tokens": self.buffered})
        man["docs"] += int(lengths.size)
        man["tokens"] += self.buffered
        atomic_json(self.folder / "manifest.json", man)
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


def ensure_source(
    src: CorpusSource,
    tokenizer: Any,
    *,
    folder: Path,
    tokenizer_fp: str,
    need: int,
    num_proc: int,
    shard_tokens: int,
    progress: Callable[[str], None] | None,
) -> SourceShards:
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
                atomic_json(folder / "manifest.json", man)
        return SourceShards(folder, list(man["shards"]), bool(man["complete"]))
