"""Batched tree speculative decoding on stub models: ragged acceptance, EOS, accounting, sampling.

The stub target counts up (greedy after t is t + 1), so every row's greedy output is known; rows
start from different tokens, so a draft that is wrong after one token makes rows accept different
numbers of tokens in the same cycle.
"""

from __future__ import annotations

import pytest
import torch

from tests.workloads.stats import chi2_pvalue
from tests.workloads.stubs import StubDraft, StubTarget, TableTarget, V, markov_probs
from workloads.engine.ar_decode import ar_generate
from workloads.engine.tree_decode import TreeShape, generate

F = {t: (t + 1) % V for t in range(V)}
PROMPTS = [[0, 1, 2], [7], [9, 10, 11, 12, 13]]  # different lengths, roots 3, 8, 14


def greedy(start: int, n: int, eos: frozenset[int] = frozenset()) -> list[int]:
    out, tok = [], start
    for _ in range(n):
        tok = F[tok]
        out.append(tok)
        if tok in eos:
            break
    return out


def run(g: dict[int, int], n: int = 10, eos: frozenset[int] = frozenset(), **shape: int):
    s = {"depth": 3, "topk": 2, "num_draft_tokens": 8} | shape
    target = StubTarget(F)
    res = generate(
        target, StubDraft(g), PROMPTS, max_new_tokens=n, shape=TreeShape(**s), eos_ids=eos
    )
    return res, target


def test_rows_of_different_lengths_equal_their_greedy_output() -> None:
    res, target = run(F, n=10)
    assert res.tokens == [greedy(p[-1], 10) for p in PROMPTS]
    # all proposals right: depth + 1 = 4 tokens per cycle until max_new_tokens cuts it
    assert all(a[:-1] == [4] * (len(a) - 1) for a in res.accept_lengths)
    assert target.calls == 1 + res.cycles


def test_ragged_acceptance_known_tau_per_row() -> None:
    g = dict(F)
    g[5] = 0  # after 5 the draft proposes 0: row 0 (root 3) rejects at 6 in its first cycle
    res, _ = run(g, n=9)
    assert res.tokens == [greedy(p[-1], 9) for p in PROMPTS]
    # row 0 from root 3: drafts 4 5 [0]: accepts 4 5, bonus 6 -> 3; rows 1 and 2 accept all -> 4
    assert [a[0] for a in res.accept_lengths] == [3, 4, 4]
    # accounting: 1 token from the prefill + the tokens of every cycle
    for toks, acc in zip(res.tokens, res.accept_lengths, strict=True):
        assert len(toks) == 1 + sum(acc)
    n_cycles = sum(len(a) for a in res.accept_lengths)
    assert res.acceptance_length == pytest.approx(sum(map(sum, res.accept_lengths)) / n_cycles)


def test_eos_inside_accepted_prefix_stops_that_row_only() -> None:
    eos = frozenset({10})  # row 0 (3, 4, ...) reaches 10 after 7 tokens; row 2 (14, ...) never
    res, _ = run(F, n=12, eos=eos)
    assert res.tokens[0] == greedy(2, 12, eos)
    assert res.tokens[0][-1] == 10 and len(res.tokens[0]) == 8
    assert res.tokens[2] == greedy(13, 12, eos) and len(res.tokens[2]) == 12
    # the cycle that hit EOS counts only the tokens up to EOS
    assert len(res.tokens[0]) == 1 + sum(res.accept_lengths[0])


@pytest.mark.parametrize("n", [1, 2, 5, 11])
def test_max_new_tokens_is_exact_per_row(n: int) -> None:
    res, _ = run(F, n=n)
    assert [len(t) for t in res.tokens] == [n] * 3
    assert res.tokens == [greedy(p[-1], n) for p in PROMPTS]


def test_ar_loop_equals_greedy_and_counts_steps() -> None:
    res = ar_generate(StubTarget(F), PROMPTS, max_new_tokens=6, eos_ids=frozenset({10}))
    assert res.tokens == [greedy(p[-1], 6, frozenset({10})) for p in PROMPTS]
    assert res.cycles == 5  # 6 tokens: 1 from the prefill + 5 steps


def test_empty_input_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        generate(
            StubTarget(F),
            StubDraft(F),
            [[]],
            max_new_tokens=3,
            shape=TreeShape(depth=1, topk=1, num_draft_tokens=2),
            eos_ids=frozenset(),
        )


SAMPLES = 3000
T = 0.9


def _sample_table(seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(V, V, generator=gen) * 1.5


def _sampled(draft_table: torch.Tensor) -> torch.Tensor:
    """SAMPLES rows of [prompt 0] -> 3 tokens each at temperature T: [SAMPLES, 3]."""
    target = TableTarget(_sample_table(1))
    draft = StubDraft({})
    draft.table = draft_table
    res = generate(
        target,
        draft,
        [[0]] * SAMPLES,
        max_new_tokens=3,
        shape=TreeShape(depth=2, topk=3, num_draft_tokens=6),
        eos_ids=frozenset(),
        temperature=T,
        generator=torch.Generator().manual_seed(0),
    )
    assert res.acceptance_length > 1.2  # the tree path is exercised, not just bonus tokens
    return torch.tensor(res.tokens)


def _chi2_p(samples: torch.Tensor, probs: torch.Tensor) -> float:
    return chi2_pvalue(torch.bincount(samples, minlength=probs.numel()), probs)


def test_tree_sampling_preserves_the_target_distribution() -> None:
    p = markov_probs(_sample_table(1), T)  # p[t] = next-token distribution after t
    draft_table = _sample_table(1) + torch.randn(V, V, generator=torch.Generator().manual_seed(5))
    out = _sampled(draft_table)
    joint = p[0][:, None] * p  # P(x1, x2) = p(x1 | 0) p(x2 | x1), flattened to V*V cells
    assert _chi2_p(out[:, 0] * V + out[:, 1], joint.flatten()) > 1e-3
    marginal3 = (p[0] @ p) @ p  # x3's marginal after two steps of the chain
    assert _chi2_p(out[:, 2], marginal3) > 1e-3


def test_chi_square_check_has_power() -> None:
    # negative control: the same samples against a wrong law (the draft's own) are rejected
    p = markov_probs(_sample_table(1), T)
    draft_table = _sample_table(1) + torch.randn(V, V, generator=torch.Generator().manual_seed(5))
    out = _sampled(draft_table)
    wrong = markov_probs(draft_table, T)
    assert _chi2_p(out[:, 0] * V + out[:, 1], (p[0][:, None] * wrong).flatten()) < 1e-6
