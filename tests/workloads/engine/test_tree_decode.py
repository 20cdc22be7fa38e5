"""Accept logic of tree speculative decoding on stub models with fixed logits."""

from __future__ import annotations

import pytest

from tests.workloads.stubs import StubDraft, StubTarget, V
from workloads.engine.tree_decode import speculative_generate

F = {t: (t + 1) % V for t in range(V)}  # the target counts up: greedy of 3 is 4, 5, 6, ...
WRONG = {t: (t + 5) % V for t in range(V)}


def greedy(start: int, n: int) -> list[int]:
    out, tok = [], start
    for _ in range(n):
        tok = F[tok]
        out.append(tok)
    return out


def decode(
    g: dict[int, int],
    *,
    n: int = 12,
    depth: int = 3,
    topk: int = 2,
    k: int = 8,
    eos: frozenset[int] = frozenset({15}),
):
    target = StubTarget(F)
    res = speculative_generate(
        target,
        StubDraft(g),
        [0, 1, 2],
        max_new_tokens=n,
        depth=depth,
        topk=topk,
        num_draft_tokens=k,
        eos_ids=eos,
    )
    return res, target


def test_all_accepted_takes_depth_plus_one_tokens_per_cycle() -> None:
    res, target = decode(F)
    assert res.tokens == greedy(2, 12)
    assert res.accept_lengths[:-1] == [4] * (len(res.accept_lengths) - 1)
    assert target.calls == 1 + len(res.accept_lengths)  # prefill + one verify per cycle


def test_none_accepted_gives_acceptance_length_one() -> None:
    res, _ = decode(WRONG)
    assert res.tokens == greedy(2, 12)
    assert res.accept_lengths == [1] * 11
    assert res.acceptance_length == 1.0


def test_partial_acceptance_stops_at_first_wrong_proposal() -> None:
    g = dict(F)
    g[5] = 9  # after token 5 the draft proposes 9, the target wants 6
    res, _ = decode(g, n=9)
    assert res.tokens == greedy(2, 9)  # 3 4 5 6 7 8 9 10 11
    # prefill gives 3; cycle 1 from root 3: 4 5 accepted, 9 rejected, bonus 6 -> 3 tokens
    assert res.accept_lengths[0] == 3


def test_second_branch_of_the_tree_is_accepted() -> None:
    # top-1 proposal wrong, second choice right: with topk 2 the tree holds both
    g = {t: (t + 7) % V for t in range(V)}
    target = StubTarget(F)
    draft = StubDraft(g)
    for t in range(V):  # make the right token the second-best child
        draft.table[t, F[t]] = 9.0
    res = speculative_generate(
        target,
        draft,
        [0, 1, 2],
        max_new_tokens=8,
        depth=2,
        topk=2,
        num_draft_tokens=7,
        eos_ids=frozenset(),
    )
    assert res.tokens == greedy(2, 8)
    assert max(res.accept_lengths) == 3


def test_eos_inside_accepted_prefix_stops_and_counts() -> None:
    res, _ = decode(F, n=40, eos=frozenset({9}))
    assert res.tokens == greedy(2, 7)  # 3..9, 9 is EOS
    assert res.tokens[-1] == 9


@pytest.mark.parametrize("n", [1, 2, 5, 13])
def test_max_new_tokens_is_exact(n: int) -> None:
    res, _ = decode(F, n=n, eos=frozenset())
    assert len(res.tokens) == n
    assert res.tokens == greedy(2, n)
