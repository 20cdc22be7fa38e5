"""EAGLE-3's hidden fusion on tiny random targets: the fused target features are the hidden
states entering the named layers (captured apart, with forward pre-hooks), cached and online
features carry the same fused features and train the same losses, the draft fuses target
features and not its own outputs, the feature cache never serves other layers, the exports
round-trip or refuse with the fix, and the layer choice is EAGLE-3's / vLLM's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM

from workloads.data import InMemoryRows, pack_token_documents
from workloads.models import export as ex
from workloads.models.draft import DraftArch, DraftModel
from workloads.models.fusion import body_features, default_layers, last_layer, resolve_layers
from workloads.training.feature_cache import ensure_features
from workloads.training.loop import StageSettings, position_losses, train_stage
from workloads.training.online_features import OnlineFeatures

V, HID, SEQ, LAYERS = 64, 32, 12, 6


@pytest.fixture(scope="module")
def target() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=HID, intermediate_size=64, num_hidden_layers=LAYERS, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=V, max_position_embeddings=128,
    )  # fmt: skip
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg).eval().requires_grad_(False)


def _draft(target: LlamaForCausalLM, layers: tuple[int, ...], seed: int = 1) -> DraftModel:
    torch.manual_seed(seed)
    arch = DraftArch.from_target(target.config, layers=1, output_norm=True, fusion_layers=layers)
    return DraftModel(
        arch,
        embed_weight=target.get_input_embeddings().weight,
        lm_head_weight=target.get_output_embeddings().weight,
        draft_to_target=torch.arange(0, V, 2),
    )


def _rows(n_rows: int) -> InMemoryRows:
    g = torch.Generator().manual_seed(3)
    docs = []
    for _ in range(3 * n_rows):
        n = int(torch.randint(3, 9, (1,), generator=g))
        docs.append((torch.randint(1, V, (n,), generator=g).tolist(), [1] * n))
    return InMemoryRows(pack_token_documents(docs, seq_len=SEQ, n_rows=n_rows, packing="isolated"))


def test_layer_choice_is_eagle3s_and_checked_against_the_target() -> None:
    assert default_layers(30) == (2, 15, 27)  # vLLM's (2, L // 2, L - 3) for SmolLM2-135M
    assert default_layers(32) == (2, 16, 29)
    assert default_layers(2) == (0, 1)  # a tiny target: deduplicated, sorted
    assert resolve_layers("none", None, 30) == ()
    assert resolve_layers("eagle3", None, 30) == (2, 15, 27)
    assert resolve_layers("eagle3", (20, 3), 30) == (3, 20)  # vLLM's order: ascending
    with pytest.raises(ValueError, match=r"has 30 decoder layers.*0 \(the embeddings\) .. 29"):
        resolve_layers("eagle3", (2, 30), 30)


def test_fused_features_are_the_states_entering_the_named_layers(
    target: LlamaForCausalLM,
) -> None:
    ids = torch.randint(0, V, (2, 7), generator=torch.Generator().manual_seed(1))
    seen: dict[int, torch.Tensor] = {}

    def keep(i: int):  # noqa: ANN202
        def hook(_mod, args, kwargs):  # noqa: ANN001, ANN202
            seen[i] = (args[0] if args else kwargs["hidden_states"]).clone()

        return hook

    handles = [
        layer.register_forward_pre_hook(keep(i), with_kwargs=True)
        for i, layer in enumerate(target.model.layers)
    ]
    try:
        last = target.model(input_ids=ids).last_hidden_state
    finally:
        for h in handles:
            h.remove()
    layers = (0, 3, 5)
    feats = body_features(target.model, layers, input_ids=ids)
    assert feats.shape == (2, 7, 4 * HID)
    for j, i in enumerate(layers):
        torch.testing.assert_close(feats[..., j * HID : (j + 1) * HID], seen[i], rtol=0, atol=0)
    torch.testing.assert_close(last_layer(feats, 3), last, rtol=0, atol=0)
    torch.testing.assert_close(seen[0], target.model.embed_tokens(ids), rtol=0, atol=0)
    plain = body_features(target.model, (), input_ids=ids)  # no fusion: h_last alone
    torch.testing.assert_close(plain, last, rtol=0, atol=0)


S = StageSettings(
    epochs=1, batch_size=3, lr=3e-3, warmup_steps=1, weight_decay=0.0, grad_clip=0.5,
    w_reg=1.0, w_cls=0.1, seed=0, feature_noise=0.2,
)  # fmt: skip


def test_cached_and_online_fused_features_are_equal_and_train_the_same(
    target: LlamaForCausalLM, tmp_path: Path
) -> None:
    rows, layers = _rows(6), (1, 4)
    man = {"target": "tiny", "seq_len": SEQ, "hidden": "hidden_states[1, 4]+last"}
    cached, _ = ensure_features(tmp_path, rows=rows, n_rows=6, rows_per_chunk=4,
                                target_model=target, manifest=man, layers=layers)  # fmt: skip
    online = OnlineFeatures(rows, target, layers=layers)
    idx = torch.tensor([5, 0, 3])
    got, want = online.hidden(idx), cached.hidden(idx)
    assert got.shape == (3, SEQ, 3 * HID) and got.dtype == torch.float16
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    logs = [train_stage(_draft(target, layers), f, S) for f in (cached, online)]
    assert logs[0].loss == pytest.approx(logs[1].loss, abs=1e-5)
    # the fuse weight is trained: it moved from its initialisation
    before, after = _draft(target, layers), _draft(target, layers)
    train_stage(after, cached, S)
    assert before.fuse is not None and after.fuse is not None
    assert not torch.equal(before.fuse.weight, after.fuse.weight)


def test_a_cache_of_other_layers_is_refused_with_the_fix(
    target: LlamaForCausalLM, tmp_path: Path
) -> None:
    rows = _rows(4)
    fused = {"target": "tiny", "seq_len": SEQ, "hidden": "hidden_states[1, 4]+last"}
    kw = {"rows": rows, "n_rows": 4, "rows_per_chunk": 4, "target_model": target}
    ensure_features(tmp_path, manifest=fused, layers=(1, 4), **kw)  # type: ignore[arg-type]
    fix = "never reused for other fusion layers.*features.mode: online"
    with pytest.raises(ValueError, match=fix):
        ensure_features(tmp_path, manifest=fused | {"hidden": "last"}, **kw)  # type: ignore[arg-type]


def test_the_draft_fuses_target_features_and_reads_its_own_outputs_as_they_are(
    target: LlamaForCausalLM,
) -> None:
    layers = (1, 4)
    draft = _draft(target, layers).eval()
    ids = torch.randint(0, V, (1, 5), generator=torch.Generator().manual_seed(2))
    feats = body_features(target.model, layers, input_ids=ids)
    pos = torch.arange(5)[None]
    with torch.no_grad():
        out = draft(feats, ids, pos)
        assert draft.fuse is not None
        fused = draft.fuse(feats[..., : 2 * HID])
        plain = _draft(target, ())  # the same weights after the fuse: fc, layer, norm
        plain.load_state_dict({k: v for k, v in draft.state_dict().items() if k != "fuse.weight"})
        torch.testing.assert_close(out, plain(fused, ids, pos))
        torch.testing.assert_close(draft(out, ids, pos), plain(out, ids, pos))  # h wide: no fuse
    # the training loss targets are the last-layer states, never the fused ones
    reg, cls, agree, weight = position_losses(draft, ids, torch.ones_like(ids, dtype=torch.bool),
                                              feats)  # fmt: skip
    reg_plain, cls_plain, _, _ = position_losses(plain, ids, torch.ones_like(ids, dtype=torch.bool),
                                                 last_layer(feats, 2))  # fmt: skip
    assert reg.shape == (1, 3) and not torch.allclose(reg, reg_plain)  # other inputs, same targets


def test_exports_round_trip_or_refuse_with_the_fix(
    target: LlamaForCausalLM, tmp_path: Path
) -> None:
    layers = (1, 4)
    draft = _draft(target, layers)
    draft.save(tmp_path / "draft")
    weights = ex.read_draft(tmp_path / "draft")
    assert weights.arch.fusion_layers == layers and "fuse.weight" in weights.tensors
    embed = target.get_input_embeddings().weight
    head = target.get_output_embeddings().weight
    ex.export_draft(weights, "hf", tmp_path / "hf")
    back = ex.load_hf(tmp_path / "hf", embed_weight=embed, lm_head_weight=head)
    assert back.arch == draft.arch
    for k, v in draft.trainable_state().items():
        torch.testing.assert_close(back.trainable_state()[k], v, rtol=0, atol=0)
    res = ex.export_draft(weights, "vllm", tmp_path / "vllm", embed_weight=embed,
                          lm_head_weight=head)  # fmt: skip
    cfg = json.loads((tmp_path / "vllm" / "config.json").read_text())
    assert cfg["architectures"] == [ex.VLLM_FUSED_ARCHITECTURE]
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [1, 4] and cfg["num_aux_hidden_states"] == 2
    assert '"method": "eagle3"' in res.usage
    assert ex.exported_vllm_method(tmp_path / "vllm") == "eagle3"
    tensors = load_file(str(tmp_path / "vllm" / "model.safetensors"))
    assert tensors["fuse.weight"].shape == (HID, 2 * HID) and "d2t" in tensors
    for fmt in ("eagle", "sglang"):
        with pytest.raises(ex.ExportError, match="fuses the states of target layers.*Fix: use"):
            ex.export_draft(weights, fmt, tmp_path / fmt, embed_weight=embed)
        assert not (tmp_path / fmt).exists()  # nothing written
    # a draft saved before fusion existed (no fusion_layers in arch.json) loads as today's
    old = tmp_path / "old"
    _draft(target, ()).save(old)
    arch = json.loads((old / "arch.json").read_text())
    arch.pop("fusion_layers")
    (old / "arch.json").write_text(json.dumps(arch))
    assert ex.read_draft(old).arch.fusion_layers == ()
