"""On-disk cache of target features: packed token rows with the target's last-layer hidden states.

Features depend only on (target, corpus recipe, stage, sequence length, dtype, packing), so they
are computed once and shared by every trial of every sweep. Rows carry their ``position_ids``:
with document-isolated packing (:mod:`workloads.data.packing`) the target's hidden states of a
document are computed with a block-diagonal causal mask and positions from 0, so they equal those
of the document alone (SDPA/eager attention get the boolean mask; a target loaded with a
flash-attention kernel gets the positions only, from which transformers derives the varlen
boundaries of packed sequences, all rows of a batch as one sequence). Rows are stored in chunks of
``rows_per_chunk`` rows (``chunk-NNNNN.safetensors``); a trial that needs ``n`` rows builds the
missing chunks and reads the first ``n`` rows. Packing is streaming, so the rows of a smaller
budget are a prefix of a larger one's: nested budgets share chunks.

The folder's ``manifest.json`` holds the identity of the feature set (target, dtype, stage,
corpus recipe, tokenizer fingerprint, sequence length, packing, rows per chunk; a mismatch is
refused). A manifest written before packing was part of the identity describes joined rows: it is
upgraded in place (``packing: joined``) when joined rows are asked for, and refused with the fix
when isolated rows are, so rows of the two packings are never mixed
and what has been built: per chunk its row range, token count and the SHA-256 of its file, so
``token_range`` says which tokens of the stream are cached.

Integrity: a chunk's checksum is recorded when the chunk is written and checked each time it is
read; the checked bytes are the ones used. A chunk whose file does not match (or that safetensors
cannot parse) is logged as a warning, rebuilt from the corpus and the target, and the rebuilt
chunk is used, never the corrupt one. A chunk recorded by a manifest from before checksums
existed is trusted on its first read (trust on first use): its checksum is computed then and
recorded, and checked from then on; a legacy chunk that no longer parses is rebuilt.

Concurrency: each chunk is built under its own file lock and written atomically (temporary file,
then rename). A trial first builds whatever chunks nobody else is building (non-blocking lock),
then waits for the rest, so two trials asking at once split the work instead of duplicating it.

Shape legend: R rows, L sequence length, h hidden size.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
from filelock import FileLock, Timeout
from safetensors import SafetensorError
from safetensors.torch import load, save

from workloads.data.packing import PackedRows, attention_allowed

log = logging.getLogger(__name__)

RowBuilder = Callable[[int], PackedRows]
"""``n -> PackedRows``: the first n packed rows (ids, loss mask, positions)."""


@dataclass(frozen=True)
class Features:
    """Rows of one stage: ``input_ids`` [R, L] long, ``loss_mask`` [R, L] bool,
    ``hidden`` [R, L, h] float16 (target last-layer hidden states, after the final norm),
    ``position_ids`` [R, L] long (None: every row is one document, positions ``0..L-1``)."""

    input_ids: torch.Tensor
    loss_mask: torch.Tensor
    hidden: torch.Tensor
    position_ids: torch.Tensor | None = None

    @property
    def tokens(self) -> int:
        """Tokens in all rows."""
        return int(self.input_ids.numel())

    def positions(self, rows: torch.Tensor) -> torch.Tensor:
        """[len(rows), L] position ids of the rows at index ``rows``."""
        if self.position_ids is not None:
            return self.position_ids[rows]
        length = int(self.input_ids.shape[1])
        return torch.arange(length).expand(len(rows), length)


@dataclass
class CacheStats:
    """Chunks found (hits) and built (misses) by one :func:`ensure_features` call, and seconds.

    ``rebuilt`` counts chunks found corrupt (checksum mismatch or unreadable) and built again;
    they count as misses too."""

    hits: int = 0
    misses: int = 0
    build_s: float = 0.0
    rebuilt: int = 0


def tokenizer_fingerprint(tokenizer: object) -> str:
    """16 hex chars over the tokenizer's class and vocabulary (token -> id): features built with
    another tokenizer are refused even under the same target name."""
    get_vocab = getattr(tokenizer, "get_vocab", None)
    vocab = sorted(get_vocab().items()) if callable(get_vocab) else []
    text = json.dumps([type(tokenizer).__name__, vocab], ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def feature_dir(cache_dir: Path, *, target: str, stage: str, recipe: str, seq_len: int) -> Path:
    """Folder of one feature set; ``recipe`` fingerprints the corpus."""
    slug = hashlib.sha256(target.encode()).hexdigest()[:8]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in target)[-48:]
    return cache_dir / "features" / f"{safe}-{slug}" / f"{stage}-{recipe}-L{seq_len}"


@torch.inference_mode()
def target_hidden(
    target_model: torch.nn.Module, ids_rl: torch.Tensor, pos_rl: torch.Tensor, batch: int = 4
) -> torch.Tensor:
    """Last-layer hidden states [R, L, h] (float16) of the target for rows ``ids_rl`` with
    positions ``pos_rl`` [R, L]: each segment (positions from 0) sees only its own tokens."""
    body = cast(torch.nn.Module, target_model.model)
    param = next(target_model.parameters(), None)
    dev = param.device if param is not None else torch.device("cpu")
    config = getattr(target_model, "config", None)
    flash = "flash" in str(getattr(config, "_attn_implementation", ""))
    outs = []
    for i in range(0, ids_rl.shape[0], batch):
        ids, pos = ids_rl[i : i + batch].to(dev), pos_rl[i : i + batch].to(dev)
        if flash:  # varlen: one packed sequence of all rows, boundaries where positions are 0
            b, length = ids.shape
            out = body(input_ids=ids.reshape(1, -1), position_ids=pos.reshape(1, -1))
            hidden = out.last_hidden_state.reshape(b, length, -1)
        else:
            allowed = attention_allowed(pos)
            out = body(input_ids=ids, position_ids=pos, attention_mask=allowed)
            hidden = out.last_hidden_state
        outs.append(hidden.to(torch.float16).cpu())
    hidden = torch.cat(outs)
    if not torch.isfinite(hidden).all():
        raise ValueError("target hidden states overflow float16; use a float32 cache")
    return hidden


def ensure_features(
    folder: Path,
    *,
    n_rows: int,
    rows_per_chunk: int,
    build_rows: RowBuilder,
    target_model: torch.nn.Module,
    manifest: dict[str, object],
    batch: int = 4,
) -> tuple[Features, CacheStats]:
    """Return the first ``n_rows`` feature rows, building missing chunks on the way.

    Args:
        folder: the feature set's folder (see :func:`feature_dir`).
        n_rows: rows wanted (0 gives empty tensors).
        rows_per_chunk: rows per chunk file; fixed per folder (recorded in the manifest).
        build_rows: packs the first n rows of the stage's corpus.
        target_model: the frozen target, used on a miss.
        manifest: what identifies the feature set (target, recipe, seq_len, ...), written once.
        batch: rows per target forward when building.

    Raises:
        ValueError: the folder's manifest disagrees with ``manifest`` (a stale or foreign cache).
    """
    folder.mkdir(parents=True, exist_ok=True)
    _check_manifest(folder, {**manifest, "rows_per_chunk": rows_per_chunk})
    stats = CacheStats()
    n_chunks = -(-n_rows // rows_per_chunk)
    path = [folder / f"chunk-{c:05d}.safetensors" for c in range(n_chunks)]

    def build(c: int) -> bytes:
        """Build chunk c, write it atomically, record its checksum; its bytes."""
        t0 = time.perf_counter()
        rows = build_rows((c + 1) * rows_per_chunk)
        lo = c * rows_per_chunk
        ids, mask, pos = rows.input_ids[lo:], rows.loss_mask[lo:], rows.position_ids[lo:]
        hidden = target_hidden(target_model, ids, pos, batch)
        raw = save(
            {
                "input_ids": ids.to(torch.int32).contiguous(),
                "loss_mask": mask.to(torch.uint8).contiguous(),
                "position_ids": pos.to(torch.int32).contiguous(),
                "hidden": hidden.contiguous(),
            }
        )
        tmp = path[c].with_suffix(".tmp")
        tmp.write_bytes(raw)
        tmp.replace(path[c])
        _record_chunks(folder, {path[c].name: _sha256(raw)})
        stats.misses += 1
        stats.build_s += time.perf_counter() - t0
        log.info(
            "features: built %s (%d tokens) in %.1f s",
            path[c].name,
            ids.numel(),
            time.perf_counter() - t0,
        )
        return raw

    built: dict[int, bytes] = {}
    for blocking in (False, True):  # first build what nobody else builds, then wait for the rest
        for c in range(n_chunks):
            if path[c].exists():
                continue
            try:
                with FileLock(str(path[c]) + ".lock", timeout=-1 if blocking else 0):
                    if not path[c].exists():
                        built[c] = build(c)
            except Timeout:
                continue
    if n_chunks == 0:
        empty = torch.zeros(0, 0, dtype=torch.long)
        return Features(empty, empty.bool(), torch.zeros(0, 0, 0, dtype=torch.float16)), stats
    parts = []
    for c in range(n_chunks):
        tensors = _parse(built[c]) if c in built else _read_verified(folder, path[c])
        if tensors is None:  # no checksum yet, or corrupt: settle it under the chunk's lock
            with FileLock(str(path[c]) + ".lock"):
                tensors = _read_verified(folder, path[c], first_use=True, warn=True)
                if tensors is None:  # corrupt (and nobody rebuilt it meanwhile): rebuild it
                    stats.rebuilt += 1
                    tensors = _parse(build(c))
        assert tensors is not None, "a chunk just built parses"
        parts.append(tensors)
    stats.hits = n_chunks - stats.misses
    length = int(parts[0]["input_ids"].shape[1])
    positions = [  # a chunk from before positions were stored holds joined rows
        p["position_ids"] if "position_ids" in p else torch.arange(length).expand_as(p["input_ids"])
        for p in parts
    ]
    feats = Features(
        input_ids=torch.cat([p["input_ids"] for p in parts])[:n_rows].long(),
        loss_mask=torch.cat([p["loss_mask"] for p in parts])[:n_rows].bool(),
        hidden=torch.cat([p["hidden"] for p in parts])[:n_rows],
        position_ids=torch.cat(positions)[:n_rows].long(),
    )
    return feats, stats


def _sha256(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def _parse(raw: bytes) -> dict[str, torch.Tensor] | None:
    """The tensors of a chunk file's bytes, or None when they are not a chunk."""
    try:
        tensors = load(raw)
    except (SafetensorError, ValueError, KeyError, RuntimeError):
        return None
    if {"input_ids", "loss_mask", "hidden"} - tensors.keys():
        return None
    return tensors


def _recorded_sha256(folder: Path, name: str) -> str | None:
    """The checksum the manifest records for chunk ``name`` (None: not recorded)."""
    with FileLock(str(folder / "manifest.json") + ".lock"):
        data = json.loads((folder / "manifest.json").read_text())
    entry = data.get("chunks", {}).get(name, {})
    return entry.get("sha256") if isinstance(entry, dict) else None


def _read_verified(
    folder: Path, path: Path, *, first_use: bool = False, warn: bool = False
) -> dict[str, torch.Tensor] | None:
    """A chunk's tensors, parsed from the very bytes that matched the manifest's checksum.

    None when the file is missing, does not match or does not parse (``warn``: log why), and
    when no checksum is recorded, unless ``first_use``: then the chunk predates checksums and is
    trusted if it parses, and its checksum is recorded. Call with ``first_use`` only while
    holding the chunk's lock (its builder records the checksum under that lock).
    """
    want = _recorded_sha256(folder, path.name)
    raw = path.read_bytes() if path.exists() else b""
    if want is None:
        if not first_use:
            return None
        tensors = _parse(raw)
        if tensors is not None:
            _record_chunks(folder, {path.name: _sha256(raw)})
        elif warn:
            log.warning("features: %s cannot be read as a chunk; rebuilding it", path)
        return tensors
    got = _sha256(raw)
    tensors = _parse(raw) if got == want else None
    if tensors is None and warn:
        log.warning(
            "features: %s is corrupt (sha256 %s..., the manifest records %s...); rebuilding it",
            path,
            got[:12],
            want[:12],
        )
    return tensors


def _check_manifest(folder: Path, identity: dict[str, object]) -> None:
    """Write the manifest of a new folder, or check an existing one's identity.

    A manifest written before identities carried a tokenizer fingerprint (a flat dict) is
    upgraded in place when everything else matches.
    """
    path = folder / "manifest.json"
    want = json.loads(json.dumps(identity))
    with FileLock(str(path) + ".lock"):
        if not path.exists():
            _write_json(path, {"identity": want, "chunks": {}, "token_range": [0, 0]})
            return
        found = json.loads(path.read_text())
        if "identity" not in found:  # the first format: the identity only, no tokenizer
            legacy = {k: v for k, v in want.items() if k not in ("tokenizer", "packing")}
            if found == legacy and want.get("packing", "joined") == "joined":
                _write_json(path, {"identity": want, "chunks": {}, "token_range": [0, 0]})
                _record_chunks_locked(folder, path)
                return
            found = {"identity": found}
        before = found["identity"]
        if "packing" in want and "packing" not in before:  # built before packing was recorded
            if before | {"packing": "joined"} == want:
                found["identity"] = want
                _write_json(path, found)
                log.info("features: %s holds joined rows (built before packing was recorded)", path)
                return
            if before | {"packing": want["packing"]} == want:
                raise ValueError(
                    f"{folder} holds features built before document-isolated packing: their "
                    f"rows are packed 'joined' and are never mixed with '{want['packing']}' rows. "
                    "Fix: delete the folder to rebuild it, or set pretrain.packing: joined"
                )
        if found["identity"] != want:
            raise ValueError(
                f"{path} describes other features ({found['identity']}), not {want}; "
                "delete the folder to rebuild"
            )


def _write_json(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    tmp.replace(path)


def _record_chunks(folder: Path, sha256: dict[str, str] | None = None) -> None:
    with FileLock(str(folder / "manifest.json") + ".lock"):
        _record_chunks_locked(folder, folder / "manifest.json", sha256)


def _record_chunks_locked(folder: Path, path: Path, sha256: dict[str, str] | None = None) -> None:
    """Refresh the built-chunk list and the cached token range (caller holds the lock).

    ``sha256`` gives new checksums by chunk file name; recorded ones of chunks still on disk are
    kept.
    """
    data = json.loads(path.read_text())
    rows_per_chunk = int(data["identity"]["rows_per_chunk"])
    seq_len = int(data["identity"]["seq_len"])
    known = {
        name: entry["sha256"]
        for name, entry in data.get("chunks", {}).items()
        if isinstance(entry, dict) and "sha256" in entry
    } | (sha256 or {})
    chunks: dict[str, dict[str, object]] = {}
    for p in sorted(folder.glob("chunk-*.safetensors")):
        c = int(p.stem.split("-")[1])
        chunks[p.name] = {
            "rows": [c * rows_per_chunk, (c + 1) * rows_per_chunk],
            "tokens": rows_per_chunk * seq_len,
        }
        if p.name in known:
            chunks[p.name]["sha256"] = known[p.name]
    contiguous = 0
    while f"chunk-{contiguous:05d}.safetensors" in chunks:
        contiguous += 1
    data["chunks"] = chunks
    data["token_range"] = [0, contiguous * rows_per_chunk * seq_len]
    _write_json(path, data)
