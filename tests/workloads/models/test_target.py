"""Random-weight targets (builtin shapes and config.json folders) and accelerate device maps.

Tiny Llama configs written to tmp_path stand in for real models; the builtin shapes of 7B-72B
models are only built on the meta device (their configs and parameter counts are checked, never
their memory). The one shape allocated for real is SmolLM2-135M.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
)

from tests.workloads.tiny import tiny_gemma_target, tiny_target
from workloads.models.target import (
    _OFFICIAL,
    _builtin_tokenizer,
    _materialise,
    embedding_scale,
    load_target,
    random_config,
)
from workloads.models.target_source import TOKENIZER_VOCAB
from workloads.roofline.models import BUILTIN_SHAPES, builtin_names


@pytest.fixture(autouse=True)
def _one_thread():  # noqa: ANN202 - a generator fixture
    """One torch thread: bfloat16 CPU kernels slow down many times over on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _tiny_config(**overrides: object) -> LlamaConfig:
    base: dict[str, object] = dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, vocab_size=TOKENIZER_VOCAB, max_position_embeddings=256,
        tie_word_embeddings=True,
    )  # fmt: skip
    return LlamaConfig(**(base | overrides))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder holding only a tiny Llama config.json."""
    out = tmp_path / "tiny"
    _tiny_config().save_pretrained(out)
    assert sorted(p.name for p in out.iterdir()) == ["config.json"]
    return out


@pytest.fixture
def warm_tokenizer(cache_dir: Path) -> Path:
    """The builtin tokenizer saved once under the session cache (the GGUF read takes ~5 s)."""
    _builtin_tokenizer(cache_dir)
    return cache_dir


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_random_target_from_a_config_folder(folder: Path, warm_tokenizer: Path) -> None:
    t = load_target(str(folder), cache_dir=warm_tokenizer, dtype="bfloat16", weights="random")
    assert t.random_weights and t.model.dtype == torch.bfloat16
    assert t.input_device == torch.device("cpu") and t.hidden_size == 16
    assert not any(p.requires_grad for p in t.model.parameters())
    model = t.model.model
    # transformers' own initialisation ran on every module (nothing left from torch.empty)
    assert all(torch.isfinite(p.float()).all() for p in t.model.parameters())
    assert torch.equal(model.norm.weight, torch.ones_like(model.norm.weight))
    assert 0.015 < float(model.embed_tokens.weight.float().std()) < 0.025  # initializer_range
    assert t.model.lm_head.weight is model.embed_tokens.weight  # tie_word_embeddings
    # the builtin tokenizer's special ids replace the config's
    assert t.eos_token_ids == {t.tokenizer.eos_token_id}  # type: ignore[attr-defined]
    ids = t.tokenizer("Hello world")["input_ids"]  # type: ignore[operator]
    logits = t.model(input_ids=torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), TOKENIZER_VOCAB) and torch.isfinite(logits).all()


def test_random_weights_are_seeded_and_the_same_with_a_device_map(
    folder: Path, warm_tokenizer: Path
) -> None:
    def load(seed: int, device_map: str = "none") -> dict[str, torch.Tensor]:
        t = load_target(
            str(folder), cache_dir=warm_tokenizer, weights="random", seed=seed,
            device_map=device_map,  # type: ignore[arg-type]
        )  # fmt: skip
        return _state(t.model)

    a, b, c, auto = load(1), load(1), load(2), load(1, "auto")
    assert a.keys() == b.keys() == c.keys() == auto.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert all(torch.equal(a[k], auto[k]) for k in a)
    assert not torch.equal(
        a["model.layers.0.mlp.up_proj.weight"], c["model.layers.0.mlp.up_proj.weight"]
    )


def test_a_split_device_map_allocates_every_module_and_the_same_weights(
    folder: Path, warm_tokenizer: Path
) -> None:
    # the placement accelerate gives a model spread over devices (here all of them the CPU)
    placement: dict[str, int | str] = {
        "model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "cpu",
        "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu",
    }  # fmt: skip
    config, tokenizer = random_config(str(folder)), _builtin_tokenizer(warm_tokenizer)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):  # as load_target sets them
        setattr(config, key, getattr(tokenizer, key))
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    split = _materialise(skeleton, placement, seed=4, dispatch=True)
    assert not [n for n, t in [*split.named_parameters(), *split.named_buffers()] if t.is_meta]
    whole = load_target(
        str(folder), cache_dir=warm_tokenizer, dtype="bfloat16", weights="random", seed=4
    )
    want = _state(whole.model)
    differ = [k for k, t in _state(split).items() if not torch.equal(t, want[k])]
    assert not differ, differ


def test_a_random_target_reads_nothing_but_config_json(
    folder: Path, warm_tokenizer: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    opened: list[str] = []
    connects: list[object] = []
    recording = [True]

    def audit(event: str, args: tuple[object, ...]) -> None:
        if not recording[0]:
            return
        if event == "open" and isinstance(args[0], str | Path):
            opened.append(str(args[0]))
        elif event == "socket.connect":
            connects.append(args[1])

    sys.addaudithook(audit)  # audit hooks cannot be removed: the flag turns this one off
    try:
        t = load_target(str(folder), cache_dir=warm_tokenizer, weights="random")
    finally:
        recording[0] = False
    assert t.random_weights and not connects
    weights = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
    assert not [p for p in opened if p.endswith(weights)], opened
    in_folder = {Path(p).name for p in opened if Path(p).parent == folder}
    assert in_folder == {"config.json"}  # read, and nothing else there


CONFIG_CLASS = {"llama": LlamaConfig, "qwen2": Qwen2Config, "gemma3_text": Gemma3TextConfig}


@pytest.mark.parametrize("name", builtin_names())
def test_builtin_shapes_build_their_official_config_on_meta(name: str) -> None:
    shape, official = BUILTIN_SHAPES[name], _OFFICIAL[name]
    config = random_config(name)
    assert isinstance(config, CONFIG_CLASS[official.family])
    rope = config.rope_parameters
    assert rope.get("full_attention", rope)["rope_theta"] == official.rope_theta  # Gemma: global
    assert (config.rms_norm_eps, config.tie_word_embeddings) == (
        official.rms_norm_eps, official.tie_word_embeddings,
    )  # fmt: skip
    assert config.max_position_embeddings == official.max_position_embeddings
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    h, kv, m, v = shape.hidden, shape.h_kv, shape.mlp_inner, shape.vocab
    q = shape.heads * shape.head_dim  # h but for Gemma-3 (4 heads of 256 over hidden 640)
    per_layer = 2 * h * q + 2 * h * kv + 3 * h * m + 2 * h
    if official.family == "qwen2":
        per_layer += q + 2 * kv  # Qwen2's q/k/v projections have biases
    if official.family == "gemma3_text":
        per_layer += 2 * h + 2 * shape.head_dim  # pre/post-MLP norms, q/k norms
    expected = shape.layers * per_layer + h + v * h * (1 if official.tie_word_embeddings else 2)
    assert sum(p.numel() for p in model.parameters()) == expected


def test_the_random_gemma_shape_has_the_real_models_attention_layout() -> None:
    """Its local/global layers, window, RoPE bases and query scale are those of
    google/gemma-3-270m's config.json (the converted GGUF's): a random-weight Gemma times the
    attention the real one runs."""
    config = random_config("gemma-3-270m")
    assert config.sliding_window == 512  # Gemma3TextConfig's default is 4096
    assert config.layer_types == (["sliding_attention"] * 5 + ["full_attention"]) * 3
    assert config.rope_parameters["sliding_attention"]["rope_theta"] == 10_000.0
    assert config.rope_parameters["full_attention"]["rope_theta"] == 1_000_000.0
    assert (config.head_dim, config.query_pre_attn_scalar) == (256, 256)


@pytest.mark.parametrize(
    ("name", "params"),
    # the parameter counts their model cards give
    [("llama-3-8b", 8_030_261_248), ("qwen2.5-7b", 7_615_616_512),
     ("qwen2.5-72b", 72_706_203_648), ("smollm2-135m", 134_515_008),
     ("gemma-3-270m", 268_098_176)],  # Gemma's: the converted GGUF's safetensors
)  # fmt: skip
def test_builtin_shape_parameter_counts_match_the_real_models(name: str, params: int) -> None:
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(random_config(name))
    assert sum(p.numel() for p in model.parameters()) == params


def test_a_builtin_shape_loads_by_an_alias_and_runs(warm_tokenizer: Path) -> None:
    t = load_target(
        "HuggingFaceTB/SmolLM2-135M-Instruct", cache_dir=warm_tokenizer, dtype="bfloat16",
        weights="random", seed=0,
    )  # fmt: skip
    assert t.random_weights and t.model.config.num_hidden_layers == 30
    logits = t.model(input_ids=torch.tensor([[1, 2, 3]])).logits
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()


def test_a_random_target_whose_vocabulary_misses_tokenizer_ids_is_refused(
    tmp_path: Path, warm_tokenizer: Path
) -> None:
    _tiny_config(vocab_size=64).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=f"vocab_size 64 .* {TOKENIZER_VOCAB}"):
        load_target(str(tmp_path), cache_dir=warm_tokenizer, weights="random")


def test_a_pretrained_folder_loads_with_device_map_auto_on_the_cpu(
    tmp_path: Path, warm_tokenizer: Path
) -> None:
    torch.manual_seed(0)
    LlamaForCausalLM(_tiny_config()).save_pretrained(tmp_path)
    _builtin_tokenizer(warm_tokenizer).save_pretrained(tmp_path)  # type: ignore[attr-defined]
    plain = load_target(str(tmp_path), cache_dir=warm_tokenizer)
    auto = load_target(str(tmp_path), cache_dir=warm_tokenizer, device_map="auto")
    assert not auto.random_weights and auto.input_device == torch.device("cpu")
    assert {p.device.type for p in auto.model.parameters()} == {"cpu"}
    ids = torch.tensor([[5, 6, 7, 8]], device=auto.input_device)
    assert torch.equal(plain.model(input_ids=ids).logits, auto.model(input_ids=ids).logits)


def test_frozen_weights_reads_an_offloaded_head_from_accelerates_map(tmp_path: Path) -> None:
    from accelerate import dispatch_model

    from workloads.models.target import Target

    torch.manual_seed(0)
    model = LlamaForCausalLM(_tiny_config(tie_word_embeddings=False, vocab_size=64)).eval()
    head = model.lm_head.weight.detach().clone()
    dispatch_model(model, device_map={"model": "cpu", "lm_head": "disk"}, offload_dir=str(tmp_path))
    assert model.lm_head.weight.is_meta  # accelerate keeps the offloaded weight elsewhere
    target = Target(name="tiny", model=model, tokenizer=None)
    embed, got = target.frozen_weights()
    assert torch.equal(got, head) and embed is model.model.embed_tokens.weight
    assert target.input_device == torch.device("cpu")


def test_embedding_scale_is_sqrt_hidden_for_gemma_and_one_for_llama() -> None:
    """Gemma-3's scaled embedding multiplies its rows by sqrt(h) (rounded to the weight's dtype);
    LLaMA's is a plain lookup."""
    gemma, llama = tiny_gemma_target(), tiny_target()
    assert embedding_scale(gemma) == pytest.approx(64**0.5, rel=1e-6)
    assert embedding_scale(llama) == 1.0
    odd: Any = tiny_gemma_target()
    odd.model.embed_tokens.embed_scale.fill_(3.3)  # not a power of two: the bf16 rounding shows
    assert embedding_scale(odd) == pytest.approx(3.3, rel=1e-6)
    # bfloat16: the measured ratio rounds to the scale the module applied, bf16(3.3) = 3.296875
    bf16 = torch.bfloat16
    measured = embedding_scale(odd.to(bf16))
    assert float(torch.tensor(measured, dtype=bf16)) == float(torch.tensor(3.3, dtype=bf16))


def test_embedding_scale_refuses_an_embedding_that_is_not_a_scaled_lookup() -> None:
    model = tiny_target()
    model.model.embed_tokens.register_forward_hook(lambda _m, _i, out: out + 1.0)
    with pytest.raises(ValueError, match="not a scaled lookup of its weight.*Fix:"):
        embedding_scale(model)


def test_a_target_that_overflows_float16_is_refused() -> None:
    """Gemma-3's activations overflow float16 (NaN logits, measured): a finite check on one
    forward turns that into an error naming bfloat16."""
    from types import SimpleNamespace

    from workloads.models.target import _check_float16

    class Model(torch.nn.Module):
        def __init__(self, value: float) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(32, 4)
            self.value = value

        def get_input_embeddings(self) -> torch.nn.Module:
            return self.emb

        def forward(self, input_ids: torch.Tensor) -> SimpleNamespace:
            return SimpleNamespace(logits=torch.full((1, input_ids.shape[1], 8), self.value))

    _check_float16("fine", Model(1.0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'gemma' overflows float16.*Fix: target.dtype: bfloat16"):
        _check_float16("gemma", Model(float("nan")))  # type: ignore[arg-type]
