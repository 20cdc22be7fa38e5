"""The target-feature cache: manifest, hits and misses, refusal of foreign folders, concurrency.

A stub target (hidden state = a function of the token id) stands in for the real one: the cache
logic is under test; the real target's features are exercised by the end-to-end sweeps.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from workloads.features import ensure_features

L, H = 8, 4


class _StubTarget(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.model = self._body

    def _body(self, input_ids: torch.Tensor) -> SimpleNamespace:
        self.calls += 1
        return SimpleNamespace(last_hidden_state=input_ids[..., None].float().expand(-1, -1, H))


def _rows(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.arange(n * L).view(n, L) % 50
    return ids, torch.ones_like(ids, dtype=torch.bool)


IDENTITY = {"target": "stub", "stage": "pretrain", "seq_len": L, "tokenizer": "abc"}


def _ensure(folder: Path, n_rows: int, target: nn.Module | None = None):  # noqa: ANN202
    return ensure_features(
        folder, n_rows=n_rows, rows_per_chunk=2, build_rows=_rows,
        target_model=target or _StubTarget(), manifest=IDENTITY,
    )  # fmt: skip


def test_manifest_records_identity_chunks_and_token_range(tmp_path: Path) -> None:
    feats, stats = _ensure(tmp_path, 5)
    assert (stats.hits, stats.misses) == (0, 3)
    assert feats.input_ids.shape == (5, L) and torch.equal(feats.input_ids, _rows(5)[0])
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
