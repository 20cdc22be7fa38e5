"""Losslessness on real prompts with the real target: speculative output == greedy output."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.workloads.stats import chi2_pvalue
from workloads.data import chat_prompt_ids, load_prompt_sets
from workloads.engine.ar_decode import ar_generate
from workloads.engine.oracle_draft import OracleDraft
from workloads.engine.tree import accept_sampling
from workloads.engine.tree_decode import TreeShape, generate, speculative_generate
from workloads.models.draft import DraftArch, DraftModel
from workloads.models.fusion import default_layers
from workloads.training.evaluation import NEAR_TIE, greedy_reference

N_NEW = 24


@pytest.fixture(scope="module")
def prompts(target) -> list[list[int]]:  # noqa: ANN001
    sets = (
        load_prompt_sets(["humaneval"], n=2)
        + [
            # two chat prompts written here (the held-out ShareGPT split needs the whole file)
        ]
    )
    texts = [p for s in sets for p in s.prompts] + [
        "Explain in two sentences why the sky is blue.",
        "Write a haiku about speculative decoding.",
    ]
    return [chat_prompt_ids(target.tokenizer, t) for t in texts]


def _reference(target, prompt: list[int], cache_dir: Path) -> list[int]:  # noqa: ANN001
    tokens, _ = greedy_reference(
        target.model,
        prompt,
        max_new_tokens=N_NEW,
        eos_ids=target.eos_token_ids,
        cache_dir=cache_dir,
        target_name=target.name,
    )
    return tokens


def _gap_at_divergence(target, prompt: list[int], ref: list[int], out: list[int]) -> float:  # noqa: ANN001
    i = next(j for j, (a, b) in enumerate(zip(out, ref, strict=False)) if a != b)
    with torch.inference_mode():
        logits = target.model(input_ids=torch.tensor([prompt + ref[:i]])).logits[0, -1]
    top = logits.topk(2).values
    return float(top[0] - top[1])


def _assert_lossless(target, prompt, ref, out) -> None:  # noqa: ANN001
    if out != ref:  # only a near-tie of the target's top-2 logits excuses a difference
        assert _gap_at_divergence(target, prompt, ref, out) < NEAR_TIE, (out, ref)


@pytest.mark.parametrize(
    "shape", [(1, 1, 2), (3, 4, 8), pytest.param((4, 2, 6), marks=pytest.mark.slow)]
)
def test_oracle_draft_is_accepted_and_lossless(target, prompts, cache_dir, shape) -> None:  # noqa: ANN001
    depth, topk, k = shape
    total_cycles = 0
    for prompt in prompts:
        ref = _reference(target, prompt, cache_dir)
        oracle = OracleDraft(prompt + ref, target.model.config.vocab_size)
        out = speculative_generate(
            target.model,
            oracle,
            prompt,
            max_new_tokens=N_NEW,
            depth=depth,
            topk=topk,
            num_draft_tokens=k,
            eos_ids=target.eos_token_ids,
        )
        _assert_lossless(target, prompt, ref, out.tokens)
        total_cycles += len(out.accept_lengths)
        if len(ref) > depth + 2:
            assert max(out.accept_lengths) == min(depth, k - 1) + 1


def test_oracle_with_wrong_proposals_is_partially_accepted_and_lossless(
    target,
    prompts,
    cache_dir,  # noqa: ANN001
) -> None:
    for prompt in prompts[:2]:
        ref = _reference(target, prompt, cache_dir)
        seq = prompt + ref
        wrong = frozenset(range(len(prompt) + 2, len(seq), 3))
        oracle = OracleDraft(seq, target.model.config.vocab_size, wrong_at=wrong)
        out = speculative_generate(
            target.model,
            oracle,
            prompt,
            max_new_tokens=N_NEW,
            depth=4,
            topk=1,
            num_draft_tokens=5,
            eos_ids=target.eos_token_ids,
        )
        _assert_lossless(target, prompt, ref, out.tokens)
        assert 1 < out.acceptance_length < 4


def _untrained_draft(target, seed: int, fusion_layers: tuple[int, ...] = ()) -> DraftModel:  # noqa: ANN001
    """A seeded 1-layer draft that was never trained (proposals mostly rejected);
    ``fusion_layers``: with EAGLE-3's hidden fusion of those target layers."""
    torch.manual_seed(seed)
    model = target.model
    arch = DraftArch.from_target(model.config, layers=1, output_norm=True,
                                 fusion_layers=fusion_layers)  # fmt: skip
    return DraftModel(
        arch,
        embed_weight=model.get_input_embeddings().weight,
        lm_head_weight=model.get_output_embeddings().weight,
        draft_to_target=torch.arange(4096),
    ).eval()


def test_untrained_draft_is_lossless(target, prompts, cache_dir) -> None:  # noqa: ANN001
    model, draft = target.model, _untrained_draft(target, seed=0)
    for prompt in prompts:
        ref = _reference(target, prompt, cache_dir)
        out = speculative_generate(
            model,
            draft,
            prompt,
            max_new_tokens=N_NEW,
            depth=3,
            topk=4,
            num_draft_tokens=8,
            eos_ids=target.eos_token_ids,
        )
        _assert_lossless(target, prompt, ref, out.tokens)


@pytest.mark.parametrize("b", [1, 3])
def test_batched_rows_of_different_lengths_are_lossless(target, prompts, cache_dir, b) -> None:  # noqa: ANN001
    batch = prompts[-b:]  # the chat prompts and a HumanEval prompt: different lengths
    assert b == 1 or len({len(p) for p in batch}) == b
    refs = [_reference(target, p, cache_dir) for p in batch]
    seqs = [p + r for p, r in zip(batch, refs, strict=True)]
    # wrong proposals at the same absolute positions fall at different offsets per row: ragged
    wrong = frozenset(range(min(map(len, batch)) + 3, max(map(len, seqs)), 4))
    oracle = OracleDraft(seqs, target.model.config.vocab_size, wrong_at=wrong)
    shape = TreeShape(depth=5, topk=2, num_draft_tokens=8)
    out = generate(
        target.model, oracle, batch, max_new_tokens=N_NEW, shape=shape, eos_ids=target.eos_token_ids
    )
    for prompt, ref, toks in zip(batch, refs, out.tokens, strict=True):
        _assert_lossless(target, prompt, ref, toks)
    firsts = {a[0] for a in out.accept_lengths}
    assert b == 1 or len(firsts) > 1, out.accept_lengths  # rows did accept different counts
    ar = ar_generate(target.model, batch, max_new_tokens=N_NEW, eos_ids=target.eos_token_ids)
    for prompt, ref, toks in zip(batch, refs, ar.tokens, strict=True):
        _assert_lossless(target, prompt, ref, toks)


def test_batched_untrained_draft_is_lossless(target, prompts, cache_dir) -> None:  # noqa: ANN001
    model, draft = target.model, _untrained_draft(target, seed=1)
    batch = prompts[-3:]
    shape = TreeShape(depth=3, topk=4, num_draft_tokens=8)
    out = generate(
        model, draft, batch, max_new_tokens=N_NEW, shape=shape, eos_ids=target.eos_token_ids
    )
    for prompt, toks in zip(batch, out.tokens, strict=True):
        _assert_lossless(target, prompt, _reference(target, prompt, cache_dir), toks)


def test_batched_fused_draft_is_lossless(target, prompts, cache_dir) -> None:  # noqa: ANN001
    """A draft with EAGLE-3's hidden fusion (target layers 2, 15, 27): the verify step returns
    the fused features and the logits of their last-layer part, token for token the greedy
    output."""
    layers = default_layers(target.model.config.num_hidden_layers)
    assert layers == (2, 15, 27)
    model, draft = target.model, _untrained_draft(target, seed=2, fusion_layers=layers)
    batch = prompts[-3:]
    shape = TreeShape(depth=3, topk=4, num_draft_tokens=8)
    out = generate(
        model, draft, batch, max_new_tokens=N_NEW, shape=shape, eos_ids=target.eos_token_ids
    )
    assert out.cycles > 0
    for prompt, toks in zip(batch, out.tokens, strict=True):
        _assert_lossless(target, prompt, _reference(target, prompt, cache_dir), toks)


def test_tree_sampling_keeps_the_real_next_token_distribution(target, prompts) -> None:  # noqa: ANN001
    """First token emitted by tree rejection sampling ~ the real target's softmax(logits / T)."""
    n_samples, temp = 20000, 0.8
    gen = torch.Generator().manual_seed(0)
    for prompt in prompts[-2:]:
        with torch.inference_mode():
            logits = target.model(input_ids=torch.tensor([prompt])).logits[0, -1].float()
        p = torch.softmax(logits / temp, -1)
        ranked = p.argsort(descending=True).tolist()
        # root, three children (2nd, 1st and 5th most likely tokens), a grandchild under child 1
        toks = torch.tensor([[0, ranked[1], ranked[0], ranked[4], ranked[0]]])
        lpar = torch.tensor([[0, 0, 0, 0, 1]])
        probs = torch.stack([p, p.roll(7), p, p, p])[None]
        last, bonus = accept_sampling(
            toks.expand(n_samples, -1),
            lpar.expand(n_samples, -1),
            probs.expand(n_samples, -1, -1),
            gen,
        )
        first = torch.where(last == 0, bonus, toks[0, torch.where(last == 4, 1, last)])
        counts = torch.bincount(first, minlength=p.numel())
        assert chi2_pvalue(counts, p) > 1e-3
