"""The draft's embedding follows its target's scale (``DraftArch.embed_scale``, Gemma's sqrt(h)),
and a Gemma-3 config's per-layer-type RoPE gives the draft the global layers' base."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import Gemma3TextConfig

from tests.workloads.stubs import StubDraft
from tests.workloads.tiny import tiny_gemma_target
from workloads.engine.oracle_draft import OracleDraft
from workloads.models.draft import Draft, DraftArch, DraftModel
from workloads.models.target import embedding_scale

H, V = 64, 64


def _draft(target: Any, embed_scale: float, embed: torch.Tensor) -> DraftModel:
    torch.manual_seed(3)  # the same trainable weights for every call
    arch = DraftArch.from_target(target.config, layers=1, output_norm=True, embed_scale=embed_scale)
    head = target.get_output_embeddings().weight
    return DraftModel(arch, embed_weight=embed, lm_head_weight=head).eval()


def _inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(2, 5, H, generator=gen)
    ids = torch.randint(0, V, (2, 5), generator=gen)
    return hidden, ids, torch.arange(5).expand(2, -1)


def test_a_scale_equals_the_scaled_weight() -> None:
    """A draft with ``embed_scale`` s gives the output of one with scale 1 whose frozen
    embedding rows are multiplied by s (float32); scale 1 gives another output."""
    target: Any = tiny_gemma_target()
    weight, s = target.get_input_embeddings().weight, embedding_scale(target)
    scaled = _draft(target, s, weight)
    premultiplied = _draft(target, 1.0, weight * s)
    plain = _draft(target, 1.0, weight)
    with torch.no_grad():
        out = scaled(*_inputs())
        assert torch.allclose(out, premultiplied(*_inputs()), rtol=1e-5, atol=1e-5)
        assert not torch.allclose(out, plain(*_inputs()), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_draft_reads_the_targets_own_embedding(dtype: torch.dtype) -> None:
    """The token half of the draft's FC input is, bit for bit, what the target's embedding
    module gives (Gemma: rows x sqrt(h) rounded to the weight's dtype), with the frozen
    embedding in the target's dtype, here at an odd scale whose bfloat16 rounding shows."""
    target: Any = tiny_gemma_target()
    target.model.embed_tokens.embed_scale.fill_(3.3)
    target = target.to(dtype)
    weight = target.get_input_embeddings().weight
    draft = _draft(target, embedding_scale(target), weight).set_compute_dtype(dtype)
    seen: list[torch.Tensor] = []
    draft.fc.register_forward_pre_hook(lambda _m, args: seen.append(args[0][..., :H]))
    hidden, ids, pos = _inputs()
    with torch.no_grad():
        draft(hidden, ids, pos)
        own = target.get_input_embeddings()(ids)
    assert own.dtype == dtype and torch.equal(seen[0], own.float())


def test_from_target_takes_the_global_rope_and_saves_the_scale(tmp_path: Path) -> None:
    config = Gemma3TextConfig(hidden_size=H, num_attention_heads=2, head_dim=32, vocab_size=V)
    rope: Any = config.rope_parameters
    assert rope["sliding_attention"]["rope_theta"] != rope["full_attention"]["rope_theta"]
    arch = DraftArch.from_target(config, layers=1, output_norm=True, embed_scale=8.0)
    assert arch.rope_theta == rope["full_attention"]["rope_theta"] == 1_000_000.0
    assert arch.head_dim == 32 and arch.embed_scale == 8.0
    weight = torch.randn(V, H)
    DraftModel(arch, embed_weight=weight, lm_head_weight=weight).save(tmp_path)
    back = DraftModel.load(tmp_path, embed_weight=weight, lm_head_weight=weight)
    assert back.arch == arch


@pytest.mark.parametrize("name", ["DraftModel", "OracleDraft", "StubDraft"])
def test_every_draft_takes_the_protocol_call(name: str) -> None:
    """Each draft the engine runs takes the :class:`Draft` call: the same parameters, in
    order, keyword-only where the protocol has them (mypy cannot see it: ``nn.Module.__call__``
    takes anything)."""
    cls = {"DraftModel": DraftModel, "OracleDraft": OracleDraft, "StubDraft": StubDraft}[name]

    def shape(fn: Any) -> list[tuple[str, Any]]:
        params = list(inspect.signature(fn).parameters.values())[1:]  # without self
        return [(p.name, p.kind) for p in params]

    assert shape(cls.forward) == shape(Draft.__call__)
    assert callable(getattr(cls, "logits", None))
