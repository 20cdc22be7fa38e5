"""Tree rejection sampling (:func:`workloads.engine.tree.accept_sampling`): its law, its vectorised
form (no host sync, no loop over rows), and T > 0 end to end on a tiny real transformer.

The law is checked against an exact enumeration of the sequential algorithm (SpecInfer, arXiv
2305.09781, Sec. 4.2); each chi-square check has a negative control that must fail.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.workloads.gpu_rules import HostSyncs
from tests.workloads.stats import chi2_pvalue
from tests.workloads.tiny import next_logits, tiny_draft, tiny_target
from workloads.engine.tree import accept_sampling
from workloads.engine.tree_decode import TreeShape, generate

Law = dict[tuple[int, int], float]


def exact_law(tokens: list[int], lpar: list[int], probs: torch.Tensor, renorm: bool = True) -> Law:
    """P(last, bonus) of the sequential walk on one tree, enumerated; ``renorm=False`` is the
    classic bug (a later sibling accepted with p(x), not r(x) / sum(r))."""
    law: Law = {}
    children = [[c for c in range(1, len(tokens)) if lpar[c] == j] for j in range(len(tokens))]

    def walk(node: int, mass: float) -> None:
        r = probs[node].double().clone()
        for c in children[node]:
            total = float(r.sum()) if renorm else float(probs[node].double().sum())
            acc = min(float(r[tokens[c]]) / total, 1.0) if total > 0 else 0.0
            walk(c, mass * acc)
            mass *= 1 - acc
            r[tokens[c]] = 0.0
        for tok, pr in enumerate((r / r.sum()).tolist()):
            if pr > 0:
                law[node, tok] = law.get((node, tok), 0.0) + mass * pr

    walk(0, 1.0)
    return law


def outcome_pvalue(last: torch.Tensor, bonus: torch.Tensor, law: Law) -> float:
    """Chi-square p-value of sampled (last, bonus) pairs against ``law``; an outcome of
    probability 0 must never be sampled."""
    cells = sorted(law)
    index = {cell: i for i, cell in enumerate(cells)}
    counts = torch.zeros(len(cells))
    for cell in zip(last.tolist(), bonus.tolist(), strict=True):
        assert cell in index, f"outcome {cell} has probability 0"
        counts[index[cell]] += 1
    return chi2_pvalue(counts, torch.tensor([law[c] for c in cells]))


def _trees(v: int) -> tuple[list[tuple[list[int], list[int]]], torch.Tensor]:
    """Two trees (tokens, parents) over one set of node distributions [8, v].

    Tree 0: the root's 4 children (a duplicate token, one of tiny mass), two grandchildren under
    the first child and a great-grandchild. Tree 1: 3 children, a grandchild under the second.
    The root's top token has half its mass, so renormalising the residual matters.
    """
    gen = torch.Generator().manual_seed(1)
    probs = torch.softmax(torch.randn(8, v, generator=gen) * 1.5, -1)
    ranked = probs[0].argsort(descending=True).tolist()
    probs[0, ranked[0]] = 0.0
    probs[0] *= 0.5 / probs[0].sum()
    probs[0, ranked[0]] = 0.5
    trees = [
        ([0, ranked[0], ranked[2], ranked[0], ranked[-1], ranked[1], ranked[3], 5],
         [0, 0, 0, 0, 0, 1, 1, 5]),
        ([0, ranked[1], ranked[0], ranked[4], ranked[0], 1, 2, 3],
         [0, 0, 0, 0, 2, 4, 4, 6]),
    ]  # fmt: skip
    return trees, probs


def _first_emitted(tokens: list[int], lpar: list[int], last: torch.Tensor, bonus: torch.Tensor):  # noqa: ANN202
    """The first token each sample emits: the depth-1 node on its path, else the bonus."""
    d1 = []
    for j in range(len(tokens)):
        while lpar[j] != 0:
            j = lpar[j]
        d1.append(tokens[j])
    return torch.where(last == 0, bonus, torch.tensor(d1)[last])


N_SAMPLES = 20000


def test_vectorised_walk_has_the_law_of_the_sequential_walk() -> None:
    # v = 300: a vocabulary of one full block and one short block of the bonus draw
    trees, probs = _trees(300)
    # rows alternate between two different trees in one call: rows must not interact
    toks = torch.tensor([trees[i % 2][0] for i in range(N_SAMPLES)])
    lpar = torch.tensor([trees[i % 2][1] for i in range(N_SAMPLES)])
    gen = torch.Generator().manual_seed(0)
    last, bonus = accept_sampling(toks, lpar, probs[None].expand(N_SAMPLES, -1, -1), gen)
    for i, (t, lp) in enumerate(trees):
        assert outcome_pvalue(last[i::2], bonus[i::2], exact_law(t, lp, probs)) > 1e-3
        # lossless: the first emitted token follows the root's distribution
        first = _first_emitted(t, lp, last[i::2], bonus[i::2])
        assert chi2_pvalue(torch.bincount(first, minlength=300), probs[0]) > 1e-3


def test_law_check_has_power() -> None:
    # negative control: the same kind of samples against the un-renormalised walk's law fail
    trees, probs = _trees(16)
    tokens, lpar = trees[0]
    n = N_SAMPLES // 2
    last, bonus = accept_sampling(
        torch.tensor([tokens]).expand(n, -1),
        torch.tensor([lpar]).expand(n, -1),
        probs[None].expand(n, -1, -1),
        torch.Generator().manual_seed(0),
    )
    assert outcome_pvalue(last, bonus, exact_law(tokens, lpar, probs, renorm=False)) < 1e-6


def test_zero_mass_tokens_are_never_drawn() -> None:
    v, n = 600, 4000  # support in the first, second, a middle and the short last block
    support = torch.tensor([3, 255, 256, 400, 599])
    p = torch.zeros(v)
    p[support] = torch.tensor([0.1, 0.2, 0.3, 0.15, 0.25])
    toks = torch.tensor([[0, 256]]).expand(n, -1)  # the root's one child: token 256
    last, bonus = accept_sampling(
        toks,
        torch.zeros(n, 2, dtype=torch.long),
        torch.stack([p, p])[None].expand(n, -1, -1),
        torch.Generator().manual_seed(0),
    )
    assert bool(torch.isin(bonus[last == 0], support[support != 256]).all())  # 256 was rejected
    assert bool(torch.isin(bonus[last == 1], support).all())
    assert 0.27 < float((last == 1).float().mean()) < 0.33  # accepted with p(256) = 0.3


# --- vectorised: no host sync, no per-row work -------------------------------------------------


def _batch(b: int, v: int = 64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """b rows of random trees (depth 3, topk 2, 8 nodes: parents precede children)."""
    gen = torch.Generator().manual_seed(seed)
    lpar = torch.tensor([0, 0, 0, 1, 1, 2, 3, 3]).repeat(b, 1)
    lpar[:, 5] = torch.randint(1, 3, (b,), generator=gen)  # ragged shapes across rows
    toks = torch.randint(0, v, (b, 8), generator=gen)
    probs = torch.softmax(torch.randn(b, 8, v, generator=gen) * 2, -1)
    return toks, lpar, probs


def _syncs(fn: Callable[..., Any], *args: Any) -> list[str]:
    with HostSyncs() as rec:
        fn(*args)
    return rec.seen


def test_acceptance_reads_nothing_on_the_host() -> None:
    toks, lpar, probs = _batch(64)
    assert _syncs(accept_sampling, toks, lpar, probs, torch.Generator().manual_seed(0)) == []
    # control: the recorder sees a host read (the old per-child loop did one per child)
    assert _syncs(lambda t: float(t.sum()), probs) == ["__float__"]


def _best_time(fn: Callable[[], object], repeats: int = 7) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def test_cost_is_flat_in_the_batch_size() -> None:
    # no Python loop over rows: 64 rows cost about what one row costs (the old loop: ~64x)
    # (one thread: on a loaded 2-core machine waking the intra-op pool costs milliseconds)
    one, many = _batch(1), _batch(64)
    gen, threads = torch.Generator().manual_seed(0), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        accept_sampling(*many, gen)  # warm up
        t1 = _best_time(lambda: accept_sampling(*one, gen))
        t64 = _best_time(lambda: accept_sampling(*many, gen))
    finally:
        torch.set_num_threads(threads)
    assert t64 < 6 * t1, (t1, t64)


# --- T > 0 end to end on a tiny real transformer -------------------------------------------------

V8 = 8  # a small vocabulary: drafts are often accepted, and the joint of 2 tokens has 64 cells
PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 0], [7]]  # b = 3 ragged prompts, each replicated R times
R = 700
TEMP = 1.0


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    target = tiny_target(seed=0, vocab=V8)
    return target, tiny_draft(target, seed=1)


def _samples(tiny: tuple[Any, Any], reps: int = R) -> tuple[torch.Tensor, list[list[int]]]:
    """[3 * reps, 3] first three tokens of every row (row i is prompt i % 3), accept lengths."""
    target, draft = tiny
    res = generate(
        target,
        draft,
        PROMPTS * reps,
        max_new_tokens=3,
        shape=TreeShape(depth=2, topk=4, num_draft_tokens=8),
        eos_ids=frozenset(),
        temperature=TEMP,
        generator=torch.Generator().manual_seed(0),
    )
    return torch.tensor(res.tokens), res.accept_lengths


def _law(target: Any, prompt: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's own sampling law: joint of (x1, x2) [V*V] and the marginal of x3 [V]."""
    p1 = torch.softmax(next_logits(target, [prompt]) / TEMP, -1)[0]
    p2 = torch.softmax(next_logits(target, [prompt + [a] for a in range(V8)]) / TEMP, -1)
    pairs = [prompt + [a, b] for a in range(V8) for b in range(V8)]
    p3 = torch.softmax(next_logits(target, pairs) / TEMP, -1)
    joint = (p1[:, None] * p2).flatten()
    return joint, joint @ p3


def _pvalues(samples: torch.Tensor, target: Any, law_prompt: Callable[[int], list[int]]):  # noqa: ANN202
    out = []
    for i in range(len(PROMPTS)):
        rows = samples[i :: len(PROMPTS)]
        joint, third = _law(target, law_prompt(i))
        pair = rows[:, 0] * V8 + rows[:, 1]
        out.append(chi2_pvalue(torch.bincount(pair, minlength=V8 * V8), joint))
        out.append(chi2_pvalue(torch.bincount(rows[:, 2], minlength=V8), third))
    return out


@pytest.fixture(scope="module")
def sampled(tiny) -> tuple[torch.Tensor, list[list[int]]]:  # noqa: ANN001
    return _samples(tiny)


def test_tiny_transformer_samples_as_the_target_with_ragged_acceptance(tiny, sampled) -> None:  # noqa: ANN001
    samples, accept = sampled
    firsts = [a[0] for a in accept]
    assert len(set(firsts)) > 1  # rows of the batch accepted different numbers in one cycle
    assert sum(firsts) / len(firsts) > 1.2  # the tree path is exercised, not just bonus tokens
    assert min(_pvalues(samples, tiny[0], lambda i: PROMPTS[i])) > 1e-3


def test_tiny_transformer_check_has_power(tiny, sampled, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    # controls: the samples against another prompt's law fail, and so does an engine whose
    # acceptance keeps the draft's first child always (no rejection)
    samples, _ = sampled
    assert max(_pvalues(samples, tiny[0], lambda i: PROMPTS[(i + 1) % 3])[::2]) < 1e-6

    def first_child_always(tokens_bn, lpar_bn, probs_bnv, generator=None):  # noqa: ANN001, ANN202
        b, n = tokens_bn.shape
        last = torch.zeros(b, dtype=torch.long)
        for i in range(1, n):  # node i extends the path: its parent ends it, it is the first child
            is_first = ~(lpar_bn[:, 1:i] == lpar_bn[:, i : i + 1]).any(1)
            last = torch.where((lpar_bn[:, i] == last) & is_first, i, last)
        bonus = torch.multinomial(probs_bnv[torch.arange(b), last], 1, generator=generator)[:, 0]
        return last, bonus

    monkeypatch.setattr("workloads.engine.tree_decode.accept_sampling", first_child_always)
    broken, _ = _samples(tiny, reps=R // 3)
    assert max(_pvalues(broken, tiny[0], lambda i: PROMPTS[i])[::2]) < 1e-6
