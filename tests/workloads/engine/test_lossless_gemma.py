"""Losslessness on the real second target, Gemma-3-270M (sliding-window and global layers, a
262K-token head, a scaled embedding), on real prompts shorter and longer than its 512-token
window: speculative output equals the target's greedy output token for token in float32, and in
bfloat16 differs only at near-ties of the dtype's rule. Slow (the first run converts the GGUF,
~60 s, then ~3 min): ``make test-slow``; the default suite's counterpart is the tiny random
Gemma of ``test_sliding_window.py`` and ``test_gpu_rules.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import SPECBENCH
from workloads.data import chat_prompt_ids, load_prompt_sets
from workloads.engine.oracle_draft import OracleDraft
from workloads.engine.tree_decode import TreeShape, generate, speculative_generate
from workloads.measure.decode import divergence
from workloads.models.draft import DraftArch, DraftModel
from workloads.models.target import Target, embedding_scale, load_target
from workloads.training.evaluation import greedy_reference

pytestmark = pytest.mark.slow

N_NEW = 20
WINDOW = 512


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def gemma(request: pytest.FixtureRequest, cache_dir: Path) -> Target:
    return load_target("gemma-3-270m", cache_dir=cache_dir, dtype=request.param)


@pytest.fixture(scope="module")
def prompts(gemma: Target) -> list[list[int]]:
    """Two HumanEval prompts and two CNN/DM articles (Spec-Bench's sum set) past the window."""
    sets = {s.name: s for s in load_prompt_sets(SPECBENCH, n=12)}
    texts = sets["humaneval"].prompts[:2]
    ids = [chat_prompt_ids(gemma.tokenizer, t) for t in texts]
    long = [chat_prompt_ids(gemma.tokenizer, t) for t in sets["sum"].prompts]
    ids += [p for p in long if WINDOW < len(p) < 2 * WINDOW][:2]
    assert len(ids) == 4 and max(map(len, ids)) > WINDOW
    return ids


def _greedy(gemma: Target, prompt: list[int], cache_dir: Path) -> list[int]:
    tokens, _ = greedy_reference(
        gemma.model, prompt, max_new_tokens=N_NEW, eos_ids=gemma.eos_token_ids,
        cache_dir=cache_dir, target_name=f"{gemma.name}@{gemma.model.dtype}",
    )  # fmt: skip
    return tokens


def _assert_lossless(gemma: Target, prompt: list[int], ref: list[int], out: list[int]) -> None:
    found = divergence(gemma, prompt, ref, out)
    if gemma.model.dtype == torch.float32:
        assert found is None, found  # float32: token for token
    else:
        assert found is None or found["kind"] == "near_tie", found


def test_oracle_and_untrained_drafts_are_lossless(gemma: Target, prompts, cache_dir) -> None:  # noqa: ANN001
    model = gemma.model
    torch.manual_seed(0)
    arch = DraftArch.from_target(model.config, layers=1, output_norm=True,
                                 embed_scale=embedding_scale(model))  # fmt: skip
    assert arch.embed_scale == pytest.approx(640**0.5, rel=4e-3)  # bfloat16 rounds it to 25.25
    draft = DraftModel(
        arch, embed_weight=model.get_input_embeddings().weight,
        lm_head_weight=model.get_output_embeddings().weight, draft_to_target=torch.arange(8192),
    ).eval()  # fmt: skip
    for prompt in prompts:
        ref = _greedy(gemma, prompt, cache_dir)
        for d in (OracleDraft(prompt + ref, model.config.vocab_size), draft):
            out = speculative_generate(
                model, d, prompt, max_new_tokens=N_NEW, depth=3, topk=4, num_draft_tokens=8,
                eos_ids=gemma.eos_token_ids,
            )  # fmt: skip
            _assert_lossless(gemma, prompt, ref, out.tokens)
            if isinstance(d, OracleDraft) and model.dtype == torch.float32:
                assert out.acceptance_length > 3.0  # the greedy output proposed is accepted


def test_a_batch_across_the_window_is_lossless(gemma: Target, prompts, cache_dir) -> None:  # noqa: ANN001
    refs = [_greedy(gemma, p, cache_dir) for p in prompts]
    oracle = OracleDraft([p + r for p, r in zip(prompts, refs, strict=True)],
                         gemma.model.config.vocab_size)  # fmt: skip
    res = generate(
        gemma.model, oracle, prompts, max_new_tokens=N_NEW,
        shape=TreeShape(depth=3, topk=4, num_draft_tokens=8), eos_ids=gemma.eos_token_ids,
    )  # fmt: skip
    for prompt, ref, out in zip(prompts, refs, res.tokens, strict=True):
        _assert_lossless(gemma, prompt, ref, out)
