"""Target features: the on-disk cache (manifest and journal, hits and misses, refusal of foreign
folders, concurrency, per-chunk checksums, linear build work, lazy memory-mapped reads, cheap
pickling) and online features (the target inside the training step), equal to the cached ones.

The cache logic runs on a stub target (hidden state = a function of the token id); online versus
cached runs a tiny random-weight LLaMA target (seconds), since the masks, positions and float16
rounding of a real model are what must agree.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, models
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from workloads.data import InMemoryRows, PackedRows, pack_token_documents
from workloads.models.draft import DraftArch, DraftModel
from workloads.training.feature_cache import CachedFeatures, ensure_features
from workloads.training.features import Features, FeatureSet, LazyRows, target_hidden
from workloads.training.loop import StageSettings, train_stage
from workloads.training.online_features import OnlineFeatures, TargetSpec

L, H = 8, 4


class _StubTarget(nn.Module):
    def __init__(self, fail_at: int = 0) -> None:
        super().__init__()
        self.calls, self.fail_at = 0, fail_at
        self.model = self._body

    def _body(self, input_ids: torch.Tensor, **_: object) -> SimpleNamespace:
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("the target died")
        return SimpleNamespace(last_hidden_state=input_ids[..., None].float().expand(-1, -1, H))


def _rows(n: int) -> PackedRows:
    ids = torch.arange(n * L).view(n, L) % 50
    return PackedRows(ids, torch.ones_like(ids, dtype=torch.bool), torch.arange(L).expand(n, L))


class _CountingRows:
    """A row source over :func:`_rows` that counts the rows it packs."""

    def __init__(self, n: int = 128) -> None:
        self.data, self.served = InMemoryRows(_rows(n)), 0

    @property
    def rows(self) -> int:
        return self.data.rows

    @property
    def seq_len(self) -> int:
        return self.data.seq_len

    def packed(self, idx: torch.Tensor) -> PackedRows:
        self.served += len(idx)
        return self.data.packed(idx)


IDENTITY = {"target": "stub", "stage": "pretrain", "seq_len": L, "tokenizer": "abc"}


def _ensure(  # noqa: ANN202
    folder: Path,
    n_rows: int,
    target: nn.Module | None = None,
    rows: object = None,
    manifest: dict[str, object] = IDENTITY,
):
    return ensure_features(
        folder, rows=rows or InMemoryRows(_rows(64)), n_rows=n_rows, rows_per_chunk=2,
        target_model=target or _StubTarget(), manifest=manifest,
    )  # fmt: skip


def _all(feats: FeatureSet) -> tuple[torch.Tensor, torch.Tensor]:
    idx = torch.arange(feats.rows)
    return feats.packed(idx).input_ids, feats.hidden(idx)


def test_manifest_records_identity_chunks_and_token_range(tmp_path: Path) -> None:
    feats, stats = _ensure(tmp_path, 5)
    assert (stats.hits, stats.misses) == (0, 3)
    assert isinstance(feats, FeatureSet) and (feats.rows, feats.seq_len) == (5, L)
    assert torch.equal(_all(feats)[0], _rows(5).input_ids)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["identity"] == IDENTITY | {"rows_per_chunk": 2}
    assert manifest["token_range"] == [0, 6 * L]
    assert manifest["chunks"]["chunk-00002.safetensors"]["rows"] == [4, 6]
    assert not (tmp_path / "manifest.journal").exists()  # folded into the manifest
    _, again = _ensure(tmp_path, 7)  # a larger budget reuses the prefix
    assert (again.hits, again.misses) == (3, 1)


def test_a_foreign_folder_is_refused(tmp_path: Path) -> None:
    _ensure(tmp_path, 2)
    with pytest.raises(ValueError, match="describes other features"):
        _ensure(tmp_path, 2, manifest=IDENTITY | {"tokenizer": "other"})


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
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert len(manifest["chunks"]) == 6 and manifest["token_range"] == [0, 12 * L]


def test_building_is_linear_in_the_chunks_built(tmp_path: Path) -> None:
    """Each chunk packs and forwards its own rows only (issue 15: chunk c used to re-pack rows
    0..c, quadratic work); hits pack nothing; a larger budget packs only its new chunks."""
    work = {}
    for chunks in (10, 20, 40):
        source, target = _CountingRows(), _StubTarget()
        _, stats = _ensure(tmp_path / str(chunks), 2 * chunks, target, source)
        assert source.served == stats.rows_packed == stats.target_rows == 2 * chunks
        work[chunks] = (source.served, target.calls)
    assert work[20] == (2 * work[10][0], 2 * work[10][1])
    assert work[40] == (2 * work[20][0], 2 * work[20][1])
    source = _CountingRows()
    _, stats = _ensure(tmp_path / "10", 20, rows=source)
    assert (stats.hits, stats.misses, source.served) == (10, 0, 0)
    _, stats = _ensure(tmp_path / "10", 30, rows=source)
    assert (stats.hits, stats.misses, source.served) == (10, 5, 10)


def test_an_interrupted_build_keeps_the_chunks_it_finished(tmp_path: Path) -> None:
    """A built chunk is recorded at once (one journal line), not at the end of the call."""
    with pytest.raises(RuntimeError, match="target died"):
        _ensure(tmp_path, 10, _StubTarget(fail_at=4))  # 1 forward per chunk: chunk 3 fails
    journal = (tmp_path / "manifest.journal").read_text().splitlines()
    assert [json.loads(line)["name"] for line in journal] == [
        f"chunk-0000{c}.safetensors" for c in range(3)
    ]
    _, stats = _ensure(tmp_path, 10)
    assert (stats.hits, stats.misses, stats.rebuilt) == (3, 2, 0)
    chunks = json.loads((tmp_path / "manifest.json").read_text())["chunks"]
    assert len(chunks) == 5 and all("sha256" in e for e in chunks.values())


def test_a_chunk_cut_short_by_the_source_is_extended_later(tmp_path: Path) -> None:
    feats, _ = _ensure(tmp_path, 5, rows=InMemoryRows(_rows(5)))  # chunk 2 holds row 4 only
    assert torch.equal(_all(feats)[0], _rows(5).input_ids)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["chunks"]["chunk-00002.safetensors"]["rows"] == [4, 5]
    assert manifest["token_range"] == [0, 5 * L]
    feats, stats = _ensure(tmp_path, 6)  # the larger budget needs row 5: chunk 2 is rebuilt
    assert (stats.hits, stats.misses, stats.rebuilt) == (2, 1, 0)
    assert torch.equal(_all(feats)[0], _rows(6).input_ids)
    with pytest.raises(ValueError, match="row source has 5"):
        _ensure(tmp_path, 6, rows=InMemoryRows(_rows(5)))


def test_lazy_rows_are_packed_once_and_only_on_a_miss(tmp_path: Path) -> None:
    calls: list[int] = []

    def build(n: int) -> PackedRows:
        calls.append(n)
        return _rows(n)

    lazy = LazyRows(build, 8, L)
    _, stats = _ensure(tmp_path, 8, rows=lazy)
    assert stats.misses == 4 and calls == [8]  # one packing for the four chunks
    again = LazyRows(build, 8, L)
    _, stats = _ensure(tmp_path, 8, rows=again)
    assert stats.hits == 4 and calls == [8] and not again.built


def test_rows_are_read_lazily_from_their_own_chunk(tmp_path: Path) -> None:
    feats, _ = _ensure(tmp_path, 20)  # 10 chunks of 2 rows
    assert isinstance(feats, CachedFeatures) and feats.opened_chunks == ()
    rows = feats.packed(torch.tensor([7, 6]))
    assert feats.opened_chunks == (3,)  # rows 6 and 7: chunk 3 only
    assert torch.equal(rows.input_ids, _rows(8).input_ids[[7, 6]])
    assert rows.loss_mask.dtype == torch.bool and rows.position_ids.dtype == torch.long
    hidden = feats.hidden(torch.tensor([6]))
    assert feats.opened_chunks == (3,) and hidden.dtype == torch.float16
    assert torch.equal(hidden[0, :, 0], _rows(7).input_ids[6].half())
    feats.hidden(torch.tensor([0, 19]))
    assert feats.opened_chunks == (3, 0, 9)
    with pytest.raises(IndexError):
        feats.packed(torch.tensor([20]))


def test_a_pickled_cache_is_small_reads_the_same_rows_and_checks_its_chunks(
    tmp_path: Path,
) -> None:
    feats, _ = _ensure(tmp_path, 20)
    assert len(pickle.dumps(feats)) < 1024  # the folder and the sizes, no rows
    back = pickle.loads(pickle.dumps(feats))  # as a Ray worker gets it
    assert back.opened_chunks == ()
    idx = torch.tensor([19, 0, 5, 4])
    assert torch.equal(back.packed(idx).input_ids, feats.packed(idx).input_ids)
    assert torch.equal(back.hidden(idx), feats.hidden(idx))
    assert back.opened_chunks == (0, 2, 9)  # a worker maps only the chunks of its rows
    _flip_a_byte(tmp_path / "chunk-00004.safetensors")
    with pytest.raises(RuntimeError, match="chunk-00004.*corrupt"):  # checked on first use
        pickle.loads(pickle.dumps(feats)).hidden(torch.tensor([8]))


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
    want_ids, want_hidden = _all(_ensure(tmp_path, 6)[0])
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
    with caplog.at_level(logging.WARNING, logger="workloads.training.feature_cache"):
        feats, stats = _ensure(tmp_path, 6, target)
    if damage == "deleted":  # a missing chunk is simply built again (a miss, not corruption)
        assert (stats.hits, stats.misses, stats.rebuilt) == (2, 1, 0)
    else:
        assert (stats.hits, stats.misses, stats.rebuilt) == (2, 1, 1)
        assert "chunk-00001.safetensors" in caplog.text and "rebuilding" in caplog.text
    assert target.calls > 0  # the target recomputed the chunk's hidden states
    ids, hidden = _all(feats)
    assert torch.equal(ids, want_ids)
    assert torch.equal(hidden, want_hidden)  # the rebuilt rows, not the corrupt ones
    assert chunk.read_bytes() == good  # the file on disk is whole again and recorded
    _, again = _ensure(tmp_path, 6)
    assert (again.hits, again.misses, again.rebuilt) == (3, 0, 0)


def test_a_manifest_without_checksums_is_trusted_once_then_checked(tmp_path: Path) -> None:
    _, want = _all(_ensure(tmp_path, 4)[0])
    path = tmp_path / "manifest.json"
    manifest = json.loads(path.read_text())
    for entry in manifest["chunks"].values():
        del entry["sha256"]  # the format before checksums
    path.write_text(json.dumps(manifest))
    feats, stats = _ensure(tmp_path, 4)  # first read: checksums computed and recorded
    assert (stats.hits, stats.misses, stats.rebuilt) == (2, 0, 0)
    assert torch.equal(_all(feats)[1], want)
    assert all("sha256" in e for e in json.loads(path.read_text())["chunks"].values())
    del feats  # its mapping of chunk 0 (changed in place next, as a disk fault would)
    _flip_a_byte(tmp_path / "chunk-00000.safetensors")  # from then on a change is caught
    feats, stats = _ensure(tmp_path, 4)
    assert (stats.misses, stats.rebuilt) == (1, 1)
    assert torch.equal(_all(feats)[1], want)


def test_a_legacy_chunk_that_does_not_parse_is_rebuilt(tmp_path: Path) -> None:
    want, _ = _all(_ensure(tmp_path, 4)[0])
    path = tmp_path / "manifest.json"
    manifest = json.loads(path.read_text())
    for entry in manifest["chunks"].values():
        del entry["sha256"]
    path.write_text(json.dumps(manifest))
    (tmp_path / "chunk-00001.safetensors").write_bytes(b"\x00" * 16)
    feats, stats = _ensure(tmp_path, 4)
    assert (stats.hits, stats.misses, stats.rebuilt) == (1, 1, 1)
    assert torch.equal(_all(feats)[0], want)


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
        _ensure(tmp_path, 4, manifest=IDENTITY | {"packing": "isolated"})
    # asked for joined rows, the old cache is what it always was: upgraded in place and reused
    target = _StubTarget()
    feats, stats = _ensure(tmp_path, 4, target, manifest=IDENTITY | {"packing": "joined"})
    assert (stats.hits, stats.misses, target.calls) == (2, 0, 0)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["identity"]["packing"] == "joined"
    positions = feats.packed(torch.arange(4)).position_ids
    assert positions.tolist() == [list(range(L))] * 4


# --- online features: a tiny random LLaMA target ----------------------------------------------

V, HID, SEQ = 96, 32, 16


@pytest.fixture(scope="module")
def tiny_target() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=HID, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=V, max_position_embeddings=256,
    )  # fmt: skip
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg).eval().requires_grad_(False)


def _packed_docs(n_rows: int) -> InMemoryRows:
    """Isolated rows of several documents each, with partial loss masks (SFT-like)."""
    g = torch.Generator().manual_seed(5)
    docs = []
    for _ in range(4 * n_rows):
        n = int(torch.randint(3, 12, (1,), generator=g))
        ids = torch.randint(1, V, (n,), generator=g).tolist()
        docs.append((ids, [int(i >= n // 3) for i in range(n)]))
    return InMemoryRows(pack_token_documents(docs, seq_len=SEQ, n_rows=n_rows, packing="isolated"))


def _draft(target: LlamaForCausalLM) -> DraftModel:
    torch.manual_seed(1)
    return DraftModel(
        DraftArch.from_target(target.config, layers=1, output_norm=True),
        embed_weight=target.get_input_embeddings().weight,
        lm_head_weight=target.get_output_embeddings().weight,
    )


ONLINE_S = StageSettings(
    epochs=2, batch_size=3, lr=3e-3, warmup_steps=1, weight_decay=0.0, grad_clip=0.5,
    w_reg=1.0, w_cls=0.1, seed=0, feature_noise=0.2,
)  # fmt: skip


def test_online_features_train_as_the_cached_ones(
    tiny_target: LlamaForCausalLM, tmp_path: Path
) -> None:
    rows = _packed_docs(10)
    assert bool((rows.data.position_ids[:, 1:] == 0).any())  # several documents per row
    cached, _ = ensure_features(
        tmp_path, rows=rows, n_rows=10, rows_per_chunk=4, target_model=tiny_target,
        manifest={"target": "tiny", "seq_len": SEQ},
    )  # fmt: skip
    online = OnlineFeatures(rows, tiny_target)
    assert isinstance(online, FeatureSet) and online.tokens == cached.tokens == 10 * SEQ
    idx = torch.tensor([9, 2, 5])
    got, want = online.hidden(idx), cached.hidden(idx)
    assert got.dtype == want.dtype == torch.float16
    torch.testing.assert_close(got, want, rtol=0, atol=0)  # same masks, positions, rounding
    online.target_rows = 0
    logs = [train_stage(_draft(tiny_target), f, ONLINE_S) for f in (cached, online)]
    assert len(logs[0].loss) == 8 and logs[0].tokens_seen == logs[1].tokens_seen == 20 * SEQ
    for key in ("loss", "loss_reg", "loss_cls", "top1"):
        a, b = getattr(logs[0], key), getattr(logs[1], key)
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5, key
    assert online.target_rows == 20  # each step ran the target on its own rows, nothing kept


def test_in_ram_features_train_as_the_cached_ones(
    tiny_target: LlamaForCausalLM, tmp_path: Path
) -> None:
    rows = _packed_docs(6)
    cached, _ = ensure_features(
        tmp_path, rows=rows, n_rows=6, rows_per_chunk=4, target_model=tiny_target,
        manifest={"target": "tiny", "seq_len": SEQ},
    )  # fmt: skip
    d = rows.data
    hidden = target_hidden(tiny_target, d.input_ids, d.position_ids)
    in_ram = Features(d.input_ids, d.loss_mask, hidden, d.position_ids)
    logs = [train_stage(_draft(tiny_target), f, ONLINE_S) for f in (cached, in_ram)]
    assert logs[0].loss == logs[1].loss  # bit for bit


def test_packed_rows_of_a_sliding_window_target_equal_each_document_alone() -> None:
    """A tiny Gemma-3 (window 8, :func:`tests.workloads.tiny.tiny_gemma_target`): in a packed
    row each document gets its own causal mask and, in the sliding layers, its window, so its
    features are those of the document run alone (HF's own masks); without the window they are
    not (the mask then reaches back 20 tokens)."""
    from tests.workloads.tiny import WINDOW, tiny_gemma_target
    from workloads.training import features as _features

    target = tiny_gemma_target()
    g = torch.Generator().manual_seed(3)
    docs = [torch.randint(0, 64, (n,), generator=g) for n in (3 * WINDOW, WINDOW - 3, 2 * WINDOW)]
    ids = torch.cat(docs)[None]
    pos = torch.cat([torch.arange(len(d)) for d in docs])[None]
    alone = torch.cat([target_hidden(target, d[None], torch.arange(len(d))[None]) for d in docs], 1)
    packed = target_hidden(target, ids, pos)
    torch.testing.assert_close(packed, alone, rtol=2e-3, atol=2e-3)  # float16 features
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_features, "layer_masks", lambda _config, mask, _query: mask)
        wrong = target_hidden(target, ids, pos)
    assert (wrong - alone).abs().amax() > 0.1


def _save_tiny_target(model: LlamaForCausalLM, folder: Path) -> None:
    """A local target folder: the tiny model and a word-level tokenizer (nothing downloaded)."""
    model.save_pretrained(folder)
    vocab = {"<unk>": 0} | {f"w{i}": i for i in range(1, V)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<unk>").save_pretrained(folder)


def test_online_features_pickle_the_target_spec_not_the_model(
    tiny_target: LlamaForCausalLM, tmp_path: Path
) -> None:
    _save_tiny_target(tiny_target, tmp_path / "tiny")
    rows = _packed_docs(4)
    with pytest.raises(TypeError, match="TargetSpec"):
        pickle.dumps(OnlineFeatures(rows, tiny_target))
    spec = TargetSpec(name=str(tmp_path / "tiny"), cache_dir=tmp_path)
    online = OnlineFeatures(rows, spec, model=tiny_target)
    assert len(pickle.dumps(online)) < 8 * 1024  # the spec and the rows, no weights
    worker = pickle.loads(pickle.dumps(online))  # as a worker gets it: loads the target on use
    idx = torch.tensor([3, 0])
    assert torch.equal(worker.hidden(idx), online.hidden(idx))
    assert worker.model is spec.load().model  # loaded once per process
