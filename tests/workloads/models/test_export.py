"""Draft export (workloads.models.export): engine key layouts, refusals, and EAGLE's own draft
class.

The EAGLE test loads the export into ``eagle.model.cnets.Model`` of the PyPI package
``eagle-llm`` 1.2.1 (installed with ``--no-deps`` for tests only by ``make test``) with strict
key matching, and compares its logits with ours on the real target's prompt hidden states.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import LlamaConfig

from workloads.data import chat_prompt_ids
from workloads.models import export as ex
from workloads.models.draft import DraftArch, DraftModel
from workloads.models.engine_rules import ENGINES

V, H = 96, 64  # tiny target: vocabulary, hidden size


def _tiny_target() -> tuple[LlamaConfig, torch.Tensor, torch.Tensor]:
    config = LlamaConfig(
        hidden_size=H,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=V,
        rope_theta=1e5,
    )
    g = torch.Generator().manual_seed(0)
    return config, torch.randn(V, H, generator=g), torch.randn(V, H, generator=g)


def _draft(
    config: object,
    embed: torch.Tensor,
    head: torch.Tensor,
    *,
    seed: int = 0,
    layers: int = 2,
    output_norm: bool = False,
    first_input_norm: bool = False,
    rope_theta: float | None = 10000.0,
    vocab: torch.Tensor | None = None,
) -> DraftModel:
    """A seeded untrained draft; norms and fc bias perturbed so a wrong mapping shows."""
    torch.manual_seed(seed)
    arch = DraftArch.from_target(
        config,
        layers=layers,
        output_norm=output_norm,
        first_input_norm=first_input_norm,
        rope_theta=rope_theta,
    )
    draft = DraftModel(arch, embed_weight=embed, lm_head_weight=head, draft_to_target=vocab)
    with torch.no_grad():
        for name, p in draft.named_parameters():
            if "norm" in name or name == "fc.bias":
                p.add_(0.1 * torch.randn_like(p))
    return draft.eval()


def _saved(draft: DraftModel, tmp_path: Path) -> ex.DraftWeights:
    draft.save(tmp_path / "draft")
    return ex.read_draft(tmp_path / "draft")


@pytest.fixture
def tiny() -> tuple[LlamaConfig, torch.Tensor, torch.Tensor]:
    return _tiny_target()


# --- key layouts -------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["eagle", "sglang"])
def test_engine_export_has_the_eagle1_keys(tiny, tmp_path: Path, fmt: str) -> None:  # noqa: ANN001
    config, embed, head = tiny
    weights = _saved(_draft(config, embed, head), tmp_path)
    res = ex.export_draft(weights, fmt, tmp_path / "out", embed_weight=embed)
    tensors = load_file(str(res.out / "model.safetensors"))
    assert set(tensors) == ex.expected_keys(weights.arch, fmt)
    assert "layers.0.input_layernorm.weight" not in tensors
    assert "layers.1.input_layernorm.weight" in tensors
    assert "norm.weight" not in tensors and "lm_head.weight" not in tensors
    assert torch.equal(tensors["embed_tokens.weight"], embed)
    for key, value in weights.tensors.items():
        assert torch.equal(tensors[key], value), key
    cfg = json.loads((res.out / "config.json").read_text())
    assert cfg["architectures"] == list(ENGINES[fmt].architectures)
    assert (cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"]) == (V, H, 2)
    assert cfg["rope_theta"] == 10000.0 and cfg["rope_scaling"] is None
    assert cfg["attention_bias"] is False
    # eagle-llm reads "bias" as the fc bias; SGLang's llama.py would read it as attention bias
    assert cfg.get("bias") is (True if fmt == "eagle" else None)
    assert res.files == tuple(sorted(ENGINES[fmt].weight_files + ("config.json",)))


def test_sglang_keeps_a_truncated_vocabulary_as_its_token_map(tiny, tmp_path: Path) -> None:  # noqa: ANN001
    config, embed, head = tiny
    vocab = torch.tensor([0, 3, 4, 9, 17, 40, 41, 95])
    weights = _saved(_draft(config, embed, head, vocab=vocab, rope_theta=None), tmp_path)
    res = ex.export_draft(weights, "sglang", tmp_path / "out", embed_weight=embed)
    assert ex.TOKEN_MAP_FILE in res.files
    hot = torch.load(res.out / ex.TOKEN_MAP_FILE, weights_only=True)  # as SGLang's load_token_map
    assert torch.equal(torch.tensor(hot, dtype=torch.int64), vocab)
    assert f"--speculative-token-map {res.out / ex.TOKEN_MAP_FILE}" in res.usage
    cfg = json.loads((res.out / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle"]
    assert cfg["rope_theta"] == 1e5  # SGLang reads it from config.json: the target's is kept
    assert cfg["vocab_size"] == V  # embedding and lm_head rows are the target's


def test_vllm_stock_layout_for_a_draft_eagle1_holds(tiny, tmp_path: Path) -> None:  # noqa: ANN001
    config, embed, head = tiny
    draft = _draft(config, embed, head, rope_theta=None)
    with torch.no_grad():
        draft.fc.bias.zero_()
    weights = _saved(draft, tmp_path)
    res = ex.export_draft(weights, "vllm", tmp_path / "out", embed_weight=embed)
    tensors = load_file(str(res.out / "model.safetensors"))
    assert "fc.bias" not in tensors
    assert set(tensors) == ex.expected_keys(weights.arch, "vllm")
    cfg = json.loads((res.out / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]  # vLLM's EAGLEConfig adds "Eagle"
    assert "bias" not in cfg and cfg["head_dim"] == weights.arch.head_dim
    assert '"method": "eagle"' in res.usage


def test_dtype_casts_the_weights(tiny, tmp_path: Path) -> None:  # noqa: ANN001
    config, embed, head = tiny
    weights = _saved(_draft(config, embed, head), tmp_path)
    res = ex.export_draft(weights, "sglang", tmp_path / "o", embed_weight=embed, dtype="bfloat16")
    tensors = load_file(str(res.out / "model.safetensors"))
    assert {t.dtype for t in tensors.values()} == {torch.bfloat16}
    assert json.loads((res.out / "config.json").read_text())["torch_dtype"] == "bfloat16"


# --- hf: every variant, loads back --------------------------------------------------------------


def test_hf_export_loads_back_with_norm_and_vocabulary_map(tiny, tmp_path: Path) -> None:  # noqa: ANN001
    config, embed, head = tiny
    vocab = torch.arange(0, V, 3)
    draft = _draft(
        config, embed, head, output_norm=True, first_input_norm=True, rope_theta=None, vocab=vocab
    )
    weights = _saved(draft, tmp_path)
    assert all(ex.problems(weights, f) for f in ("eagle", "sglang"))
    assert ex.vllm_needs_plugin(weights, target_vocab=V)
    res = ex.export_draft(weights, "hf", tmp_path / "hf")
    cfg = json.loads((res.out / "config.json").read_text())
    assert cfg["architectures"] == [ex.HF_ARCHITECTURE]
    assert cfg["output_norm"] is True and cfg["draft_vocab_size"] == len(vocab)
    assert "norm.weight" in load_file(str(res.out / "model.safetensors"))
    back = ex.load_hf(res.out, embed_weight=embed, lm_head_weight=head).eval()
    assert back.arch == draft.arch
    assert torch.equal(back.draft_to_target, vocab)
    ids = torch.randint(0, V, (2, 9), generator=torch.Generator().manual_seed(1))
    hidden = torch.randn(2, 9, H, generator=torch.Generator().manual_seed(2))
    pos = torch.arange(9).expand(2, 9)
    with torch.no_grad():
        assert torch.equal(
            back.logits(back(hidden, ids, pos)), draft.logits(draft(hidden, ids, pos))
        )


def test_load_hf_refuses_a_folder_of_another_format(tiny, tmp_path: Path) -> None:  # noqa: ANN001
    config, embed, head = tiny
    weights = _saved(_draft(config, embed, head), tmp_path)
    res = ex.export_draft(weights, "eagle", tmp_path / "e", embed_weight=embed)
    with pytest.raises(ValueError, match="not an hf export"):
        ex.load_hf(res.out, embed_weight=embed, lm_head_weight=head)


# --- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variant", "refused_by", "needle"),
    [
        ({"output_norm": True}, {"eagle", "sglang", "vllm"}, "draft.output_norm: false"),
        ({"first_input_norm": True}, {"eagle", "sglang", "vllm"}, "draft.input_norm: false"),
        ({"vocab": torch.arange(0, V, 2)}, {"eagle", "vllm"}, "draft.vocab_size: 0"),
        ({"rope_theta": 1e5}, {"eagle"}, "draft.rope_theta: 10000"),
        ({}, {"vllm"}, "fc.bias is nonzero"),  # our fc always has a bias; vLLM's has none
    ],
)
def test_each_engine_refuses_what_it_cannot_load(
    tiny,  # noqa: ANN001
    tmp_path: Path,
    variant: dict,
    refused_by: set[str],
    needle: str,
) -> None:
    """eagle and sglang refuse; vllm's stock EAGLE-1 class cannot hold the same drafts, which
    go to the plugin's class instead (never refused)."""
    config, embed, head = tiny
    weights = _saved(_draft(config, embed, head, **variant), tmp_path)
    stock = [p for p in ex.stock_problems(weights, "vllm", target_vocab=V) if needle in p]
    assert bool(stock) == ("vllm" in refused_by)
    assert ex.vllm_needs_plugin(weights, target_vocab=V)  # every draft here has an fc bias
    assert ex.problems(weights, "vllm", target_vocab=V) == []
    for fmt in ("eagle", "sglang", "hf"):
        found = [p for p in ex.problems(weights, fmt, target_vocab=V) if needle in p]
        assert bool(found) == (fmt in refused_by), (fmt, ex.problems(weights, fmt))
        out = tmp_path / f"out-{fmt}"
        if fmt in refused_by:
            with pytest.raises(ex.ExportError, match=needle) as err:
                ex.export_draft(weights, fmt, out, embed_weight=embed)
            assert "\n" not in str(err.value) and "Fix:" in str(err.value)
            assert not out.exists()
            assert not list(tmp_path.glob(f".{out.name}.*"))  # no temporary folder left
    res = ex.export_draft(weights, "vllm", tmp_path / "v", embed_weight=embed, lm_head_weight=head)
    arch = json.loads((res.out / "config.json").read_text())["architectures"]
    assert arch == [ex.VLLM_PLUGIN_ARCHITECTURE]


def test_vllm_plugin_export_holds_norms_bias_and_truncated_vocab(tiny, tmp_path: Path) -> None:  # noqa: ANN001
    """The default Scylla draft's shape: both norms, fc bias, N < V; the d2t offsets and the
    LM head rows are EAGLE-3's, and a forward written from the exported tensors alone (the
    plugin's math) gives our draft's logits mapped to target ids."""
    config, embed, head = tiny
    vocab = torch.tensor([0, 3, 4, 9, 17, 40, 41, 95])
    draft = _draft(
        config, embed, head, output_norm=True, first_input_norm=True, rope_theta=None, vocab=vocab
    )
    weights = _saved(draft, tmp_path)
    res = ex.export_draft(weights, "vllm", tmp_path / "v", embed_weight=embed, lm_head_weight=head)
    t = load_file(str(res.out / "model.safetensors"))
    cfg = json.loads((res.out / "config.json").read_text())
    assert cfg["architectures"] == [ex.VLLM_PLUGIN_ARCHITECTURE]
    assert (cfg["fc_bias"], cfg["first_input_norm"], cfg["output_norm"]) == (True, True, True)
    assert cfg["draft_vocab_size"] == len(vocab) and cfg["vocab_size"] == V
    assert t["d2t"].dtype == torch.int64
    assert torch.equal(t["d2t"] + torch.arange(len(vocab)), vocab)  # target = draft id + d2t
    assert torch.equal(t["lm_head.weight"], head[vocab])
    assert {"norm.weight", "fc.bias", "layers.0.input_layernorm.weight"} <= set(t)
    assert "pip install workloads/serving/vllm_plugin" in res.usage
    # the plugin's forward from the exported tensors: fc, our layers, norm, lm_head, d2t scatter
    back = DraftModel(draft.arch, embed_weight=t["embed_tokens.weight"], lm_head_weight=head)
    back.load_state_dict({k: v for k, v in t.items() if k in back.state_dict()}, strict=False)
    back.eval()
    ids = torch.randint(0, V, (1, 7), generator=torch.Generator().manual_seed(1))
    hidden = torch.randn(1, 7, H, generator=torch.Generator().manual_seed(2))
    pos = torch.arange(7)[None]
    with torch.no_grad():
        f = back(hidden, ids, pos)
        full = torch.full((7, V), float("-inf"))
        full[:, torch.arange(len(vocab)) + t["d2t"]] = f[0] @ t["lm_head.weight"].T
        ours = draft.logits(draft(hidden, ids, pos))[0]
    assert torch.allclose(full[:, vocab], ours, atol=1e-5)
    assert torch.equal(full.argmax(-1), vocab[ours.argmax(-1)])


def test_vllm_truncated_export_without_the_lm_head_is_refused(tiny, tmp_path: Path) -> None:  # noqa: ANN001
    config, embed, head = tiny
    weights = _saved(_draft(config, embed, head, vocab=torch.arange(0, V, 2)), tmp_path)
    with pytest.raises(ValueError, match="needs the target's LM head"):
        ex.export_draft(weights, "vllm", tmp_path / "v", embed_weight=embed)
    assert not (tmp_path / "v").exists()


def test_a_prefix_vocabulary_shorter_than_the_target_is_truncated(tiny, tmp_path: Path) -> None:  # noqa: ANN001
    config, embed, head = tiny
    weights = _saved(_draft(config, embed, head, vocab=torch.arange(V // 2)), tmp_path)
    assert weights.full_vocab  # ids 0..N-1 in order: only the target's V tells
    assert not ex.problems(weights, "eagle")
    with pytest.raises(ex.ExportError, match="48 tokens"):
        ex.export_draft(weights, "eagle", tmp_path / "out", embed_weight=embed)


def test_eagle_refuses_a_head_dim_other_than_hidden_over_heads(tmp_path: Path) -> None:
    config, embed, head = _tiny_target()
    config.head_dim = 32  # 4 heads x 32 != 64
    weights = _saved(_draft(config, embed, head), tmp_path)
    assert any("head_dim" in p for p in ex.problems(weights, "eagle"))
    assert not any("head_dim" in p for p in ex.problems(weights, "sglang"))


def test_wrong_target_and_non_empty_out_are_refused(tiny, tmp_path: Path) -> None:  # noqa: ANN001
    config, embed, head = tiny
    weights = _saved(_draft(config, embed, head), tmp_path)
    with pytest.raises(ValueError, match="hidden size is 32"):
        ex.export_draft(weights, "eagle", tmp_path / "a", embed_weight=torch.randn(V, 32))
    with pytest.raises(ValueError, match="needs the target's token embedding"):
        ex.export_draft(weights, "eagle", tmp_path / "a")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        ex.export_draft(weights, "hf", tmp_path / "full")
    res = ex.export_draft(weights, "hf", tmp_path / "full", overwrite=True)
    assert not (res.out / "x").exists() and (res.out / "config.json").exists()


# --- EAGLE's own draft class on the real target -------------------------------------------------


def _cnets_model(folder: Path) -> torch.nn.Module:
    cnets = pytest.importorskip(
        "eagle.model.cnets", reason="pip install --no-deps eagle-llm==1.2.1 (make test does)"
    )
    from eagle.model.configs import EConfig

    config = EConfig.from_pretrained(str(folder))
    # transformers 5 reads config.json's "rope_scaling": null as rope_parameters
    # ({"rope_type": "default", "rope_theta": ...}); cnets (written for transformers 4) takes any
    # non-None rope_scaling for a scaling dict. Set it back to None, as transformers 4 reads it.
    config.rope_scaling = None
    return cnets.Model(config, bias=config.bias).eval()


def test_eagle_export_loads_strictly_into_cnets_and_gives_our_logits(
    target,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    model = target.model
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    draft = _draft(model.config, embed, head, seed=3)  # 2 layers, no norms EAGLE lacks, RoPE 1e4
    weights = _saved(draft, tmp_path)
    res = ex.export_draft(weights, "eagle", tmp_path / "eagle", embed_weight=embed)

    ours_state = load_file(str(res.out / "model.safetensors"))
    bin_state = torch.load(res.out / "pytorch_model.bin", weights_only=True)  # what EaModel reads
    assert set(bin_state) == set(ours_state)
    assert all(torch.equal(bin_state[k], ours_state[k]) for k in ours_state)
    cnets = _cnets_model(res.out)
    assert set(cnets.state_dict()) == set(ours_state)
    cnets.load_state_dict(bin_state, strict=True)

    ids = torch.tensor([chat_prompt_ids(target.tokenizer, "Write a haiku about eagles.")])
    with torch.no_grad():
        hidden = model.model(input_ids=ids).last_hidden_state  # [1, T, h] after the final norm
        h_t, next_ids = hidden[:, :-1], ids[:, 1:]
        pos = torch.arange(h_t.shape[1])[None]
        logits_ours = draft.logits(draft(h_t, next_ids, pos))
        logits_eagle = cnets(h_t, next_ids) @ head.T  # target lm_head on the draft output
    assert logits_ours.shape == (1, ids.shape[1] - 1, model.config.vocab_size)
    torch.testing.assert_close(logits_eagle, logits_ours, rtol=1e-4, atol=1e-4)
    assert torch.equal(logits_eagle.argmax(-1), logits_ours.argmax(-1))


def test_a_scaled_embedding_goes_to_the_plugin_and_stock_loaders_refuse_it(
    tiny,
    tmp_path: Path,  # noqa: ANN001
) -> None:
    """A Gemma-style draft scales its embedding rows (sqrt(h)); stock EAGLE loaders feed them as
    stored, so only the plugin (which reads embed_scale) and hf hold it."""
    config, embed, head = tiny
    torch.manual_seed(0)
    arch = DraftArch.from_target(config, layers=1, output_norm=True, embed_scale=H**0.5)
    draft = DraftModel(arch, embed_weight=embed, lm_head_weight=head).eval()
    weights = _saved(draft, tmp_path)
    assert weights.arch.embed_scale == pytest.approx(8.0)
    for fmt in ("eagle", "sglang"):
        with pytest.raises(ex.ExportError, match="scales them by 8"):
            ex.export_draft(weights, fmt, tmp_path / fmt, embed_weight=embed, lm_head_weight=head)
    res = ex.export_draft(weights, "vllm", tmp_path / "v", embed_weight=embed, lm_head_weight=head)
    cfg = json.loads((res.out / "config.json").read_text())
    assert cfg["architectures"] == [ex.VLLM_PLUGIN_ARCHITECTURE] and cfg["embed_scale"] == 8.0
    hf = ex.export_draft(weights, "hf", tmp_path / "hf")
    back = ex.load_hf(hf.out, embed_weight=embed, lm_head_weight=head)
    assert back.arch.embed_scale == 8.0
    ids = torch.randint(0, V, (1, 5), generator=torch.Generator().manual_seed(1))
    hidden, pos = torch.randn(1, 5, H), torch.arange(5)[None]
    with torch.no_grad():  # the scale is applied: a draft on pre-scaled rows with scale 1 agrees
        plain = DraftModel(DraftArch.from_target(config, layers=1, output_norm=True),
                           embed_weight=embed * 8.0, lm_head_weight=head).eval()  # fmt: skip
        plain.load_state_dict(draft.state_dict(), strict=False)
        assert torch.allclose(draft(hidden, ids, pos), plain(hidden, ids, pos), atol=1e-5)
