"""The feature cache's files (private to :mod:`workloads.training.feature_cache`, whose
docstring states the layout): chunk files (safetensors, read by their header), their
checksums, the folder's ``manifest.json`` and its append-only ``manifest.journal``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
from filelock import FileLock

from workloads.files import atomic_json

log = logging.getLogger("workloads.training.feature_cache")
"""the feature cache's one logger (its warnings name the cache, not this file)"""

# --- chunk files -------------------------------------------------------------------------------

FileId = tuple[int, int, int, int]
"""(device, inode, size, modification ns) of a chunk file: the file that was checked"""

DTYPES: dict[str, type[np.generic]] = {
    "I32": np.int32,
    "I64": np.int64,
    "U8": np.uint8,
    "BOOL": np.bool_,
    "F16": np.float16,
    "F32": np.float32,
}
KEYS = ("input_ids", "loss_mask", "hidden")
"""tensors every chunk has (``position_ids`` too, since packing is recorded)"""


def chunk_name(c: int) -> str:
    return f"chunk-{c:05d}.safetensors"


def file_id(st: os.stat_result) -> FileId:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def sha256_of(f: IO[bytes]) -> str:
    """SHA-256 of an open file's bytes, read in 1 MiB blocks."""
    f.seek(0)
    h = hashlib.sha256()
    while block := f.read(1 << 20):
        h.update(block)
    return h.hexdigest()


def read_header(
    f: IO[bytes], size: int
) -> dict[str, tuple[type[np.generic], tuple[int, ...], int]] | None:
    """A chunk file's tensors as ``name -> (dtype, shape, byte offset)``, or None when the file
    is not a chunk (not safetensors, a tensor outside the file, a required tensor missing).

    The safetensors layout: 8 bytes little-endian header length N, N bytes of JSON
    ``{name: {dtype, shape, data_offsets: [begin, end]}}``, offsets relative to byte 8 + N."""
    try:
        f.seek(0)
        (n,) = struct.unpack("<Q", f.read(8))
        if n > min(size - 8, 1 << 24):
            return None
        header = json.loads(f.read(n))
        out = {}
        for name, spec in header.items():
            if name == "__metadata__":
                continue
            dtype, shape = DTYPES[spec["dtype"]], tuple(int(s) for s in spec["shape"])
            begin, end = (int(o) for o in spec["data_offsets"])
            nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
            if end - begin != nbytes or begin < 0 or 8 + n + end > size:
                return None
            out[name] = (dtype, shape, 8 + n + begin)
    except (struct.error, ValueError, KeyError, TypeError, AttributeError):
        return None
    if set(KEYS) - out.keys() or len(out["input_ids"][1]) != 2:
        return None
    return out


def check_chunk(
    folder: Path,
    path: Path,
    lo: int,
    need: int,
    want: str | None,
    *,
    first_use: bool = False,
    warn: bool = False,
) -> tuple[Literal["ok", "missing", "unrecorded", "corrupt", "short"], FileId | None]:
    """Whether chunk ``path`` (first row ``lo``) matches its recorded checksum ``want``, parses
    and holds at least ``need`` rows, with the identity of the file checked (a streaming hash).

    ``unrecorded``: no checksum recorded, unless ``first_use``: then the chunk predates
    checksums and is trusted if it parses, and its checksum is recorded. Call with
    ``first_use`` only while holding the chunk's lock (its builder records the checksum under
    that lock). ``warn``: log why a chunk is corrupt.
    """
    if want is None and not first_use:
        return "unrecorded", None
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return "missing", None
    with f:
        fid = file_id(os.fstat(f.fileno()))
        got = sha256_of(f)
        header = read_header(f, fid[2])
    if want is None:
        if header is None:
            if warn:
                log.warning("features: %s cannot be read as a chunk; rebuilding it", path)
            return "corrupt", None
        rows = header["input_ids"][1][0]
        seq_len = header["input_ids"][1][1]
        journal(folder, path.name, lo, lo + rows, seq_len, got)
    elif got != want or header is None:
        if warn:
            log.warning(
                "features: %s is corrupt (sha256 %s..., the manifest records %s...); rebuilding it",
                path,
                got[:12],
                want[:12],
            )
        return "corrupt", None
    if header["input_ids"][1][0] < need:
        if warn:
            log.info("features: %s holds fewer than the %d rows needed; extending it", path, need)
        return "short", None
    return "ok", fid


# --- manifest ----------------------------------------------------------------------------------


def recorded_sha256s(folder: Path) -> dict[str, str]:
    """Checksums recorded by chunk file name: the manifest's, then the journal's (newer)."""
    with FileLock(str(folder / "manifest.json") + ".lock"):
        data = json.loads((folder / "manifest.json").read_text())
        entries = journal_entries(folder)
    chunks: dict[str, Any] = data.get("chunks", {}) | entries
    return {
        name: e["sha256"] for name, e in chunks.items() if isinstance(e, dict) and "sha256" in e
    }


def journal(folder: Path, name: str, lo: int, hi: int, seq_len: int, sha256: str) -> None:
    """Record one chunk (rows ``[lo, hi)``, its checksum): one line appended to the journal."""
    entry = {"name": name, "rows": [lo, hi], "tokens": (hi - lo) * seq_len, "sha256": sha256}
    lock = FileLock(str(folder / "manifest.json") + ".lock")
    with lock, open(folder / "manifest.journal", "a") as f:
        f.write(json.dumps(entry) + "\n")


def journal_entries(folder: Path) -> dict[str, dict[str, Any]]:
    """The journal's chunk entries by name, later lines winning (caller holds the lock); a torn
    last line (a crash while appending) is skipped."""
    path = folder / "manifest.journal"
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        name = entry.pop("name")
        out[name] = entry
    return out


def fold_journal(folder: Path) -> None:
    """Move the journal's entries into ``manifest.json`` (one rewrite), dropping entries whose
    chunk file is gone, and refresh ``token_range``."""
    path = folder / "manifest.json"
    with FileLock(str(path) + ".lock"):
        entries = journal_entries(folder)
        if not entries:
            return
        data = json.loads(path.read_text())
        chunks = {
            name: e
            for name, e in (data.get("chunks", {}) | entries).items()
            if (folder / name).exists()
        }
        data["chunks"] = dict(sorted(chunks.items()))
        rows_per_chunk = int(data["identity"]["rows_per_chunk"])
        data["token_range"] = [0, contiguous_tokens(chunks, rows_per_chunk)]
        write_json(path, data)
        (folder / "manifest.journal").unlink()


def contiguous_tokens(chunks: dict[str, Any], rows_per_chunk: int) -> int:
    """Tokens of the chunks from chunk 0 on without a gap (a chunk cut short ends the run)."""
    tokens, c = 0, 0
    while (entry := chunks.get(chunk_name(c))) is not None:
        tokens += int(entry["tokens"])
        lo, hi = entry["rows"]
        if hi - lo < rows_per_chunk:  # short: a later, larger budget extends it
            break
        c += 1
    return tokens


def check_manifest(folder: Path, identity: dict[str, object]) -> None:
    """Write the manifest of a new folder, or check an existing one's identity.

    A manifest written before identities carried a tokenizer fingerprint (a flat dict) is
    upgraded in place when everything else matches.
    """
    path = folder / "manifest.json"
    want = json.loads(json.dumps(identity))
    with FileLock(str(path) + ".lock"):
        if not path.exists():
            write_json(path, {"identity": want, "chunks": {}, "token_range": [0, 0]})
            return
        found = json.loads(path.read_text())
        if "identity" not in found:  # the first format: the identity only, no tokenizer
            legacy = {k: v for k, v in want.items() if k not in ("tokenizer", "packing")}
            if found == legacy and want.get("packing", "joined") == "joined":
                write_json(path, {"identity": want, "chunks": {}, "token_range": [0, 0]})
                list_legacy_chunks(folder, path)
                return
            found = {"identity": found}
        before = found["identity"]
        if "packing" in want and "packing" not in before:  # built before packing was recorded
            if before | {"packing": "joined"} == want:
                found["identity"] = want
                write_json(path, found)
                log.info("features: %s holds joined rows (built before packing was recorded)", path)
                return
            if before | {"packing": want["packing"]} == want:
                raise ValueError(
                    f"{folder} holds features built before document-isolated packing: their "
                    f"rows are packed 'joined' and are never mixed with '{want['packing']}' rows. "
                    "Fix: delete the folder to rebuild it, or set pretrain.packing: joined"
                )
        held, asked = found["identity"].get("hidden"), want.get("hidden")
        if held != asked and found["identity"] | {"hidden": asked} == want:
            raise ValueError(
                f"{folder} holds other target features ({held}) than the trial reads ({asked}): "
                "a cache is never reused for other fusion layers. Fix: delete the folder to "
                "rebuild it, or features.mode: online (computed in each step, nothing cached)"
            )
        if found["identity"] != want:
            raise ValueError(
                f"{path} describes other features ({found['identity']}), not {want}; "
                "delete the folder to rebuild"
            )


def write_json(path: Path, data: dict[str, object]) -> None:
    atomic_json(path, data, indent=2, sort_keys=True)


def list_legacy_chunks(folder: Path, path: Path) -> None:
    """List the chunk files of a first-format folder (which recorded none) in its upgraded
    manifest, without checksums (trusted on first use); the caller holds the lock. The only
    place the folder is listed: once, at the upgrade."""
    data = json.loads(path.read_text())
    rows_per_chunk = int(data["identity"]["rows_per_chunk"])
    seq_len = int(data["identity"]["seq_len"])
    chunks: dict[str, dict[str, object]] = {}
    for p in sorted(folder.glob("chunk-*.safetensors")):
        c = int(p.stem.split("-")[1])
        chunks[p.name] = {
            "rows": [c * rows_per_chunk, (c + 1) * rows_per_chunk],
            "tokens": rows_per_chunk * seq_len,
        }
    data["chunks"] = chunks
    data["token_range"] = [0, contiguous_tokens(chunks, rows_per_chunk)]
    write_json(path, data)
