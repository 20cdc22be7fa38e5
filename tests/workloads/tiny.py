"""A tiny random Llama target, a tiny random Gemma-3 target (sliding-window and global layers,
a scaled embedding) and a tiny random draft with real attention, masks and caches, plus
from-scratch references (full forwards, no cache) for the decoding tests.

Unlike the stubs in :mod:`tests.workloads.stubs`, these models use positions, attention masks,
KV caches and (for the draft) hidden states, so a bug on either side changes their outputs.
"""

from __future__ import annotations

import torch
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
)

from workloads.models.draft import DraftArch, DraftModel
from workloads.models.target import embedding_scale
from workloads.training.evaluation import NEAR_TIE

V = 16
"""target vocabulary"""


def tiny_target(seed: int = 0, vocab: int = V) -> LlamaForCausalLM:
    """2 layers, hidden 32, GQA 4/2 heads, float32; weights at std 0.5 so that next-token
    distributions are peaked and attention depends on positions."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=vocab, max_position_embeddings=256,
        initializer_range=0.5, bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg).eval().requires_grad_(False)


WINDOW = 8
"""the tiny Gemma-3 target's sliding window (positions): prompts of 5 to 40 tokens fall short of
it and span it several times over"""


def tiny_gemma_target(seed: int = 0, vocab: int = 64) -> Gemma3ForCausalLM:
    """4 layers, sliding-window (:data:`WINDOW`) and global in turn, hidden 64, 2 query heads over
    1 KV head of width 32, Gemma's scaled embedding (x sqrt(64)), an untied head, float32;
    weights at std 0.5 as :func:`tiny_target`'s (tied, its greedy output repeats one token).
    Its greedy output depends on the window: a decode that attends past it diverges."""
    torch.manual_seed(seed)
    cfg = Gemma3TextConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=2,
        num_key_value_heads=1, head_dim=32, query_pre_attn_scalar=32, vocab_size=vocab,
        max_position_embeddings=256, sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention"] * 2, tie_word_embeddings=False,
        initializer_range=0.5, bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    cfg._attn_implementation = "sdpa"
    return Gemma3ForCausalLM(cfg).eval().requires_grad_(False)


def tiny_draft(
    target: PreTrainedModel,
    seed: int = 1,
    draft_to_target: torch.Tensor | None = None,
    fusion_layers: tuple[int, ...] = (),
) -> DraftModel:
    """A 1-layer :class:`DraftModel` on ``target``'s embedding (at its scale) and head, never
    trained (``fusion_layers``: EAGLE-3's hidden fusion of those target layers)."""
    torch.manual_seed(seed)
    arch = DraftArch.from_target(target.config, layers=1, output_norm=True,
                                 fusion_layers=fusion_layers,
                                 embed_scale=embedding_scale(target))  # fmt: skip
    return (
        DraftModel(
            arch,
            embed_weight=target.get_input_embeddings().weight,
            lm_head_weight=target.get_output_embeddings().weight,
            draft_to_target=draft_to_target,
        )
        .eval()
        .requires_grad_(False)
    )


@torch.inference_mode()
def next_logits(target: PreTrainedModel, seqs: list[list[int]]) -> torch.Tensor:
    """[N, V] float32 next-token logits after each sequence (equal lengths), one plain causal
    forward from scratch (no cache, no mask)."""
    return target(input_ids=torch.tensor(seqs)).logits[:, -1].float()


_GREEDY: dict[tuple[int, tuple[int, ...]], list[int]] = {}


def greedy_reference(
    target: PreTrainedModel, prompt: list[int], n: int, eos: frozenset[int] = frozenset()
) -> list[int]:
    """The target's own greedy continuation, one full forward per token (up to ``n`` tokens,
    stopping after an EOS); memoised per target and prompt."""
    out = _GREEDY.setdefault((id(target), tuple(prompt)), [])
    while len(out) < n:
        out.append(int(next_logits(target, [prompt + out])[0].argmax()))
    stop = next((i + 1 for i, t in enumerate(out[:n]) if t in eos), n)
    return out[:stop]


def first_divergence_gap(
    target: PreTrainedModel, prompt: list[int], out: list[int], ref: list[int]
) -> float:
    """Gap of the target's top-2 logits where ``out`` first differs from ``ref`` (0 if equal)."""
    i = next((j for j, (a, b) in enumerate(zip(out, ref, strict=False)) if a != b), None)
    if i is None:
        return 0.0 if len(out) == len(ref) else float("inf")
    top = next_logits(target, [prompt + ref[:i]])[0].topk(2).values
    return float(top[0] - top[1])


def assert_greedy(
    target: PreTrainedModel, prompt: list[int], out: list[int], ref: list[int]
) -> None:
    """``out`` equals the greedy ``ref`` but where the target's top-2 logits nearly tie."""
    if out != ref:
        assert first_divergence_gap(target, prompt, out, ref) < NEAR_TIE, (prompt, out, ref)
