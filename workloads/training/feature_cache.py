"""The on-disk feature cache (``features.mode: cached``): a stage's
:class:`~workloads.training.features.FeatureSet` built by :func:`ensure_features` and read lazily
by :class:`CachedFeatures`.

Cached features depend only on (target, corpus recipe, stage, sequence length, dtype, packing),
so they are computed once and shared by every trial of every sweep. Rows are stored in chunks of
``rows_per_chunk`` rows (``chunk-NNNNN.safetensors``); chunk c holds rows
``[c * rows_per_chunk, (c + 1) * rows_per_chunk)`` and is built from exactly those rows of the
stage's :class:`~workloads.data.packing.RowSource`, so building n chunks costs n chunks of work.
Packing is deterministic, so the rows of a smaller budget are a prefix of a larger one's: nested
budgets share chunks (a last chunk cut short by a small budget is rebuilt whole when a larger
budget needs its missing rows).

The folder's ``manifest.json`` holds the identity of the feature set (target, dtype, stage,
corpus recipe, tokenizer fingerprint, sequence length, packing, rows per chunk; a mismatch is
refused). A manifest written before packing was part of the identity describes joined rows: it is
upgraded in place (``packing: joined``) when joined rows are asked for, and refused with the fix
when isolated rows are, so rows of the two packings are never mixed. It also records what has
been built: per chunk its row range, token count and the SHA-256 of its file, and
``token_range``, the tokens of the stream cached without a gap from the first. A chunk built is
recorded by appending one line to ``manifest.journal`` (constant work per chunk); each
:func:`ensure_features` call folds the journal into ``manifest.json`` once, at its end, and
readers see both.

Integrity: a chunk's checksum is recorded when the chunk is written. :func:`ensure_features`
checks every chunk it hands out (a streaming hash of the file); a chunk whose file does not
match (or does not parse as a chunk) is logged as a warning, rebuilt from the corpus and the
target, and the rebuilt chunk is used, never the corrupt one. A chunk recorded by a manifest from
before checksums existed is trusted on its first read (trust on first use): its checksum is
computed then and recorded, and checked from then on; a legacy chunk that no longer parses is
rebuilt. A :class:`CachedFeatures` object checks each chunk once per process, when it first maps
it (one sent to a Ray worker checks the chunks that worker reads), unless the file is the very one
(same inode, size and modification time) that :func:`ensure_features` checked in this process.
Chunk files are replaced only by renaming a new file over them, never written in place, so a
mapped file stays the file that was checked.

Concurrency: each chunk is built under its own file lock and written atomically (temporary file,
then rename). A trial first builds whatever chunks nobody else is building (non-blocking lock),
then waits for the rest, so two trials asking at once split the work instead of duplicating it.

The chunk files, checksums, manifest and journal are read and written by
:mod:`workloads.training._feature_files`.

Shape legend: R rows, L sequence length, h hidden size, b rows asked for.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from filelock import FileLock, Timeout
from safetensors.torch import save

from workloads.data.packing import PackedRows, RowSource
from workloads.files import atomic_write
from workloads.training._feature_files import (
    FileId,
    check_chunk,
    check_manifest,
    chunk_name,
    file_id,
    fold_journal,
    journal,
    read_header,
    recorded_sha256s,
    sha256_of,
)
from workloads.training.features import target_hidden

log = logging.getLogger(__name__)


@dataclass
class CacheStats:
    """What one :func:`ensure_features` call found and did.

    ``hits``/``misses``: chunks found valid / built. ``rebuilt`` counts chunks found corrupt
    (checksum mismatch or unreadable) and built again; they count as misses too.
    ``rows_packed``: rows asked of the row source (each chunk asks for its own rows only, so
    this is the chunks built times ``rows_per_chunk``, at most). ``target_rows``: rows run
    through the target. ``build_s``: seconds spent building."""

    hits: int = 0
    misses: int = 0
    build_s: float = 0.0
    rebuilt: int = 0
    rows_packed: int = 0
    target_rows: int = 0


def feature_dir(cache_dir: Path, *, target: str, stage: str, recipe: str, seq_len: int) -> Path:
    """Folder of one feature set; ``recipe`` fingerprints the corpus."""
    slug = hashlib.sha256(target.encode()).hexdigest()[:8]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in target)[-48:]
    return cache_dir / "features" / f"{safe}-{slug}" / f"{stage}-{recipe}-L{seq_len}"


def ensure_features(
    folder: Path,
    *,
    rows: RowSource,
    n_rows: int,
    rows_per_chunk: int,
    target_model: torch.nn.Module,
    manifest: dict[str, object],
    batch: int = 4,
    layers: tuple[int, ...] = (),
) -> tuple[CachedFeatures, CacheStats]:
    """The first ``n_rows`` feature rows of a stage, building missing chunks on the way.

    Chunk c is built from rows ``[c * rows_per_chunk, (c + 1) * rows_per_chunk)`` of ``rows``
    (fewer when ``rows`` ends first) and nothing else. Every chunk handed out is checked
    against its recorded checksum first (see the module docstring); nothing is read into RAM
    beyond one chunk being built.

    Args:
        folder: the feature set's folder (see :func:`feature_dir`).
        rows: the stage's packed rows (row r the same in every run); asked only for the rows of
            the chunks built.
        n_rows: rows wanted (0 gives an empty set), at most ``rows.rows``.
        rows_per_chunk: rows per chunk file; fixed per folder (recorded in the manifest).
        target_model: the frozen target, used on a miss.
        manifest: what identifies the feature set (target, recipe, seq_len, ...), written once.
        batch: rows per target forward when building.
        layers: the target layers fused into the features (:mod:`workloads.models.fusion`);
            the manifest must say so (its ``hidden`` entry).

    Returns:
        The rows as a lazy :class:`CachedFeatures`, and what this call found and built.

    Raises:
        ValueError: the folder's manifest disagrees with ``manifest`` (a stale or foreign
            cache), or ``rows`` has fewer than ``n_rows`` rows or another ``seq_len`` than the
            manifest's.
    """
    seq_len = int(rows.seq_len)
    if n_rows > rows.rows:
        raise ValueError(f"{n_rows} feature rows asked for, but the row source has {rows.rows}")
    if "seq_len" in manifest and manifest["seq_len"] != seq_len:
        raise ValueError(
            f"rows of length {seq_len} for a manifest of seq_len {manifest['seq_len']}"
        )
    folder.mkdir(parents=True, exist_ok=True)
    check_manifest(folder, {**manifest, "rows_per_chunk": rows_per_chunk})
    n_chunks = -(-n_rows // rows_per_chunk)
    chunks = _ChunkBuilder(folder, rows, rows_per_chunk, target_model, batch, layers)
    chunks.build_missing(n_chunks)
    chunks.check_the_rest(n_rows, n_chunks)
    stats = chunks.stats
    stats.hits = n_chunks - stats.misses
    fold_journal(folder)
    feats = CachedFeatures(folder, n_rows=n_rows, rows_per_chunk=rows_per_chunk, seq_len=seq_len)
    feats._checked.update(chunks.checked)
    return feats, stats


class _ChunkBuilder:
    """The chunks of one :func:`ensure_features` call: built when missing, checked otherwise,
    what was done counted in ``stats``.

    Chunk c is built from rows ``[c * rows_per_chunk, (c + 1) * rows_per_chunk)`` of ``rows``
    (fewer when ``rows`` ends first), its target features [rows, L, F] computed by
    ``target_model``, ``batch`` rows per forward (fused ``layers``, if any, before h_last).
    """

    def __init__(
        self,
        folder: Path,
        rows: RowSource,
        rows_per_chunk: int,
        target_model: torch.nn.Module,
        batch: int,
        layers: tuple[int, ...] = (),
    ) -> None:
        self.folder, self.rows, self.rows_per_chunk = folder, rows, rows_per_chunk
        self.target_model, self.batch, self.layers = target_model, batch, layers
        self.seq_len = int(rows.seq_len)
        self.stats = CacheStats()
        self.checked: dict[int, FileId] = {}
        """chunk -> the file checked (or written) by this call"""

    def build_missing(self, n_chunks: int) -> None:
        """Build the chunks ``[0, n_chunks)`` that have no file: first those nobody else is
        building (non-blocking lock), then, waiting for each lock, those left."""
        path = [self.folder / chunk_name(c) for c in range(n_chunks)]
        for blocking in (False, True):
            for c in range(n_chunks):
                if path[c].exists():
                    continue
                try:
                    with FileLock(str(path[c]) + ".lock", timeout=-1 if blocking else 0):
                        if not path[c].exists():
                            self.build(c)
                except Timeout:
                    continue

    def check_the_rest(self, n_rows: int, n_chunks: int) -> None:
        """Check each chunk of ``[0, n_chunks)`` this call did not build against its recorded
        checksum (the first ``n_rows`` rows must be there); settle one that fails under its lock:
        trusted on first use, or rebuilt."""
        recorded = recorded_sha256s(self.folder)  # read once: per chunk it would cost chunks^2
        rows_per_chunk = self.rows_per_chunk
        for c in range(n_chunks):
            if c in self.checked:
                continue
            path = self.folder / chunk_name(c)
            lo, need = c * rows_per_chunk, min(rows_per_chunk, n_rows - c * rows_per_chunk)
            status, fid = check_chunk(self.folder, path, lo, need, recorded.get(path.name))
            if (
                status != "ok"
            ):  # no checksum yet, corrupt or short: settle it under the chunk's lock
                with FileLock(str(path) + ".lock"):
                    want = recorded_sha256s(self.folder).get(path.name)  # may be newer now
                    status, fid = check_chunk(
                        self.folder, path, lo, need, want, first_use=True, warn=True
                    )
                    if status != "ok":  # (and nobody rebuilt it meanwhile): rebuild it
                        self.stats.rebuilt += status == "corrupt"
                        self.build(c)
                        continue
            assert fid is not None, "a chunk checked ok has a file"
            self.checked[c] = fid

    def build(self, c: int) -> None:
        """Build chunk c from its own rows, write it atomically, journal its checksum."""
        stats, seq_len, path = self.stats, self.seq_len, self.folder / chunk_name(c)
        t0 = time.perf_counter()
        lo = c * self.rows_per_chunk
        hi = min(lo + self.rows_per_chunk, self.rows.rows)
        part = self.rows.packed(torch.arange(lo, hi))
        stats.rows_packed += hi - lo
        hidden = target_hidden(
            self.target_model, part.input_ids, part.position_ids, self.batch, layers=self.layers
        )
        stats.target_rows += hi - lo
        raw = save(
            {
                "input_ids": part.input_ids.to(torch.int32).contiguous(),
                "loss_mask": part.loss_mask.to(torch.uint8).contiguous(),
                "position_ids": part.position_ids.to(torch.int32).contiguous(),
                "hidden": hidden.contiguous(),
            }
        )
        atomic_write(path, raw)
        self.checked[c] = file_id(os.stat(path))
        journal(self.folder, path.name, lo, hi, seq_len, hashlib.sha256(raw).hexdigest())
        stats.misses += 1
        stats.build_s += time.perf_counter() - t0
        log.info(
            "features: built %s (%d tokens) in %.1f s",
            path.name,
            (hi - lo) * seq_len,
            time.perf_counter() - t0,
        )


class CachedFeatures:
    """A :class:`FeatureSet` read lazily from a feature folder's chunk files (memory-mapped).

    Only the chunks holding the rows asked for are mapped (at most ``max_open`` at once, the
    least recently used unmapped first); rows are copied out of the mapping, so RAM holds the
    rows of a step, never the stage. Each chunk is checked against the manifest's checksum once
    per process, when first mapped. Pickling keeps the folder and the sizes only (a few hundred
    bytes): a Ray worker given the object maps and checks only the chunks of its own rows.

    Args:
        folder: a folder :func:`ensure_features` built.
        n_rows: R, rows of the stage (the first R of the folder).
        rows_per_chunk: the folder's rows per chunk.
        seq_len: L.
        max_open: chunks kept mapped at once.
    """

    def __init__(
        self,
        folder: Path,
        *,
        n_rows: int,
        rows_per_chunk: int,
        seq_len: int,
        max_open: int = 16,
    ) -> None:
        self.folder, self.n_rows, self.rows_per_chunk = Path(folder), n_rows, rows_per_chunk
        self._seq_len, self.max_open = seq_len, max_open
        self._reset()

    def _reset(self) -> None:
        self._maps: OrderedDict[int, dict[str, np.ndarray]] = OrderedDict()
        self._checked: dict[int, FileId] = {}
        self._sha256: dict[str, str] | None = None
        self._opened: list[int] = []

    def __getstate__(self) -> dict[str, Any]:
        keep = ("folder", "n_rows", "rows_per_chunk", "_seq_len", "max_open")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:
        return f"CachedFeatures({str(self.folder)!r}, rows={self.n_rows}, seq_len={self.seq_len})"

    @property
    def rows(self) -> int:
        """R, rows of the stage."""
        return self.n_rows

    @property
    def seq_len(self) -> int:
        """L, tokens per row."""
        return self._seq_len

    @property
    def tokens(self) -> int:
        """R * L."""
        return self.n_rows * self._seq_len

    @property
    def opened_chunks(self) -> tuple[int, ...]:
        """Chunks this object mapped in this process, in order (a chunk mapped again after
        being unmapped appears again)."""
        return tuple(self._opened)

    def packed(self, idx: torch.Tensor) -> PackedRows:
        """Rows ``idx`` [b] -> ids (long), loss mask (bool), positions (long), each [b, L].

        Raises:
            IndexError: an index outside ``[0, R)``.
            RuntimeError: a chunk no longer matches its checksum (run the trial again: its
                feature step rebuilds it).
        """
        got = self._gather(idx, ("input_ids", "loss_mask", "position_ids"))
        ids = got["input_ids"].long()
        pos = got.get("position_ids")  # absent in chunks from before positions were stored
        positions = torch.arange(self._seq_len).expand_as(ids) if pos is None else pos.long()
        return PackedRows(ids, got["loss_mask"].bool(), positions)

    def hidden(self, idx: torch.Tensor, packed: PackedRows | None = None) -> torch.Tensor:
        """[b, L, h] float16 hidden states of rows ``idx`` (CPU); raises as :meth:`packed`."""
        return self._gather(idx, ("hidden",))["hidden"]

    def _gather(self, idx: torch.Tensor, keys: tuple[str, ...]) -> dict[str, torch.Tensor]:
        """The tensors ``keys`` of rows ``idx``, read chunk by chunk (a key a chunk lacks is
        left out)."""
        idx = torch.as_tensor(idx, dtype=torch.long).reshape(-1).cpu()
        if len(idx) == 0:
            empty = torch.zeros(0, self._seq_len, dtype=torch.int32)
            return {k: empty[..., None].half() if k == "hidden" else empty for k in keys}
        if int(idx.min()) < 0 or int(idx.max()) >= self.n_rows:
            raise IndexError(f"row indices outside [0, {self.n_rows}) of {self}")
        chunk = idx // self.rows_per_chunk
        out: dict[str, torch.Tensor] = {}
        for c in torch.unique(chunk).tolist():
            arrays = self._arrays(c)
            where = (chunk == c).nonzero().squeeze(1)
            local = (idx[where] - c * self.rows_per_chunk).numpy()
            for k in keys:
                if k in arrays:
                    part = torch.from_numpy(arrays[k][local])
                    if k not in out:
                        out[k] = torch.empty((len(idx), *part.shape[1:]), dtype=part.dtype)
                    out[k][where] = part
        return out

    def _arrays(self, c: int) -> dict[str, np.ndarray]:
        """Chunk c's tensors as read-only arrays over its mapped file (mapped and checked on
        first use)."""
        if c in self._maps:
            self._maps.move_to_end(c)
            return self._maps[c]
        path = self.folder / chunk_name(c)
        with open(path, "rb") as f:
            fid = file_id(os.fstat(f.fileno()))
            if self._checked.get(c) != fid:
                want = self._recorded(path.name)
                got = sha256_of(f) if want is not None else None
                if got != want:
                    raise RuntimeError(
                        f"{path} is corrupt (sha256 {str(got)[:12]}..., the manifest records "
                        f"{str(want)[:12]}...); run the trial again to rebuild it"
                    )
                self._checked[c] = fid
            header = read_header(f, fid[2])
            need = min(self.rows_per_chunk, self.n_rows - c * self.rows_per_chunk)
            if header is None or header["input_ids"][1][0] < need:
                raise RuntimeError(f"{path} is not a chunk of {need} rows; run the trial again")
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        arrays = {
            k: np.frombuffer(mapped, dtype, int(np.prod(shape)), offset).reshape(shape)
            for k, (dtype, shape, offset) in header.items()
        }
        self._maps[c] = arrays
        self._opened.append(c)
        while len(self._maps) > self.max_open:  # the mapping closes with its last array
            self._maps.popitem(last=False)
        return arrays

    def _recorded(self, name: str) -> str | None:
        if self._sha256 is None or name not in self._sha256:
            self._sha256 = recorded_sha256s(self.folder)
        return self._sha256.get(name)
