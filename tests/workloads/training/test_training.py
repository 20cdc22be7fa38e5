"""EAGLE's feature noise (issue 13): seeded, of EAGLE's size, applied in training only.

A tiny random target and draft (seconds); the real recipe runs in the ablation sweep.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tests.workloads.training.test_stages import S, _draft, _feats, _same, _weights
from workloads.data import InMemoryRows, PackedRows
from workloads.engine.tree_decode import speculative_generate
from workloads.models.draft import DraftArch, DraftModel
from workloads.training import loop as training
from workloads.training.feature_cache import ensure_features
from workloads.training.features import Features, target_hidden
from workloads.training.loop import input_noise, train_stage


def test_noise_is_seeded_uniform_and_of_eagles_size() -> None:
    shape = torch.Size((2, 254, 8))
    a = input_noise(shape, 0.2, torch.Generator().manual_seed(3), seq_len=256)
    b = input_noise(shape, 0.2, torch.Generator().manual_seed(3), seq_len=256)
    c = input_noise(shape, 0.2, torch.Generator().manual_seed(4), seq_len=256)
    assert torch.equal(a, b) and not torch.equal(a, c)
    half_width = 0.2 * 512 / 256 / 2  # (U - 0.5) * std * 512 / T, EAGLE's AddUniformNoise
    assert float(a.abs().max()) <= half_width and float(a.abs().max()) > 0.9 * half_width
    assert abs(float(a.mean())) < 0.01


def test_training_with_noise_is_reproducible_and_differs_from_without() -> None:
    feats = _feats(8)
    noisy = replace(S, feature_noise=0.5)
    runs = []
    for s in (noisy, noisy, S):
        d = _draft()
        train_stage(d, feats, s)
        runs.append(_weights(d))
    assert _same(runs[0], runs[1])
    assert not _same(runs[0], runs[2])


def test_noise_is_never_applied_at_evaluation(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = training.input_noise

    def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(training, "input_noise", counting)
    train_stage(_draft(), _feats(4), replace(S, feature_noise=0.2, epochs=1))
    assert len(calls) == 2  # one draw per optimiser step

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, vocab_size=64, max_position_embeddings=128,
    )  # fmt: skip
    target = LlamaForCausalLM(cfg).eval()
    draft = DraftModel(
        DraftArch.from_target(cfg, layers=1, output_norm=True),
        embed_weight=target.get_input_embeddings().weight,
        lm_head_weight=target.get_output_embeddings().weight,
    ).eval()
    outs = [
        speculative_generate(
            target,
            draft,
            [1, 5, 9, 2],
            max_new_tokens=12,
            depth=3,
            topk=2,
            num_draft_tokens=5,
            eos_ids=frozenset({0}),
        )  # fmt: skip
        for _ in range(2)
    ]
    assert len(calls) == 2  # evaluation drew no noise
    assert outs[0].tokens == outs[1].tokens
    assert outs[0].accept_lengths == outs[1].accept_lengths


def test_a_training_step_reads_only_its_own_rows_of_a_cache(tmp_path) -> None:  # noqa: ANN001
    """train_stage takes rows through the FeatureSet API: a cached stage is mapped chunk by
    chunk as steps reach it, never loaded whole (issue 15)."""
    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, vocab_size=64, max_position_embeddings=64,
    )  # fmt: skip
    target = LlamaForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 64, (12, 10), generator=g)
    rows = InMemoryRows(PackedRows(ids, torch.ones_like(ids, dtype=torch.bool),
                                   torch.arange(10).expand(12, 10)))  # fmt: skip
    cached, _ = ensure_features(tmp_path, rows=rows, n_rows=12, rows_per_chunk=2,
                                target_model=target, manifest={"seq_len": 10})  # fmt: skip
    d = rows.data
    in_ram = Features(d.input_ids, d.loss_mask, target_hidden(target, d.input_ids, d.position_ids))
    s = replace(S, order="stream", epochs=1)
    arch = DraftArch.from_target(cfg, layers=1, output_norm=True)
    logs = []
    for feats in (cached, in_ram):
        torch.manual_seed(1)
        draft = DraftModel(arch, embed_weight=target.get_input_embeddings().weight,
                           lm_head_weight=target.get_output_embeddings().weight)  # fmt: skip
        logs.append(train_stage(draft, feats, s, stop=2))
    assert cached.opened_chunks == (0, 1)  # steps 0 and 1: rows 0-3, chunks 0 and 1
    assert logs[0].loss == logs[1].loss and logs[0].tokens_seen == 2 * 2 * 10


def test_each_rank_reads_its_share_of_the_global_batch() -> None:
    feats = _feats(5)
    idx = torch.tensor([4, 0, 3])
    whole = feats.packed(idx)
    counted = float((whole.loss_mask[:, 2:]).sum())
    shares = []
    for rank in range(4):  # 3 rows on 4 ranks: rank 3 gets one zero-weight row
        par = training.DataParallel(rank=rank, world=4, model=_draft())
        mine, packed, weight, denom = training._share(feats, idx, par)
        assert denom == counted / 4
        assert torch.equal(packed.input_ids, feats.input_ids[mine])
        shares.append((mine.tolist(), bool(weight)))
    assert shares == [([4], True), ([0], True), ([3], True), ([4], False)]
