"""The attention mask per layer type (:func:`workloads.models.kv_cache.layer_masks`) against a
reference written with loops: a sliding layer sees key slot j from query position q iff the
mask allows it and q - j < sliding_window; every other layer gets the mask as is."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import Gemma3TextConfig, LlamaConfig

from workloads.models.kv_cache import layer_masks

WINDOW = 3
B, N, W = 2, 4, 9
"""rows, queries, key slots"""


def _config(types: list[str], window: int | None = WINDOW) -> SimpleNamespace:
    return SimpleNamespace(layer_types=types, sliding_window=window)


def _queries() -> torch.Tensor:
    """[B, N] query positions: row 0 at slots 5-8 (the last ones), row 1 at 1-4 (keys ahead)."""
    return torch.tensor([[5, 6, 7, 8], [1, 2, 3, 4]])


def _reference(mask: torch.Tensor, query_bn: torch.Tensor, window: int) -> torch.Tensor:
    out = mask.clone()
    hidden = False if mask.dtype == torch.bool else torch.finfo(mask.dtype).min
    for b in range(mask.shape[0]):
        for i in range(mask.shape[2]):
            for j in range(mask.shape[3]):
                if int(query_bn[b, i]) - j >= window:
                    out[b, 0, i, j] = hidden
    return out


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32, torch.bfloat16])
def test_sliding_layers_get_the_window_and_full_layers_the_mask(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        mask = torch.rand(B, 1, N, W, generator=gen) > 0.3
    else:  # an additive mask: 0 where allowed, the dtype's minimum elsewhere, and odd values
        mask = torch.randn(B, 1, N, W, generator=gen).to(dtype)
        mask[torch.rand(B, 1, N, W, generator=gen) > 0.7] = torch.finfo(dtype).min
    types = ["sliding_attention", "sliding_attention", "full_attention"]
    out = layer_masks(_config(types), mask, _queries())
    assert set(out) == {"sliding_attention", "full_attention"}
    assert out["full_attention"] is mask
    sliding = out["sliding_attention"]
    assert sliding.dtype == dtype and sliding.shape == mask.shape
    assert torch.equal(sliding, _reference(mask, _queries(), WINDOW))
    # the window took something away from row 0 (keys 0-5 are far from query 8) and nothing
    # from row 1's first query (position 1: every key slot j > -2)
    far = sliding != mask
    assert far[0].any() and not far[1, 0, 0].any()


def test_the_window_counts_the_query_itself() -> None:
    """With a causal mask and queries on their own slots, each query of a sliding layer sees
    exactly its last ``sliding_window`` keys, itself included (HF's ``sliding_window_overlay``)."""
    n = 7
    causal = torch.ones(n, n, dtype=torch.bool).tril()[None, None]
    out = layer_masks(
        _config(["sliding_attention", "full_attention"]), causal, torch.arange(n)[None]
    )
    assert out["sliding_attention"][0, 0].sum(-1).tolist() == [1, 2, 3, 3, 3, 3, 3]
    assert out["sliding_attention"][0, 0, 6].nonzero().flatten().tolist() == [4, 5, 6]


def test_a_real_gemma3_config_takes_the_window_from_its_layer_types() -> None:
    config = Gemma3TextConfig(num_hidden_layers=6, sliding_window=WINDOW)
    assert set(config.layer_types or ()) == {"sliding_attention", "full_attention"}
    mask = torch.zeros(1, 1, 1, W)
    out = layer_masks(config, mask, torch.tensor([[W - 1]]))
    assert out["sliding_attention"][0, 0, 0].eq(0).nonzero().flatten().tolist() == [6, 7, 8]


@pytest.mark.parametrize(
    "config",
    [
        LlamaConfig(num_hidden_layers=2),  # no layer types
        _config(["full_attention", "full_attention"]),  # layer types, none sliding
        _config(["sliding_attention", "full_attention"], window=None),  # no window
        Gemma3TextConfig(num_hidden_layers=2, sliding_window=None),
    ],
    ids=["llama", "all-full", "no-window", "gemma-no-window"],
)
def test_a_config_without_sliding_layers_gets_the_same_mask_object(config: object) -> None:
    mask = torch.zeros(B, 1, N, W)
    assert layer_masks(config, mask, _queries()) is mask
