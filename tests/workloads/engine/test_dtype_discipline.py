"""GPU rule, dtype discipline: a draft cast for a bfloat16 target keeps its float32 buffers
(RoPE's inv_freq) in float32, so its rotary cos at position 2000 stays that of the float32
table; the plain ``.to(dtype=bfloat16)`` it replaces is off by a large fraction of 1 there.
"""

from __future__ import annotations

import pytest
import torch

from tests.workloads.gpu_dtype import fp32_buffers, rotary_cos_error, wide_draft
from tests.workloads.tiny import tiny_target
from workloads.decode_bench.config import DraftSourceConfig
from workloads.measure import decode as engine_bench
from workloads.models.draft import DraftModel
from workloads.models.target import Target

BF16 = torch.bfloat16
FROZEN = frozenset(DraftModel.FROZEN_WEIGHTS)


def _assert_cast_for_bf16(draft: DraftModel, keep: set[str]) -> None:
    assert "rotary.inv_freq" in keep  # the generic set below does hold the RoPE table
    buffers = dict(draft.named_buffers())
    assert {n: buffers[n].dtype for n in keep} == dict.fromkeys(keep, torch.float32)
    assert {p.dtype for p in draft.parameters()} == {BF16}
    assert {buffers[n].dtype for n in FROZEN} == {BF16}
    assert rotary_cos_error(draft, BF16) < 1e-2  # bfloat16 rounding of cos, no more


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_cast_to_keeps_fp32_buffers_and_rotary(device: str) -> None:
    draft = wide_draft()
    keep = fp32_buffers(draft, cast_ok=FROZEN)
    assert rotary_cos_error(draft, torch.float32) < 1e-3
    cast = draft.cast_to(BF16, device=device)
    assert {b.device.type for b in cast.buffers()} == {device}
    _assert_cast_for_bf16(cast, keep)


def test_plain_to_dtype_breaks_rotary() -> None:
    """Negative control: the cast the fix replaces ruins the RoPE table."""
    draft = wide_draft().to(dtype=BF16)
    assert draft.rotary.inv_freq.dtype == BF16
    assert rotary_cos_error(draft, BF16) > 0.3


def test_decode_bench_draft_for_bf16_target() -> None:
    """The decode benchmark's draft beside a bfloat16 target: weights bf16, RoPE fp32."""
    model = tiny_target().to(BF16)
    target = Target(name="tiny", model=model, tokenizer=None)
    keep = fp32_buffers(wide_draft(), cast_ok=FROZEN)
    draft, where = engine_bench._draft(DraftSourceConfig(source="fresh"), target, None, seed=0)
    assert where == "fresh" and draft is not None
    _assert_cast_for_bf16(draft, keep)
