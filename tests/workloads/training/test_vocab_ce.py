"""The classification loss over the vocabulary in chunks equals the whole-tensor one, with grads."""

from __future__ import annotations

import torch

from tests.workloads.training.test_distributed import tiny_draft
from workloads.training.loop import _soft_ce, vocab_cross_entropy


def _inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(3, 7, 32, generator=gen), torch.randn(3, 7, 32, generator=gen)


def test_chunked_equals_whole_with_gradients() -> None:
    draft = tiny_draft()
    f, target = _inputs()
    f_whole = f.clone().requires_grad_(True)
    f_chunk = f.clone().requires_grad_(True)
    cls_w, agree_w = _soft_ce(draft, f_whole, target)
    # 96-token vocabulary, 5 * 96 elements per chunk: 5 positions at a time, 21 = 4 + 1 chunks
    cls_c, agree_c = vocab_cross_entropy(draft, f_chunk, target, chunk_elements=5 * 96)
    torch.testing.assert_close(cls_c, cls_w, rtol=1e-6, atol=1e-6)
    assert torch.equal(agree_c, agree_w)
    cls_w.sum().backward()
    cls_c.sum().backward()
    assert f_chunk.grad is not None and f_whole.grad is not None
    torch.testing.assert_close(f_chunk.grad, f_whole.grad, rtol=1e-5, atol=1e-6)
    weights = [p for p in draft.parameters() if p.requires_grad]
    assert weights and all(p.grad is not None for p in weights if p.grad is not None)


def test_chunks_hold_one_chunk_of_logits() -> None:
    """Autograd keeps the chunk inputs [chunk, h], not [B, T, N] logits: with recomputation the
    saved tensors of the loss are the inputs only (checked through the saved-tensor hooks)."""
    draft = tiny_draft()
    f, target = _inputs(1)
    f.requires_grad_(True)
    vocab = draft.vocab_size
    biggest: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        biggest.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        cls, _ = vocab_cross_entropy(draft, f, target, chunk_elements=4 * vocab)
    cls.sum().backward()
    whole = f.shape[0] * f.shape[1] * vocab
    assert biggest and max(biggest) < whole / 4, (max(biggest), whole)
