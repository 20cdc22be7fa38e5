"""The target-feature cache: manifest, hits and misses, refusal of foreign folders, concurrency,
per-chunk checksums (a corrupt chunk is detected, rebuilt and never used).

A stub target (hidden state = a function of the token id) stands in for the real one: the cache
logic is under test; the real target's features are exercised by the end-to-end sweeps.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from workloads.data import PackedRows
from workloads.features import ensure_features

L, H = 8, 4


class _StubTarget(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.model = self._body

    def _body(self, input_ids: torch.Tensor, **_: object) -> SimpleNamespace:
        self.calls += 1
        return SimpleNamespace(last_hidden_state=input_ids[..., None].float().expand(-1, -1, H))


def _rows(n: int) -> PackedRows:
    ids = torch.arange(n * L).view(n, L) % 50
    return PackedRows(ids, torch.ones_like(ids, dtype=torch.bool), torch.arange(L).expand(n, L))


IDENTITY = {"target": "stub", "stage": "pretrain", "seq_len": L, "tokenizer": "abc"}


def _ensure(folder: Path, n_rows: int, target: nn.Module | None = None):  # noqa: ANN202
    return ensure_features(
        folder, n_rows=n_rows, rows_per_chunk=2, build_rows=_rows,
        target_model=target or _StubTarget(), manifest=IDENTITY,
    )  # fmt: skip


def test_manifest_records_identity_chunks_and_token_range(tmp_path: Path) -> None:
    feats, stats = _ensure(tmp_path, 5)
    assert (stats.hits, stats.misses) == (0, 3)
    assert feats.input_ids.shape == (5, L) and torch.equal(feats.input_ids, _rows(5).input_ids)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["identity"] == IDENTITY | {"rows_per_chunk": 2}
    assert manifest["token_range"] == [0, 6 * L]
    assert manifest["chunks"]["chunk-00002.safetensors"]["rows"] == [4, 6]
    _, again = _ensure(tmp_path, 7)  # a larger budget reuses the prefix
    assert (again.hits, again.misses) == (3, 1)


def test_a_foreign_folder_is_refused(tmp_path: Path) -> None:
    _ensure(tmp_path, 2)
    with pytest.raises(ValueError, match="describes other features"):
        ensure_features(tmp_path, n_rows=2, rows_per_chunk=2, build_rows=_rows,
                        target_model=_StubTarget(),
                        manifest=IDENTITY | {"tokenizer": "other"})  # fmt: skip


def test_a_first_format_manifest_is_upgraded(tmp_path: Path) -> None:
    _ensure(tmp_path, 4)
    legacy = {k: v for k, v in IDENTITY.items() if k != "tokenizer"} | {"rows_per_chunk": 2}
    (tmp_path / "manifest.json").write_text(json.dumps(legacy))
    _, stats = _ensure(tmp_path, 4)
    assert (stats.hits, stats.misses) == (2, 0)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["identity"]["tokenizer"] == "abc"
    assert manifest["token_range"] == [0, 4 * L]


def test_concurrent_trials_build_each_chunk_once(tmp_path: Path) -> None:
    results: list[tuple[int, int]] = []

    def trial() -> None:
        _, s = _ensure(tmp_path, 12)
        results.append((s.hits, s.misses))

    threads = [threading.Thread(target=trial) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(m for _, m in results) == 6  # 6 chunks, each built by exactly one trial
    assert all(h + m == 6 for h, m in results)


def _flip_a_byte(path: Path, offset_from_end: int = 3) -> None:
    raw = bytearray(path.read_bytes())
    raw[-offset_from_end] ^= 0xFF  # tensor data, not the header: the file still parses
    path.write_bytes(bytes(raw))


def test_each_chunk_records_its_sha256(tmp_path: Path) -> None:
    _ensure(tmp_path, 4)
    chunks = json.loads((tmp_path / "manifest.json").read_text())["chunks"]
    for name, entry in chunks.items():
        assert entry["sha256"] == hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "garbage", "deleted"])
def test_a_corrupt_chunk_is_detected_rebuilt_and_not_used(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    want, _ = _ensure(tmp_path, 6)
    chunk = tmp_path / "chunk-00001.safetensors"
    good = chunk.read_bytes()
    if damage == "flipped byte":
        _flip_a_byte(chunk)
    elif damage == "truncated":
        chunk.write_bytes(good[: len(good) // 2])
    elif damage == "garbage":
        chunk.write_bytes(b"not a safetensors file")
    elif damage == "deleted":
        chunk.unlink()
    target = _StubTarget()
    with caplog.at_level(logging.WARNING, logger="workloads.features"):
        feats, stats = _ensure(tmp_path, 6, target)
    if damage == "deleted":  # a missing chunk is simply built again (a miss, not corruption)
        assert (stats.hits, stats.misses, stats.rebuilt) == (2, 1, 0)
    else:
        assert (stats.hits, stats.misses, stats.rebuilt) == (2, 1, 1)
        assert "chunk-00001.safetensors" in caplog.text and "rebuilding" in caplog.text
    assert target.calls > 0  # the target recomputed the chunk's hidden states
    assert torch.equal(feats.input_ids, want.input_ids)
    assert torch.equal(feats.hidden, want.hidden)  # the rebuilt rows, not the corrupt ones
    assert chunk.read_bytes() == good  # the file on disk is whole again and recorded
    _, again = _ensure(tmp_path, 6)
    assert (again.hits, again.misses, again.rebuilt) == (3, 0, 0)


def test_a_manifest_without_checksums_is_trusted_once_then_checked(tmp_path: Path) -> None:
    want, _ = _ensure(tmp_path, 4)
    path = tmp_path / "manifest.json"
    manifest = json.loads(path.read_text())
    for entry in manifest["chunks"].values():
        del entry["sha256"]  # the format before checksums
    path.write_text(json.dumps(manifest))
    feats, stats = _ensure(tmp_path, 4)  # first read: checksums computed and recorded
    assert (stats.hits, stats.misses, stats.rebuilt) == (2, 0, 0)
    assert torch.equal(feats.hidden, want.hidden)
    assert all("sha256" in e for e in json.loads(path.read_text())["chunks"].values())
    _flip_a_byte(tmp_path / "chunk-00000.safetensors")  # from then on a change is caught
    feats, stats = _ensure(tmp_path, 4)
    assert (stats.misses, stats.rebuilt) == (1, 1)
    assert torch.equal(feats.hidden, want.hidden)


def test_a_legacy_chunk_that_does_not_parse_is_rebuilt(tmp_path: Path) -> None:
    want, _ = _ensure(tmp_path, 4)
    path = tmp_path / "manifest.json"
    manifest = json.loads(path.read_text())
    for entry in manifest["chunks"].values():
        del entry["sha256"]
    path.write_text(json.dumps(manifest))
    (tmp_path / "chunk-00001.safetensors").write_bytes(b"\x00" * 16)
    feats, stats = _ensure(tmp_path, 4)
    assert (stats.hits, stats.misses, stats.rebuilt) == (1, 1, 1)
    assert torch.equal(feats.input_ids, want.input_ids)


def _legacy_cache(folder: Path) -> None:
    """A feature folder as written before packing was recorded: no ``packing`` in the manifest's
    identity, no ``position_ids`` in the chunks (joined rows)."""
    _ensure(folder, 4)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["identity"].pop("packing", None)
    for name, entry in manifest["chunks"].items():
        tensors = load_file(str(folder / name))
        del tensors["position_ids"]
        save_file(tensors, str(folder / name))
        entry["sha256"] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_an_old_feature_cache_is_never_mixed_with_isolated_packing(tmp_path: Path) -> None:
    _legacy_cache(tmp_path)
    with pytest.raises(ValueError, match="built before document-isolated packing.*Fix: delete"):
        ensure_features(tmp_path, n_rows=4, rows_per_chunk=2, build_rows=_rows,
                        target_model=_StubTarget(),
                        manifest=IDENTITY | {"packing": "isolated"})  # fmt: skip
    # asked for joined rows, the old cache is what it always was: upgraded in place and reused
    target = _StubTarget()
    feats, stats = ensure_features(tmp_path, n_rows=4, rows_per_chunk=2, build_rows=_rows,
                                   target_model=target,
                                   manifest=IDENTITY | {"packing": "joined"})  # fmt: skip
    assert (stats.hits, stats.misses, target.calls) == (2, 0, 0)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["identity"]["packing"] == "joined"
    assert feats.position_ids is not None and feats.position_ids.tolist() == [list(range(L))] * 4
