"""The FLOPs of a draft training trial's stages on named shapes (hand-counted golden numbers), the
decoding cycle's parts, the regeneration counts against the measured default sweep, the
utilisation assumed, and the hardware fingerprint trials are matched on."""

from __future__ import annotations

import pytest

from workloads.roofline import BUILTIN_PROFILES, load_model_shape
from workloads.roofline.costs import step_time, target_step
from workloads.roofline.hardware import (
    datasheet_name,
    fingerprint_id,
    get_profile,
    hardware_fingerprint,
)
from workloads.roofline.train_cost import (
    GPU_MFU,
    draft_params,
    draft_step,
    draft_train_flops,
    layer_params,
    regen_chats,
    target_forward_flops,
    tree_cycle,
    utilisation,
)

SMOL = load_model_shape("smollm2-135m")
LLAMA = load_model_shape("llama-3-8b")


def test_decoder_layer_and_draft_weights_of_named_shapes() -> None:
    # SmolLM2: 2*576^2 + 2*576*192 + 3*576*1536 + 2*576
    assert layer_params(SMOL) == 3_540_096
    # the draft adds the FC 2h->h with its bias and the output RMSNorm
    assert draft_params(SMOL, 1) == 3_540_096 + 2 * 576 * 576 + 576 + 576
    # Llama-3-8B: 2*4096^2 + 2*4096*1024 + 3*4096*14336 + 2*4096
    assert layer_params(LLAMA) == 218_112_000
    assert draft_params(LLAMA, 2) == 2 * 218_112_000 + 2 * 4096 * 4096 + 2 * 4096
    with pytest.raises(ValueError, match="layers=0"):
        draft_params(SMOL, 0)


def test_the_layer_count_matches_a_real_llama_decoder_layer() -> None:
    """The hand count equals the parameters of transformers' LlamaDecoderLayer (SmolLM2 sizes)."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    cfg = LlamaConfig(
        hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3,
        num_hidden_layers=1, vocab_size=64,
    )  # fmt: skip
    layer = LlamaDecoderLayer(cfg, 0)
    assert sum(p.numel() for p in layer.parameters()) == layer_params(SMOL)


def test_target_features_and_draft_training_flops_per_token() -> None:
    # SmolLM2 features at 256 tokens a row: 30 * (2 * 3,540,096 + 2 * 576 * 256)
    assert target_forward_flops(SMOL, 1, 256) == 221_253_120
    assert target_forward_flops(SMOL, 1000, 256) == 1000 * 221_253_120
    # a 1-layer Llama-3-8B draft over the full vocabulary, rows of 2048:
    # 6 * (251,674,624 weights + 4096*2048 attention + 4096*128,256 head)
    per_token = draft_train_flops(LLAMA, layers=1, vocab=128_256, tokens=1, seq_len=2048)
    assert per_token == 6 * (251_674_624 + 4096 * 2048 + 4096 * 128_256) == 4_712_398_848
    truncated = draft_train_flops(LLAMA, layers=1, vocab=32_000, tokens=1, seq_len=2048)
    assert per_token - truncated == 6 * 4096 * (128_256 - 32_000)
    # training-time test, 3 unrolled steps: weights and head 3 times, attention 1 + 2 + 3 times
    ttt = draft_train_flops(LLAMA, layers=1, vocab=128_256, tokens=1, seq_len=2048, ttt_steps=3)
    assert ttt == 6 * (3 * (251_674_624 + 4096 * 128_256) + 6 * 4096 * 2048)
    with pytest.raises(ValueError, match="tokens"):
        target_forward_flops(SMOL, -1, 256)


def test_a_tree_cycle_is_its_draft_steps_and_one_verification() -> None:
    hw = get_profile("h100")
    kw = {"layers": 1, "vocab": 8192, "s": 300, "bytes_per_element": 2}
    cycle = tree_cycle(
        SMOL, layers=1, vocab=8192, depth=3, topk=4, num_draft_tokens=8, s=300, tau=2.4
    )
    parts = (
        draft_step(SMOL, b=1, n=2, **kw)  # the accepted tokens re-read (tau rounded)
        + draft_step(SMOL, b=1, n=1, **kw)  # the root's expansion
        + draft_step(SMOL, b=1, n=4, **kw)
        + draft_step(SMOL, b=1, n=4, **kw)
        + target_step(SMOL, 1, 8, 300)
    )
    assert cycle.flops == pytest.approx(parts.flops)
    assert cycle.bytes == pytest.approx(parts.bytes)
    assert step_time(cycle, hw) > step_time(target_step(SMOL, 1, 8, 300), hw)
    with pytest.raises(ValueError, match="tau"):
        tree_cycle(SMOL, layers=1, vocab=8, depth=1, topk=1, num_draft_tokens=2, s=0, tau=0.5)


def test_regenerated_chats_match_the_default_sweep() -> None:
    """docs/results.md: the 16K SFT set of the default sweep regenerated 64 chats (cap 256)."""
    assert regen_chats(16384, 256) == pytest.approx(64)


def test_the_utilisation_is_stated_per_hardware() -> None:
    gpu = utilisation(BUILTIN_PROFILES["h200"])
    assert gpu.train == gpu.decode == GPU_MFU == 0.35
    assert "gpu_check.py train" in gpu.source
    cpu = utilisation(
        BUILTIN_PROFILES["h200"].__class__(
            name="local-cpu", peak_flops=1e11, bandwidth=1e10, dtype="float32",
            bytes_per_element=4, source="test",
        )
    )  # fmt: skip
    assert cpu.train == 0.5 and cpu.decode == 0.25 and "CPU" in cpu.source


def test_the_hardware_fingerprint() -> None:
    assert datasheet_name("NVIDIA H200") == "h200"
    assert datasheet_name("NVIDIA A100-SXM4-80GB") == "a100"
    assert datasheet_name("NVIDIA L40S") is None
    assert hardware_fingerprint(device="cuda", gpu_name="NVIDIA H200") == "gpu:h200"
    assert hardware_fingerprint(device="cuda", gpu_name="NVIDIA L40S") == "gpu:nvidia l40s"
    cpu = hardware_fingerprint(device="cpu", threads=2)
    assert cpu.startswith("cpu:") and cpu.endswith(":2t")
    assert fingerprint_id(cpu) == fingerprint_id(cpu) < 2**40
    assert fingerprint_id(cpu) != fingerprint_id(hardware_fingerprint(device="cpu", threads=1))
