"""A training step aimed at a GPU allocates nothing large on the host (issue 22, fault 1).

The GPU is emulated (see :mod:`tests.workloads.gpu_alloc`): the training device is tagged
``cpu:1`` and a dispatch mode records factory calls aimed at the host. The shapes are the
smallest whose feature noise, [4, 256, 1024], exceeds the rule's 1M elements (seconds).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tests.workloads.gpu_alloc import EMULATED_DEVICE, LARGE, NoLargeHostAllocations
from workloads.models.draft import DraftArch, DraftModel
from workloads.training import loop as training
from workloads.training.features import Features
from workloads.training.loop import StageSettings, train_stage

B, L, H, V = 4, 258, 1024, 64
"""rows per step, tokens per row, hidden width, vocabulary: noise [B, L-2, H] > 1M elements"""

S = StageSettings(
    epochs=1, batch_size=B, lr=1e-3, warmup_steps=0, weight_decay=0.0, grad_clip=0.5,
    w_reg=1.0, w_cls=0.1, seed=0, feature_noise=0.2,
)  # fmt: skip


def _draft() -> DraftModel:
    arch = DraftArch(
        hidden_size=H, layers=1, num_attention_heads=8, num_key_value_heads=1, head_dim=128,
        intermediate_size=128, rms_norm_eps=1e-6, rope_theta=10000.0,
        max_position_embeddings=512, output_norm=True,
    )  # fmt: skip
    g = torch.Generator().manual_seed(0)
    embed, head = torch.randn(V, H, generator=g), torch.randn(V, H, generator=g)
    torch.manual_seed(0)
    return DraftModel(arch, embed_weight=embed, lm_head_weight=head)


def _feats() -> Features:
    """One step's rows; their hidden states stand for features computed on the device (the
    target's forward inside the step, as online features are)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (B, L), generator=g)
    hidden = torch.randn(B, L, H, generator=g).half()
    return Features(ids, torch.ones_like(ids, dtype=torch.bool), hidden)


def _old_cpu_noise(
    shape: torch.Size, amount: float, gen: torch.Generator, *, seq_len: int, **_: object
) -> torch.Tensor:
    """The noise before issue 22: drawn on the CPU from a CPU generator, copied later."""
    cpu_gen = torch.Generator().manual_seed(gen.initial_seed())
    return (torch.rand(shape, generator=cpu_gen) - 0.5) * (amount * 512 / seq_len)


def _step_on_device(
    monkeypatch: pytest.MonkeyPatch, s: StageSettings = S
) -> tuple[NoLargeHostAllocations, list[int]]:
    """One noisy training step with the training device tagged as the emulated GPU; the mode
    that watched it and the element counts of the noise drawn."""
    monkeypatch.setattr(training, "training_device", lambda draft: EMULATED_DEVICE, raising=False)
    drawn: list[int] = []
    draw = training.input_noise

    def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        noise = draw(*args, **kwargs)
        drawn.append(noise.numel())
        return noise

    monkeypatch.setattr(training, "input_noise", counting)
    draft, feats = _draft(), _feats()
    with NoLargeHostAllocations() as mode:
        log = train_stage(draft, feats, s)
    assert len(log.loss) == 1
    return mode, drawn


def test_the_check_catches_noise_drawn_on_the_cpu() -> None:
    shape = torch.Size((B, L - 2, H))
    with NoLargeHostAllocations() as mode:
        torch.rand(shape, generator=torch.Generator().manual_seed(0))  # the old draw
    assert [a.op for a in mode.found] == ["aten.rand.generator"]
    with pytest.raises(AssertionError, match="aten.rand"):
        mode.check()
    with NoLargeHostAllocations() as mode:
        torch.zeros(shape)  # no device: torch's default, the host
        torch.empty(shape, device="cpu")
    assert len(mode.found) == 2
    with NoLargeHostAllocations() as mode:  # on the device, or small: allowed
        gen = torch.Generator(device=EMULATED_DEVICE).manual_seed(0)
        torch.empty(shape, device=EMULATED_DEVICE).uniform_(-1, 1, generator=gen)
        torch.rand(LARGE)
        x = torch.zeros(3).to(EMULATED_DEVICE)
        torch.zeros_like(x)
    mode.check()


@pytest.mark.parametrize("ttt_steps", [1, 3], ids=["one-step", "training-time-test"])
def test_a_noisy_step_on_the_device_allocates_nothing_large_on_the_host(
    monkeypatch: pytest.MonkeyPatch, ttt_steps: int
) -> None:
    """Also with the draft unrolled (training-time test: its masks, padding and KV cache)."""
    mode, drawn = _step_on_device(monkeypatch, replace(S, ttt_steps=ttt_steps))
    assert drawn == [B * (L - 2) * H] and drawn[0] > LARGE  # the noise was drawn, and large
    mode.check()


def test_a_step_that_draws_its_noise_on_the_cpu_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(training, "input_noise", _old_cpu_noise)
    mode, _ = _step_on_device(monkeypatch)
    assert any(a.op.startswith("aten.rand.") and a.elements > LARGE for a in mode.found)


def test_noise_on_a_device_generator_is_seeded_and_in_place() -> None:
    shape = torch.Size((2, 254, 8))

    def draw(seed: int) -> torch.Tensor:
        gen = torch.Generator(device=EMULATED_DEVICE).manual_seed(seed)
        return training.input_noise(shape, 0.2, gen, seq_len=256, device=EMULATED_DEVICE)

    a, b, c = draw(3), draw(3), draw(4)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.dtype == torch.float32 and float(a.abs().max()) <= 0.2 * 512 / 256 / 2
    with NoLargeHostAllocations(limit=0) as mode:  # the only allocation: on the device
        draw(3)
    mode.check()


def test_a_resumed_noisy_stage_matches_the_uninterrupted_one() -> None:
    feats = Features(
        torch.randint(0, V, (8, 12), generator=torch.Generator().manual_seed(2)),
        torch.ones(8, 12, dtype=torch.bool),
        torch.randn(8, 12, 16, generator=torch.Generator().manual_seed(3)).half(),
    )
    arch = DraftArch(
        hidden_size=16, layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
        intermediate_size=32, rms_norm_eps=1e-6, rope_theta=10000.0,
        max_position_embeddings=64, output_norm=True,
    )  # fmt: skip
    s = replace(S, batch_size=2, epochs=2, feature_noise=0.5)

    def draft() -> DraftModel:
        g = torch.Generator().manual_seed(5)
        embed, head = torch.randn(V, 16, generator=g), torch.randn(V, 16, generator=g)
        torch.manual_seed(0)
        return DraftModel(arch, embed_weight=embed, lm_head_weight=head)

    whole = draft()
    full = train_stage(whole, feats, s)
    parts = draft()
    opt = training.make_optimizer(parts, s)
    first = train_stage(parts, feats, s, opt=opt, stop=3)
    rest = train_stage(parts, feats, s, opt=opt, log=first, start=3)
    assert rest.loss == full.loss
    want, got = whole.trainable_state(), parts.trainable_state()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
