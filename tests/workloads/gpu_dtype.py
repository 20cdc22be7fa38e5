"""Dtype discipline a CUDA run relies on, checked on the CPU.

A GPU decodes in the target's dtype (bfloat16), so a draft is cast to it; some float tensors must
survive that cast in float32 (RoPE's ``inv_freq``: a bfloat16 angle table is off by radians at
positions in the thousands). These helpers name those tensors and measure the damage.
"""

from __future__ import annotations

import torch
from torch import nn

from workloads.models.draft import DraftArch, DraftModel


def fp32_buffers(module: nn.Module, *, cast_ok: frozenset[str] = frozenset()) -> set[str]:
    """Names of the float32 buffers of ``module`` (except those in ``cast_ok``), as built."""
    return {n for n, b in module.named_buffers() if b.dtype == torch.float32 and n not in cast_ok}


def wide_draft(seed: int = 0, rope_theta: float = 100000.0) -> DraftModel:
    """A 1-layer draft with a real head dimension (64, SmolLM2's RoPE base), random frozen
    weights over 16 tokens; small enough for a CPU test."""
    torch.manual_seed(seed)
    arch = DraftArch(
        hidden_size=128, layers=1, num_attention_heads=2, num_key_value_heads=2, head_dim=64,
        intermediate_size=64, rms_norm_eps=1e-5, rope_theta=rope_theta,
        max_position_embeddings=8192, output_norm=True,
    )  # fmt: skip
    emb = torch.randn(16, 128)
    return DraftModel(arch, embed_weight=emb, lm_head_weight=emb.clone()).eval()


def rotary_cos_error(draft: DraftModel, dtype: torch.dtype, position: int = 2000) -> float:
    """Largest |cos - cos_ref| of ``draft``'s RoPE at ``position`` for inputs of ``dtype``;
    the reference is computed in float64 from the RoPE base (the float32 table is exact enough)."""
    arch = draft.arch
    dim = arch.head_dim
    inv = 1.0 / arch.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    ang = position * inv.to(torch.float32).double()  # the float32 table, angles in float64
    ref = torch.cat([ang, ang]).cos()
    dev = draft.rotary.inv_freq.device
    x, pos = torch.zeros(1, dtype=dtype, device=dev), torch.tensor([[position]], device=dev)
    cos, _ = draft.rotary(x, pos)
    return float((cos.double().cpu().flatten() - ref).abs().max())
